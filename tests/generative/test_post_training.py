"""Post-training of generative recommenders: the preference losses (S-DPO with one negative is DPO; hand-checked
values), preference data from the training split only, the reference log-probabilities computed once, cached,
frozen and carried by checkpoints, distillation targets summed through the code prefixes, distillation with weight
0 equal to plain training, and stages started from another run's weights (``init_from``)."""
from __future__ import annotations

import copy
import dataclasses
import math

import lightning as L
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from genrec.conf import CONF_DIR, compose_config
from genrec.data.batch import JaggedBatch, collate
from genrec.data.datamodule import load_dataset
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError, UserError
from genrec.models.distill import distillation_loss, item_distillation_loss, level_targets, teacher_top_k
from genrec.models.generative import GenerativeRecommender
from genrec.models.preference import preference_loss
from genrec.tokenize.sid_table import PAD_CODE, SIDTable
from genrec.training.align import CHECKPOINT_KEY, AlignConfig, AlignTask
from genrec.training.builders import build_datamodule, build_task, initialize
from genrec.training.distill import DistillConfig, DistillTask
from genrec.training.generative import GenerativeTask
from genrec.training.preferences import (beam_negatives, example_keys, mine_preferences, popularity_negatives,
                                         preference_examples, sampled_negatives)
from genrec.training.stages import stage_config, stage_settings
from genrec.trust import resolve_target
from tests.conftest import TINY_RUN, load_script
from tests.generative.helpers import one_thread, tiny_sid_table

single_thread = pytest.fixture(autouse=True, scope="module")(one_thread)

#: the tiny synthetic dataset of tests/conftest.py (the SASRec teacher `tiny_run` trains on it)
DATA = [o for o in TINY_RUN if o.startswith("data.reader.")] + ["data.max_len=10", "data.batch_size=64"]
GENERATOR = ["model=sid_gpt", "model.dim=16", "model.backbone.num_layers=1", "model.backbone.ffn_dim=32"]


def _compose(overrides):
    return compose_config("train", overrides=overrides)


# ---- losses ------------------------------------------------------------------------------------------------------

def test_sdpo_with_one_negative_equals_dpo():
    g = torch.Generator().manual_seed(0)
    policy = torch.randn(32, 2, generator=g, requires_grad=True)
    reference = torch.randn(32, 2, generator=g)
    results = {}
    for kind in ("dpo", "sdpo"):
        out = preference_loss(kind, policy[:, 0], policy[:, 1:], reference[:, 0], reference[:, 1:], beta=0.5)
        grad, = torch.autograd.grad(out.losses.mean(), policy)
        results[kind] = (out.losses, grad)
    assert torch.allclose(results["dpo"][0], results["sdpo"][0], atol=1e-7, rtol=0)
    assert torch.allclose(results["dpo"][1], results["sdpo"][1], atol=1e-8, rtol=0)


def test_preference_losses_hand_checked():
    zero = torch.zeros(1)
    # every reward 0: DPO is -log sigmoid(0) = log 2 per pair; S-DPO over K rejected is log(1 + K)
    rejected = torch.zeros(1, 3)
    assert float(preference_loss("dpo", zero, rejected, zero, rejected, 1.0).losses) == pytest.approx(math.log(2))
    assert float(preference_loss("sdpo", zero, rejected, zero, rejected, 1.0).losses) == pytest.approx(math.log(4))
    # chosen log-ratio +1, rejected log-ratios [-1, 0] at beta 2: rewards 2 and [-2, 0]
    out = preference_loss("sdpo", torch.tensor([1.0]), torch.tensor([[-1.0, 0.0]]), zero, torch.zeros(1, 2), 2.0)
    assert float(out.losses) == pytest.approx(math.log(1 + math.exp(-4) + math.exp(-2)))
    assert float(out.stats()["reward_margin"]) == pytest.approx(2 - (-1)) and float(out.stats()["reward_accuracy"]) == 1
    dpo = preference_loss("dpo", torch.tensor([1.0]), torch.tensor([[-1.0, 0.0]]), zero, torch.zeros(1, 2), 2.0)
    assert float(dpo.losses) == pytest.approx((math.log1p(math.exp(-4)) + math.log1p(math.exp(-2))) / 2)


# ---- preference data ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The tiny dataset's cache and a SID table of its items (random codes 8 x 8 x 4)."""
    tmp = tmp_path_factory.mktemp("post")
    tiny_sid_table(tmp / "sid", cache_dir=tmp / "cache")
    return tmp


def _mine(task: AlignTask, data, max_len: int) -> dict:
    """The stage's preference cache, mined by ``task``'s model as it is now."""
    return mine_preferences(task.model, data, max_len, task.align, task.seed, task.reference_batch_size, task.device)


def _base(workdir) -> list[str]:
    return DATA + GENERATOR + [f"sid_table={workdir / 'sid'}", f"data.cache_dir={workdir / 'cache'}", "seed=3"]


def _with_other_held_out_items(data: SequenceData, seed: int) -> SequenceData:
    """The same data with every user's validation and test items replaced by other items."""
    items = data.item_ids.copy()
    held_out = np.concatenate([data.offsets[1:] - 2, data.offsets[1:] - 1])
    items[held_out] = np.random.default_rng(seed).integers(1, data.num_items + 1, len(held_out))
    assert (items[held_out] != data.item_ids[held_out]).mean() > 0.9
    return SequenceData(data.name, items, data.offsets, data.timestamps, data.item_raw_ids, data.user_raw_ids)


@pytest.mark.parametrize("positions", ["last", "all"])
def test_preference_data_never_touches_validation_or_test_items(workdir, positions):
    cfg = _compose(_base(workdir) + ["stage=dpo"])
    dm = build_datamodule(cfg)
    dm.setup()
    data = dm.data
    task = build_task(cfg, data.num_items, data.item_raw_ids).eval()
    made = {}
    for name, d in (("original", data), ("other held-out items", _with_other_held_out_items(data, 1))):
        examples = preference_examples(d, dm.max_len, positions)
        prompts = [list(examples.prompts(b).item_ids.tolist()) for _, b in examples.batches(50)]
        made[name] = (examples.keys, examples.users, examples.chosen, examples.popularity, prompts,
                      popularity_negatives(examples, 5, seed=0),
                      beam_negatives(task.model, examples, 4, 50, torch.device("cpu")),
                      sampled_negatives(task.model, examples, 4, 50, torch.device("cpu"), seed=0))
    for a, b in zip(*made.values()):
        assert np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    keys, users, chosen, _, prompts, popular, hard, sampled = made["original"]
    # the examples: each training user's last training item, or every target of its training sequence (max_len
    # inputs at most), user after user
    expected = [(u, end) for u in np.flatnonzero(data.train_lengths >= 2)
                for end in range(int(data.valid_at[u]) - 1 if positions == "last" else
                                 max(int(data.offsets[u]) + 1, int(data.valid_at[u]) - dm.max_len),
                                 int(data.valid_at[u]))]
    assert [(int(u), int(k)) for u, k in zip(users, keys)] == expected
    assert np.array_equal(chosen, data.item_ids[keys])
    assert len(popular) == len(hard) == len(sampled) == len(keys) and (sampled > 0).mean() > 0.9
    for row, user in enumerate(users):
        training = set(data.sequence(user)[:-2].tolist())
        if positions == "last":
            assert chosen[row] == data.sequence(user)[-3]  # the last training item
        assert not set(popular[row].tolist()) & training and len(set(popular[row].tolist())) == 5
        assert not set(hard[row].tolist()) & training and not set(sampled[row].tolist()) & training
        assert len(set(sampled[row].tolist()) - {0}) == (sampled[row] > 0).sum()  # distinct


def test_every_position_prompt_is_the_sequence_up_to_it_and_its_reference_the_sft_likelihood(workdir):
    """``positions=all``: the cached reference log-probability of each chosen item equals, for a few users, the
    model's log-probability of that item after the prompt built by hand (the training window up to it, scored
    without the KV cache), and for every example the teacher-forced log-probability of the whole sequence at that
    position (one pass, as next-token training computes it); the examples' last positions carry the same chosen
    items and reference log-probabilities as ``positions=last``."""
    cfg = _compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3", "stage.positions=all"])
    dm = build_datamodule(cfg)
    dm.setup()
    data = dm.data
    task = build_task(cfg, data.num_items, data.item_raw_ids).eval()
    cache = _mine(task, data, dm.max_len)
    examples = preference_examples(data, dm.max_len, "all")
    for user in np.unique(examples.users)[:4]:
        for key in examples.keys[examples.users == user]:
            start = max(int(data.offsets[user]), int(data.valid_at[user]) - dm.max_len - 1)  # the training window
            prompt = JaggedBatch(item_ids=torch.tensor(data.item_ids[start:key]),
                                 offsets=torch.tensor([0, key - start]), target_ids=torch.zeros(1, dtype=torch.int64),
                                 user_ids=torch.tensor([user]))
            candidates = torch.cat([cache["chosen"][key, None], cache["negatives"][key]])[None]
            with torch.no_grad():
                by_hand = task.model.item_log_probs(prompt, candidates, use_cache=False)[0]
            assert torch.allclose(cache["reference_log_probs"][key], by_hand, atol=1e-5)
    teacher_forced = torch.zeros(len(data.item_ids))
    sequences = examples.dataset
    with torch.no_grad():
        for first in range(0, len(sequences), 64):
            batch = collate([sequences[i] for i in range(first, min(first + 64, len(sequences)))])
            out = task.model.target_log_probs(batch)
            per_item = out.code_log_probs(task.model.sids.codes[out.items]).sum(1)
            keys = example_keys(batch, "all", cache["valid_at"])[0]  # (N,) in the batch's position order
            predicted = out.positions >= 0
            teacher_forced[keys[out.positions[predicted]]] = per_item[predicted]
    at = torch.from_numpy(examples.keys)
    assert torch.allclose(cache["reference_log_probs"][at, 0], teacher_forced[at], atol=1e-4)
    last = build_task(_compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3"]), data.num_items,
                      data.item_raw_ids).eval()
    last.model.load_state_dict(task.model.state_dict())
    last_cache = _mine(last, data, dm.max_len)
    ends = torch.from_numpy(preference_examples(data, dm.max_len, "last").keys)
    assert int((last_cache["chosen"] > 0).sum()) == len(ends) and int((cache["chosen"] > 0).sum()) == len(at)
    assert torch.equal(last_cache["chosen"][ends], cache["chosen"][ends])
    assert torch.allclose(last_cache["reference_log_probs"][ends, 0], cache["reference_log_probs"][ends, 0], atol=1e-5)


def test_sampled_items_follow_the_models_distribution_over_items(workdir, tmp_path):
    """GenerativeRecommender.sample on a SID table whose codes (8 x 15) are every item's and nothing else: then the
    constrained sampler draws from the model's distribution over items, and the frequencies of 20,000 draws per user
    match item_log_probs of every item."""
    cfg = _compose(_base(workdir))
    dm = build_datamodule(cfg)
    dm.setup()
    data = dm.data
    assert data.num_items == 8 * 15
    every = np.array(np.meshgrid(np.arange(8), np.arange(15), indexing="ij")).reshape(2, -1).T
    codes = every[np.random.default_rng(1).permutation(len(every))]
    SIDTable(np.vstack([np.full((1, 2), PAD_CODE), codes]), (8, 15), data.item_raw_ids,
             dataset=data.name).save(tmp_path / "sid")
    cfg = _compose(_base(workdir) + [f"sid_table={tmp_path / 'sid'}"])
    torch.manual_seed(0)  # the weights (building a task does not seed them)
    model = build_task(cfg, data.num_items, data.item_raw_ids).model.eval()
    for p in model.parameters():  # a sharper distribution than the random initialisation's near-uniform one
        p.data.mul_(8)
    _, batch = next(preference_examples(data, dm.max_len).batches(3))
    draws = model.sample(batch, 20_000, torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model.item_log_probs(batch, torch.arange(1, data.num_items + 1).expand(3, -1)).exp()
    assert torch.allclose(expected.sum(1), torch.ones(3), atol=1e-5)  # every tuple is an item
    for row in range(3):
        counts = torch.bincount(draws[row], minlength=data.num_items + 1)
        assert counts[0] == 0 and expected[row].max() > 0.1
        frequencies = counts[1:].double() / 20_000
        assert 0.5 * (frequencies - expected[row]).abs().sum() < 0.03  # total variation


def test_beam_negatives_are_the_models_top_wrong_items(workdir):
    """With a beam as wide as the 8 x 8 code prefixes the search is exhaustive, so its top wrong items are exactly
    the top of item_log_probs over every item (a narrower beam may prune one, depending on the random weights)."""
    cfg = _compose(_base(workdir) + ["model.decoding.beam=64"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids).eval()
    examples = preference_examples(dm.data, dm.max_len)
    hard = beam_negatives(task.model, examples, 3, 64, torch.device("cpu"))
    _, batch = next(examples.batches(8))
    with torch.no_grad():
        every = task.model.item_log_probs(batch, torch.arange(1, dm.data.num_items + 1).expand(8, -1))
    for row in range(8):
        ranked = [i + 1 for i in every[row].argsort(descending=True).tolist()
                  if i + 1 not in set(batch.seen_ids[batch.seen_offsets[row]:batch.seen_offsets[row + 1]].tolist())]
        assert hard[row].tolist() == ranked[:3]
    assert np.array_equal(beam_negatives(task.model, examples, 2, 64, torch.device("cpu"), skip=1), hard[:, 1:])


def test_with_ranking_scores_beam_negatives_are_the_top_of_the_models_ranking(workdir):
    """``stage.score=ranking`` takes hard negatives from what the model recommends (:meth:`ranked`), not from its code
    beam: with ``rank=items`` that is the item head's top unseen items over the corpus, a hand-checkable list."""
    cfg = _compose(_base(workdir) + ["model.generator.item_head=true", "model.decoding.rank=items"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids).eval()
    examples = preference_examples(dm.data, dm.max_len)
    hard = beam_negatives(task.model, examples, 3, 64, torch.device("cpu"), ranked=True)
    assert not np.array_equal(hard, beam_negatives(task.model, examples, 3, 64, torch.device("cpu")))
    _, batch = next(examples.batches(8))
    with torch.no_grad():
        head = task.model.item_head_log_probs(batch)
    for row in range(8):
        seen = set(batch.seen_ids[batch.seen_offsets[row]:batch.seen_offsets[row + 1]].tolist())
        top = [i for i in head[row].argsort(descending=True).tolist() if i != 0 and i not in seen]
        assert examples.chosen[row] in seen and hard[row].tolist() == top[:3]
    top5 = beam_negatives(task.model, examples, 5, 64, torch.device("cpu"), ranked=True)
    assert np.array_equal(beam_negatives(task.model, examples, 3, 64, torch.device("cpu"), ranked=True, skip=2),
                          top5[:, 2:])
    top_k = task.model.top_k
    with pytest.raises(ConfigError, match=rf"beam_skip \+ num_negatives = {top_k + 1} is past the {top_k} items"):
        beam_negatives(task.model, examples, 3, 64, torch.device("cpu"), ranked=True, skip=top_k - 2)


# ---- the reference cache -----------------------------------------------------------------------------------------

def _fit(task, dm, steps: int, ckpt_path=None) -> L.Trainer:
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                        accelerator="cpu", use_distributed_sampler=False)
    trainer.fit(task, datamodule=dm, ckpt_path=ckpt_path, weights_only=True)
    return trainer


def test_reference_log_probs_are_computed_once_cached_frozen_and_checkpointed(workdir, tmp_path):
    cfg = _compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    assert isinstance(task, AlignTask)
    initial = copy.deepcopy(task.model.state_dict())
    trainer = _fit(task, dm, steps=4)
    assert task.reference_passes == 1
    cached = task.preferences["reference_log_probs"].clone()
    assert not cached.requires_grad
    # frozen: the cache holds the initial weights' log-probabilities, which the trained policy no longer gives
    fresh = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    fresh.model.load_state_dict(initial)
    assert torch.allclose(_mine(fresh, dm.data, dm.max_len)["reference_log_probs"], cached, atol=1e-6)
    moved = _mine(task, dm.data, dm.max_len)["reference_log_probs"]
    assert (moved - cached).abs().max() > 1e-3
    # a stage resumed from a checkpoint reads the cache back instead of recomputing it from the moved weights
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    resumed = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    _fit(resumed, dm, steps=6, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.reference_passes == 0
    assert torch.equal(resumed.preferences["reference_log_probs"], cached)
    assert torch.equal(resumed.preferences["negatives"], task.preferences["negatives"])
    # what the steps did, over every training example: policy != reference
    assert task.preference_stats(dm.data, dm.max_len)["loss"] != pytest.approx(math.log(4), abs=1e-4)


def test_preference_stats_of_the_reference_weights_are_neutral(workdir):
    cfg = _compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.preferences = _mine(task, dm.data, dm.max_len)
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
              use_distributed_sampler=False).test(task, datamodule=dm, verbose=False)
    stats = task.run_info()["align"]["tested_weights_on_training_examples"]
    assert stats == task.preference_stats(dm.data, dm.max_len)
    for name in ("chosen_log_ratio", "rejected_log_ratio", "chosen_reward", "rejected_reward", "reward_margin"):
        assert stats[name] == pytest.approx(0.0, abs=1e-5), name
    assert stats["loss"] == pytest.approx(math.log(1 + 3), abs=1e-5)  # S-DPO with every reward 0
    assert stats["reward_accuracy"] == 0.0


def test_branched_cache_scores_every_prefix_like_one_prompt_per_prefix(workdir):
    """SIDGenerator.prefix_item_log_probs on genrec's SASRec stack (one pass over each whole sequence, the candidates
    branched off the cache) = item_log_probs on one prompt per position (:func:`prefixes`), values and gradients."""
    cfg = _compose(_base(workdir) + ["model.backbone.num_heads=2"])
    dm = build_datamodule(cfg)
    dm.setup()
    model = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids).model.eval()
    assert model.backbone.supports_branching
    batch = next(iter(dm.train_dataloader()))
    g = torch.Generator().manual_seed(0)
    items = torch.randint(1, dm.data.num_items + 1, (len(batch.item_ids), 5), generator=g)
    results = []
    for method in (model.prefix_item_log_probs, lambda b, i: GenerativeRecommender.prefix_item_log_probs(model, b, i)):
        model.zero_grad()
        log_probs = method(batch, items)
        log_probs.sum().backward()
        results.append((log_probs.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (fast, fast_grads), (slow, slow_grads) = results
    assert fast.shape == items.shape and torch.allclose(fast, slow, atol=1e-5)
    assert len(fast_grads) == len(slow_grads) > 0
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(fast_grads, slow_grads))


@pytest.mark.parametrize("positions", ["last", "all"])
def test_at_the_reference_weights_every_training_batch_loss_is_neutral(workdir, positions):
    """Before any step the policy is the reference: every example's rewards are 0, so S-DPO's loss is log(1 + K)
    on every training batch; this needs each example's cached negatives and reference read back at its own key."""
    cfg = _compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3", f"stage.positions={positions}"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.preferences = _mine(task, dm.data, dm.max_len)
    task.train()  # dropout is off in alignment stages (align.disable_dropout)
    with torch.no_grad():
        for batch in dm.train_dataloader():
            assert float(task.training_loss(batch)) == pytest.approx(math.log(4), abs=1e-5)


ITEM_HEAD = ["model.generator.item_head=true", "model.decoding.rank=guided", "model.decoding.code_weight=0.5"]


@pytest.mark.parametrize("positions", ["last", "all"])
def test_ranking_score_rewards_compare_the_scores_the_model_ranks_by(workdir, positions):
    """``stage.score=ranking`` on a generator that ranks with its item head (``rank=guided``, code weight 0.5): the
    cached reference holds 0.5 x code plus item-head log-probability of every candidate (not the code
    log-probability), and at the reference weights every training batch's loss is neutral."""
    cfg = _compose(_base(workdir) + ITEM_HEAD + ["stage=sdpo", "stage.num_negatives=3", "stage.score=ranking",
                                                 f"stage.positions={positions}"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.preferences = cache = _mine(task, dm.data, dm.max_len)
    model = task.model.eval()
    examples = preference_examples(dm.data, dm.max_len, positions)
    rows, batch = next(examples.batches(16))
    keys = torch.from_numpy(examples.keys[rows])
    candidates = torch.cat([cache["chosen"][keys, None], cache["negatives"][keys]], dim=1)
    prompts = examples.prompts(batch)
    with torch.no_grad():
        head = model.item_head_log_probs(prompts).gather(1, candidates)
        codes = model.item_log_probs(prompts, candidates)
    assert torch.allclose(cache["reference_log_probs"][keys], head + 0.5 * codes, atol=1e-4)
    assert not torch.allclose(cache["reference_log_probs"][keys], codes, atol=1e-2)
    task.train()
    with torch.no_grad():
        for batch in dm.train_dataloader():
            assert float(task.training_loss(batch)) == pytest.approx(math.log(4), abs=1e-5)


def test_a_checkpoint_with_a_per_user_preference_cache_is_refused(workdir):
    cfg = _compose(_base(workdir) + ["stage=sdpo"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    with pytest.raises(UserError, match="keyed by user"):
        task.on_load_checkpoint({CHECKPOINT_KEY: {"chosen": torch.zeros(3), "negatives": torch.zeros(3, 8)}})


def test_the_sequence_next_token_term_adds_the_controls_loss(workdir):
    """``sft_target=sequence``: the stage's loss is the preference loss plus weight x the loss continued SFT trains
    on (every position); ``chosen``: minus weight x the chosen item's mean log-probability per code."""
    cfg = _compose(_base(workdir) + ["stage=sdpo", "stage.num_negatives=3"])
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.preferences = _mine(task, dm.data, dm.max_len)
    batch = next(iter(dm.train_dataloader()))
    losses = {}
    with torch.no_grad():
        for name, change in (("none", {}), ("sequence", {"sft_weight": 0.5, "sft_target": "sequence"}),
                             ("chosen", {"sft_weight": 0.5})):
            task.align = dataclasses.replace(AlignConfig.from_stage(stage_settings(cfg.stage)), **change)
            losses[name] = float(task.training_loss(batch))
        control = float(GenerativeTask.training_loss(task, batch))
        chosen = batch.target_ids[batch.offsets[1:] - 1]
        chosen_log_prob = float(task.model.item_log_probs(batch, chosen[:, None])[:, 0].mean())
    assert control > 0.1 and losses["none"] > 0.1
    assert losses["sequence"] == pytest.approx(losses["none"] + 0.5 * control, abs=1e-5)
    levels = task.model.sids.num_levels
    assert losses["chosen"] == pytest.approx(losses["none"] - 0.5 * chosen_log_prob / levels, abs=1e-5)


@pytest.mark.parametrize("name", [p.stem for p in sorted((CONF_DIR / "stage").glob("*.yaml"))])
def test_every_stage_config_builds_its_settings(name):
    """Each stage names its task's builder and its own settings (``stage=<name>``, genrec/conf/stage)."""
    cfg = _compose([f"stage={name}"] + (["stage.teacher=runs/x"] if name == "distill" else []))
    builder = resolve_target(cfg.stage._target_)
    assert builder.__module__ == "genrec.training.stages" and cfg.stage.name == name
    settings = stage_settings(cfg.stage)
    if name in ("dpo", "sdpo"):
        assert AlignConfig.from_stage(settings).loss == name and cfg.stage.train_examples == "sequences"
    elif name == "distill":
        assert DistillConfig.from_stage(settings).teacher == "runs/x"
    else:
        assert settings == {}


def test_stage_settings_are_checked():
    for override, message in [("stage.beta=0", "stage.beta: got 0"), ("stage.negatives=random", "stage.negatives"),
                              ("stage.num_negatives=0", "stage.num_negatives: got 0"),
                              ("stage.sft_target=all", "stage.sft_target: got 'all'"),
                              ("stage.positions=every", "stage.positions: got 'every'"),
                              ("stage.score=logits", "stage.score: got 'logits'"),
                              ("stage.beam_skip=2", "stage.beam_skip: got 2, .* stage.negatives=beam"),
                              ("stage.beam_skip=-1", "stage.beam_skip: got -1"),
                              ("+stage.temperature=1", "stage: .*unexpected keyword argument 'temperature'")]:
        with pytest.raises(ConfigError, match=message):
            AlignConfig.from_stage(stage_settings(_compose(["stage=dpo", override]).stage))
    with pytest.raises(ConfigError, match="stage.weight: got -1"):
        DistillConfig.from_stage(stage_settings(_compose(["stage=distill", "stage.teacher=x",
                                                          "stage.weight=-1"]).stage))
    with pytest.raises(ConfigError, match="stage.sft_target: sft_target=chosen adds the chosen item's code"):
        AlignConfig.from_stage(stage_settings(_compose(["stage=sdpo", "stage.score=ranking",
                                                        "stage.sft_weight=1"]).stage))
    assert AlignConfig.from_stage(stage_settings(_compose(["stage=sdpo"]).stage)) == AlignConfig(loss="sdpo",
                                                                                                  num_negatives=8)


def test_a_run_folder_from_before_the_stage_group_is_read_as_its_stage():
    """config.yaml files written with ``align:`` / ``distill:`` nodes (b9ac798 and earlier) still evaluate."""
    old = OmegaConf.create({"align": {"loss": "sdpo", "beta": 0.1, "num_negatives": 8}, "distill": {"teacher": None}})
    stage = stage_config(old)
    assert stage.name == "sdpo" and stage.train_examples == "sequences"
    assert AlignConfig.from_stage(stage_settings(stage)) == AlignConfig(loss="sdpo", num_negatives=8)
    stage = stage_config(OmegaConf.create({"align": {"loss": "none"}, "distill": {"teacher": "runs/t"}}))
    assert stage.name == "distill" and DistillConfig.from_stage(stage_settings(stage)).teacher == "runs/t"
    assert stage_config(OmegaConf.create({"align": {"loss": "none"}})).name == "sft"


# ---- distillation ------------------------------------------------------------------------------------------------

def test_level_targets_sum_teacher_probabilities_by_code_prefix():
    g = torch.Generator().manual_seed(0)
    sizes = (3, 4, 2)
    every = torch.cartesian_prod(*[torch.arange(k) for k in sizes])
    codes = torch.cat([torch.full((1, 3), -1), every[torch.randperm(len(every), generator=g)[:20]]])  # 20 items
    scores = torch.randn(6, 21, generator=g)
    scores[:, 0] = float("-inf")
    items, probs = teacher_top_k(scores, k=8, temperature=0.7)
    assert torch.allclose(probs.sum(1), torch.ones(6)) and not (items == 0).any()
    targets = codes[torch.tensor([1, 5, 9, 13, 17, 20])]
    levels = level_targets(codes, items, probs, targets, sizes)
    for p in range(6):  # brute force: sum the top items' probabilities under the target's prefix, code by code
        for level, size in enumerate(sizes):
            expected = torch.zeros(size)
            for item, prob in zip(items[p].tolist(), probs[p].tolist()):
                if torch.equal(codes[item, :level], targets[p, :level]):
                    expected[codes[item, level]] += prob
            assert torch.allclose(levels[level][p], expected, atol=1e-6)
    # level 0 is the exact cross-entropy between the teacher's and the student's first-code marginals
    student = [torch.log_softmax(torch.randn(6, k, generator=g), 1) for k in sizes]
    only_first = distillation_loss(student[:1], levels[:1])
    assert float(only_first) == pytest.approx(float(-(levels[0] * student[0]).sum(1).mean()), abs=1e-6)


def test_distillation_with_weight_zero_equals_plain_training(tiny_run, workdir):
    """A tiny SASRec run (conftest's tiny_run, same dataset) as teacher; with dropout on, so any extra draw from
    the random state would show."""
    teacher_dir, _ = tiny_run
    weights = {}
    for name, extra in (("plain", []), ("distill", ["stage=distill", f"stage.teacher={teacher_dir}",
                                                    "stage.weight=0.0"])):
        cfg = _compose(_base(workdir) + extra)
        L.seed_everything(cfg.seed, verbose=False)
        dm = build_datamodule(cfg)
        dm.setup()
        task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
        assert isinstance(task, DistillTask) == (name == "distill")
        _fit(task, dm, steps=5)
        weights[name] = task.model.state_dict()
    assert weights["plain"].keys() == weights["distill"].keys()
    for key, value in weights["plain"].items():
        other = weights["distill"][key]
        assert torch.equal(value, other) if torch.is_tensor(value) else value == other, key


def test_distillation_moves_the_student_towards_the_teacher(tiny_run, workdir):
    """Trained on (almost) the distillation term alone, the student's cross-entropy to the teacher (sharpened by a
    low temperature: the 1-epoch tiny teacher is nearly uniform) falls well below that of the same student trained
    as long on the next-token loss alone."""
    teacher_dir, _ = tiny_run
    terms = {}
    for weight in (0.0, 1000.0):
        cfg = _compose(_base(workdir) + ["stage=distill", f"stage.teacher={teacher_dir}",
                                         f"stage.weight={weight}", "model.backbone.dropout=0.0", "optim.lr=1e-2",
                                         "stage.temperature=0.05"])
        L.seed_everything(cfg.seed, verbose=False)
        dm = build_datamodule(cfg)
        dm.setup()
        task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
        _fit(task, dm, steps=10)
        batch = next(iter(dm.train_dataloader()))
        with torch.no_grad():
            targets = task.model.target_log_probs(batch)
            codes = task.model.sids.codes[targets.items]
            taught = targets.positions >= 0
            items, probs = teacher_top_k(task.teacher.scores(batch, targets.positions[taught]), 100, 0.05)
            q = level_targets(task.model.sids.codes, items, probs, codes[taught], task.model.sids.codebook_sizes)
            terms[weight] = float(distillation_loss([lv[taught] for lv in targets.levels], q))
    assert terms[1000.0] < terms[0.0] - 0.1


def test_item_head_distillation_adds_the_teachers_top_items_to_the_loss(tiny_run, workdir):
    """``distill.item_head_weight``: the training loss is the next-token loss, the item head's own loss, the level
    term and ``item_head_weight`` x the teacher's top items' cross-entropy with the item head, the last computed here
    item by item; a student without an item head refuses the setting."""
    teacher_dir, _ = tiny_run
    head = ["model.generator.item_head=true", "model.generator.item_inputs=true",
            "model.generator.tie_item_tables=true", "model.backbone.dropout=0.0"]
    distill = ["stage=distill", f"stage.teacher={teacher_dir}", "stage.weight=0.5", "stage.top_k=7",
               "stage.item_head_weight=2.0"]
    cfg = _compose(_base(workdir) + head + distill)
    L.seed_everything(cfg.seed, verbose=False)
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.log = lambda *args, **kwargs: None  # no trainer attached
    batch = next(iter(dm.train_dataloader()))
    with torch.no_grad():
        loss = float(task.training_loss(batch))
        targets = task.model.target_log_probs(batch)
        codes = task.model.sids.codes[targets.items]
        taught = (targets.positions >= 0).nonzero()[:, 0].tolist()
        scores = task.teacher.scores(batch, targets.positions[taught])
        items, probs = teacher_top_k(scores, 7)
        q = level_targets(task.model.sids.codes, items, probs, codes[taught], task.model.sids.codebook_sizes)
        levels = float(distillation_loss([lv[taught] for lv in targets.levels], q))
        by_hand = sum(-float(probs[row, j]) * float(targets.item_head[p, items[row, j]])
                      for row, p in enumerate(taught) for j in range(7)) / len(taught)
        term = item_distillation_loss(targets.item_head[taught], items, probs)
        assert by_hand == pytest.approx(float(term), rel=1e-5)
        expected = float(targets.nll(codes)) + float(targets.item_nll()) + 0.5 * levels + 2.0 * by_hand
    assert loss == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ConfigError, match="stage.item_head_weight: got 2.0, but the student has no item head"):
        build_task(_compose(_base(workdir) + distill), dm.data.num_items, dm.data.item_raw_ids)


def test_a_distilled_sasrec_adds_the_teachers_top_items_to_its_softmax_loss(tiny_run, workdir):
    """``model=sasrec stage=distill``: the loss is the full-softmax next-item loss plus ``weight`` x the cross-entropy
    between the teacher's top ``k`` items after every position and the student's softmax over all items, both
    computed here by hand, position by position; ``item_head_weight`` is refused (a SASRec has no item head)."""
    teacher_dir, _ = tiny_run
    student = DATA + ["model=sasrec", "model.dim=16", "model.encoder.dropout=0.0", "seed=3",
                      f"data.cache_dir={workdir / 'cache'}", "stage=distill", f"stage.teacher={teacher_dir}", "stage.weight=0.5",
                      "stage.top_k=5", "stage.temperature=2.0"]
    cfg = _compose(student)
    L.seed_everything(cfg.seed, verbose=False)
    dm = build_datamodule(cfg)
    dm.setup()
    task = build_task(cfg, dm.data.num_items, dm.data.item_raw_ids)
    task.log = lambda *args, **kwargs: None  # no trainer attached
    assert type(task).__name__ == "RetrievalDistillTask"
    batch = next(iter(dm.train_dataloader()))
    with torch.no_grad():
        loss = float(task.training_loss(batch))
        states, table = task.model.encode(batch), task.model.all_item_vectors()
        teacher = task.teacher.model
        teacher_scores = teacher.encode(batch) @ teacher.all_item_vectors().T
        nll = distill = 0.0
        for n in range(len(batch.target_ids)):
            logits = states[n] @ table[1:].T  # items 1..num_items
            logp = logits - torch.logsumexp(logits, 0)
            nll -= float(logp[batch.target_ids[n] - 1])
            top = teacher_scores[n, 1:].topk(5)
            q = torch.softmax(top.values / 2.0, 0)
            distill -= float((q * logp[top.indices]).sum())
        count = len(batch.target_ids)
    assert loss == pytest.approx(nll / count + 0.5 * distill / count, rel=1e-5)
    info = task.run_info()
    assert info["parameters"]["total"] == sum(p.numel() for p in task.model.parameters())
    assert info["distill"]["teacher"]["run_dir"] == str(teacher_dir) and info["distill"]["top_k"] == 5
    with pytest.raises(ConfigError, match="stage.item_head_weight: got 1.0, but a retrieval student has no item"):
        build_task(_compose(student + ["stage.item_head_weight=1.0"]), dm.data.num_items, dm.data.item_raw_ids)


def test_a_teacher_of_another_dataset_is_refused(tiny_run, workdir, tmp_path):
    teacher_dir, _ = tiny_run
    cfg = _compose(_base(workdir) + ["stage=distill", f"stage.teacher={teacher_dir}", "data.max_len=30"])
    with pytest.raises(ConfigError, match="the teacher reads at most 20 items"):
        build_task(cfg, 120, load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir).item_raw_ids)
    cfg = _compose(_base(workdir) + ["stage=distill", f"stage.teacher={teacher_dir}", "data.split.kind=time",
                                     "data.split.valid_from=0.8", "data.split.test_from=0.9"])
    with pytest.raises(ConfigError, match="a teacher needs the student's split"):  # it trained on held-out events
        build_task(cfg, 120, load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir).item_raw_ids)


def test_cold_items_reach_neither_the_teacher_nor_the_sid_table(tiny_run, workdir, tmp_path):
    """With ``data.split.cold_items`` a teacher trained without that split (it read the cold items' interactions) is
    refused, and so is a SID table fitted on such a run's item table (collaborative) or one that records no encoder;
    a table of item content (``encoder=text``) is accepted, as is a collaborative table of a run with the split."""
    teacher_dir, _ = tiny_run
    cold = ["data.split.cold_items=0.1", "data.split.cold_seed=1"]
    cfg = _compose(_base(workdir) + cold)
    raw = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir).item_raw_ids
    table = SIDTable.load(workdir / "sid")

    def student(encoder, extra=()):
        folder = tmp_path / encoder["name"]
        dataclasses.replace(table, config={"encoder": encoder}).save(folder)
        overrides = _base(workdir) + cold + [f"sid_table={folder}", *extra]
        return build_task(_compose(overrides), len(raw) - 1, raw)

    with pytest.raises(ConfigError, match="a teacher needs the student's split"):
        student({"name": "text"}, ["stage=distill", f"stage.teacher={teacher_dir}"])

    with pytest.raises(ConfigError, match="fitted on the item table of .* the cold items' interactions would reach"):
        student({"name": "collaborative", "run_dir": str(teacher_dir)})
    with pytest.raises(ConfigError, match="fused.* the cold items' interactions would reach"):
        student({"name": "fused", "parts": {"text": {"name": "text"}, "collaborative": {"run_dir": str(teacher_dir)}}})
    with pytest.raises(ConfigError, match="records no encoder"):
        build_task(_compose(_base(workdir) + cold), len(raw) - 1, raw)
    assert isinstance(student({"name": "text", "fields": ["title"]}), GenerativeTask)
    cold_teacher = tmp_path / "cold_teacher"
    (cold_teacher).mkdir()
    saved = _compose(DATA + cold + ["model=sasrec"])
    (cold_teacher / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    assert isinstance(student({"name": "collaborative", "run_dir": str(cold_teacher)}), GenerativeTask)


# ---- stages: init_from -------------------------------------------------------------------------------------------

def test_init_from_loads_the_run_weights_and_refuses_another_model(tiny_run, workdir):
    run_dir, _ = tiny_run
    sasrec = _compose(TINY_RUN + [f"data.cache_dir={workdir / 'cache'}"])
    dm = build_datamodule(sasrec)
    dm.setup()
    task = build_task(sasrec, dm.data.num_items, dm.data.item_raw_ids)
    record = initialize(task, str(run_dir))
    saved = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(v, saved[k]) for k, v in task.state_dict().items())
    assert record["checkpoint"].endswith("best.ckpt") and len(record["sha256"]) == 64
    generator = build_task(_compose(_base(workdir)), dm.data.num_items, dm.data.item_raw_ids)
    with pytest.raises(UserError, match="does not fit the model of this config"):
        initialize(generator, str(run_dir))
    with pytest.raises(UserError, match="init_from=.*does not exist"):
        initialize(generator, str(workdir / "nothing"))


def test_heldout_negatives_counted_by_hand():
    """scripts/analysis/negatives_heldout.py: a user without held-out items (a time split's early user) never counts,
    and an empty negative (0) is not an item."""
    script = load_script("scripts/analysis/negatives_heldout.py")
    data = SequenceData(name="t", item_ids=np.array([1, 2, 3, 4, 5, 6, 7, 8, 9]), offsets=np.array([0, 4, 7, 9]),
                        timestamps=None, item_raw_ids=np.arange(10), user_raw_ids=np.arange(3),
                        valid_at=np.array([2, 5, 9]), test_at=np.array([3, 6, 9]))
    valid, test = script.heldout_targets(data)
    assert valid.tolist() == [3, 6, 0] and test.tolist() == [4, 7, 0]
    hits = script.heldout_hits(np.array([[4, 9], [6, 7], [1, 0]]), np.array([0, 1, 2]), valid, test)
    assert hits["examples_rejecting_valid_target"] == pytest.approx(1 / 3)
    assert hits["examples_rejecting_test_target"] == pytest.approx(2 / 3)
    assert hits["examples_rejecting_either"] == pytest.approx(2 / 3)
    assert hits["rejected_items_that_are_heldout_targets"] == pytest.approx(3 / 5)
