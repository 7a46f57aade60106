"""The decoder-only generator on a `transformers` causal LM's own vocabulary (LC-Rec style): the SID tokens are new
vocabulary rows; LoRA through peft trains only adapters and those rows, saves the adapter alone and merges into a
model that decodes exactly like the adapter model; gradient checkpointing and bf16 autocast; and genrec's DPO loss
equals TRL's DPOTrainer loss on the same model log-probabilities. Small random-initialised models only."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from genrec.models.backbones import HFVocabLM
from genrec.models.preference import preference_loss
from genrec.models.sid_generator import SIDGenerator
from genrec.training.generative import GenerativeTask
from tests.generative.helpers import eval_batch, make_table, one_thread, train_batch

single_thread = pytest.fixture(autouse=True)(one_thread)

TABLE = make_table(40, (4, 5, 3))
LLAMA = {"model_type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}
SEQUENCES = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]]
HISTORIES = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [12]]


def generator(seed: int = 0, **backbone) -> SIDGenerator:
    torch.manual_seed(seed)
    return SIDGenerator(TABLE, HFVocabLM(**{"config": LLAMA, **backbone}))


def train(model: SIDGenerator, steps: int, lr: float = 3e-2) -> None:
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        loss = model.loss(train_batch(SEQUENCES))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("tied", [True, False])
def test_sid_tokens_are_new_rows_of_the_lm_vocabulary(tied):
    model = generator(**{"config": {**LLAMA, "tie_word_embeddings": tied}})
    lm = model.backbone.causal_lm
    vocab = model.sids.vocab_size  # PAD, BOS, 4 + 5 + 3 codes
    assert lm.get_input_embeddings().num_embeddings == 50 + vocab == lm.get_output_embeddings().out_features
    tokens = torch.tensor([0, 1, 2, 13])
    assert torch.equal(model.embed(tokens), lm.get_input_embeddings().weight[50 + tokens])
    states = torch.randn(3, 16)
    level = model.sids.level_slice(1)
    expected = states @ lm.get_output_embeddings().weight[50 + level.start:50 + level.stop].T
    assert torch.allclose(model._logits(states, 1), expected, atol=1e-6)
    assert (lm.get_output_embeddings().weight is lm.get_input_embeddings().weight) == tied


@pytest.mark.parametrize("tied", [True, False])
def test_lora_trains_only_the_adapters_and_the_new_token_rows(tied):
    model = generator(**{"config": {**LLAMA, "tie_word_embeddings": tied}, "lora": {"r": 4}})
    full = generator(**{"config": {**LLAMA, "tie_word_embeddings": tied}})
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    embeddings = model.backbone.causal_lm.get_input_embeddings()
    with torch.no_grad():
        rows = embeddings(torch.arange(64))  # the embedding rows as the model sees them
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    # LoRA r=4 on q, k, v, o of 2 layers (q, o: 16 -> 16; k, v: 16 -> 8) + the 14 new rows of width 16 (x2 untied)
    lora = 2 * (4 * (16 + 16) * 2 + 4 * (16 + 8) * 2)
    assert model.backbone.trainable_parameters() == lora + 14 * 16 * (1 if tied else 2)
    assert model.backbone.trainable_parameters() < 0.25 * sum(p.numel() for p in full.parameters())
    counts = GenerativeTask(model).run_info()["parameters"]  # what a run's metrics.json reports
    assert counts == {"trainable": model.backbone.trainable_parameters(),
                      "total": sum(p.numel() for p in model.parameters())}
    train(model, 3)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert all(not torch.equal(p, trainable[n]) for n, p in model.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        after = embeddings(torch.arange(64))
    assert torch.equal(after[:50], rows[:50]) and not torch.equal(after[50:], rows[50:])  # only SID rows train


def test_merged_lora_decodes_exactly_like_the_adapter_model(tmp_path):
    model = generator(lora={"r": 4})
    train(model, 5)
    model.eval()
    batch = eval_batch(HISTORIES)
    with torch.no_grad():
        adapter = model.generate(batch, beam=10, top_k=10)
        logp = model.item_log_probs(batch, torch.arange(1, 41).expand(4, -1))
    model.backbone.merge()
    assert not model.backbone.is_peft and not any("lora" in n for n, _ in model.named_parameters())
    with torch.no_grad():
        merged = model.generate(batch, beam=10, top_k=10)
        merged_logp = model.item_log_probs(batch, torch.arange(1, 41).expand(4, -1))
    assert torch.equal(adapter.items, merged.items) and torch.equal(adapter.codes, merged.codes)
    assert torch.allclose(adapter.scores, merged.scores, atol=1e-5)
    assert torch.allclose(logp, merged_logp, atol=1e-5)


def test_adapter_is_saved_alone_and_reloads_onto_the_pretrained_base(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(1)
    config = dict(LLAMA)
    base = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
    base.save_pretrained(tmp_path / "base")  # a "pretrained" LM: text vocabulary only
    model = generator(pretrained=str(tmp_path / "base"), config=None, lora={"r": 4})
    train(model, 5)
    model.backbone.save_adapter(tmp_path / "adapter")
    assert {p.name for p in (tmp_path / "adapter").iterdir()} == {"adapter_config.json", "adapter_model.safetensors",
                                                                   "README.md"}
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")  # the LoRA matrices and new token rows only
    assert all("lora_" in k or "trainable_tokens" in k for k in saved)
    assert sum(t.numel() for t in saved.values()) == model.backbone.trainable_parameters()
    reloaded = generator(seed=7, pretrained=str(tmp_path / "base"), config=None, adapter=str(tmp_path / "adapter"))
    batch = eval_batch(HISTORIES)
    model.eval(), reloaded.eval()
    with torch.no_grad():
        a, b = model.generate(batch, beam=10, top_k=10), reloaded.generate(batch, beam=10, top_k=10)
    assert torch.equal(a.items, b.items) and torch.allclose(a.scores, b.scores, atol=1e-6)
    # export: merged into one plain LM (text + SID tokens) that loads with pretrained=<folder>
    model.backbone.save_merged(tmp_path / "merged")
    exported = generator(pretrained=str(tmp_path / "merged"), config=None, text_vocab=50).eval()
    with torch.no_grad():
        c = exported.generate(batch, beam=10, top_k=10)
    assert torch.equal(a.items, c.items) and torch.allclose(a.scores, c.scores, atol=1e-5)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    grads = {}
    for checkpointing in (False, True):
        model = generator(gradient_checkpointing=checkpointing).train()
        loss = model.loss(train_batch(SEQUENCES))
        loss.backward()
        grads[checkpointing] = (float(loss), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads[True][0] == pytest.approx(grads[False][0], abs=1e-6)
    for name, grad in grads[False][1].items():
        assert torch.allclose(grads[True][1][name], grad, atol=1e-6), name


def test_bf16_autocast_trains_close_to_float32():
    model = generator()
    batch = train_batch(SEQUENCES)
    full = model.loss(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = model.loss(batch)
    half.backward()
    assert half.dtype == torch.float32  # the per-level log-softmax runs in float32
    assert float(half) == pytest.approx(float(full), rel=2e-2)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_dpo_loss_equals_trls_dpo_trainer_on_the_same_log_probs(tmp_path):
    """TRL's DPOTrainer (loss "sigmoid") on a causal LM whose vocabulary holds SID tokens, prompts = the history's
    SID tokens, chosen / rejected = an item's tokens; genrec's loss on the sequence log-probabilities computed here
    from the same model and reference."""
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import DPOConfig, DPOTrainer

    words = ["<pad>", "<eos>"] + [f"<{'abc'[level]}_{code}>" for level, size in enumerate((4, 5, 3))
                                  for code in range(size)]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>")

    def item(i: int) -> str:
        return " ".join(f"<{'abc'[level]}_{code}>" for level, code in enumerate(TABLE.codes[i].tolist()))

    examples = {"prompt": [" ".join(item(i) for i in h) + " " for h in HISTORIES],
                "chosen": [item(i) for i in (20, 21, 22, 23)], "rejected": [item(i) for i in (30, 31, 32, 33)]}
    config = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    policy, reference = LlamaForCausalLM(config), LlamaForCausalLM(config)
    args = DPOConfig(output_dir=str(tmp_path), beta=0.3, per_device_train_batch_size=4, report_to=[], use_cpu=True,
                     precompute_ref_log_probs=False, max_length=None, logging_steps=1, save_strategy="no")
    trainer = DPOTrainer(model=policy, ref_model=reference, args=args, train_dataset=Dataset.from_dict(examples),
                         processing_class=tokenizer)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    with torch.no_grad():
        trl_loss = trainer.compute_loss(trainer.model, batch)

    def sequence_log_probs(model, prompt: str, completion: str) -> float:
        ids = tokenizer(prompt + completion)["input_ids"] + [tokenizer.eos_token_id]  # TRL appends EOS
        start = len(tokenizer(prompt)["input_ids"])
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
        return float(sum(logp[t - 1, ids[t]] for t in range(start, len(ids))))

    logps = {name: torch.tensor([[sequence_log_probs(m, p, c) for p, c in zip(examples["prompt"], examples[side])]
                                 for side in ("chosen", "rejected")]) for name, m in (("policy", policy),
                                                                                       ("reference", reference))}
    ours = preference_loss("dpo", logps["policy"][0], logps["policy"][1][:, None], logps["reference"][0],
                           logps["reference"][1][:, None], beta=0.3)
    assert float(trl_loss) == pytest.approx(float(ours.losses.mean()), abs=1e-5)
    sdpo = preference_loss("sdpo", logps["policy"][0], logps["policy"][1][:, None], logps["reference"][0],
                           logps["reference"][1][:, None], beta=0.3)
    assert float(trl_loss) == pytest.approx(float(sdpo.losses.mean()), abs=1e-5)
