"""Where a generative recommender falls behind an ID-based one on the same test users (issue 16: "if the goal is not
reached, what you measured about why").

1. **Modelling, per code level.** For every test user, the negative log-likelihood (nats) of the target's code at
   each level given the target's true prefix, and whether that code is the most likely valid one:
   - the generator: its own decoder, teacher-forced along the target's codes (raw softmax per level, as its
     ``test/target_log_prob`` where the codes rank, and its beam search score), and the same renormalised over the
     codes that continue the target's prefix to some item, with the probability it puts on them (the rest is on
     code tuples that are no item, which constrained decoding masks);
   - the retrieval model (SASRec, HSTU): its softmax over every item summed by code prefix
     (:func:`genrec.models.distill.level_targets`), i.e. the distribution a perfect generator of that model's
     item probabilities would put on each code.
   The levels' nats add up to each model's ``-log p(target item)``. The same on training positions (the first
   ``--train-batches`` batches, every position with an input) tells fitting apart from generalising.
2. **Decoding.** On a random sample of test users, the generator's recall/NDCG@10 with its own constrained beam,
   the same beam renormalised over the allowed codes at every level (does the mass on tuples that are no item
   distort the ranking?), and a much wider beam (what would it recover of the items the model already ranks
   high?). These rows rank by the codes alone, also for a generator whose item head re-ranks its beam
   (``model.decoding.rank=hybrid``).

Usage (both run folders trained on the same dataset and split)::

    python -m scripts.analysis.diagnose_generator --generator runs/post/sft-0 --teacher runs/post/teacher \\
        --out results/diagnosis_post_seed0.json
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch


def _teacher_levels(teacher_scores: torch.Tensor, sids, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``teacher_scores (P, num_items + 1)`` (column 0 padding), the targets' ``codes (P, L)`` -> ``(P, L)`` the
    teacher's nats of each target code given the target's prefix, and whether that code has the most mass."""
    from genrec.models.distill import level_targets

    nats, top1 = [], []
    for rows in torch.split(torch.arange(len(codes)), 128):  # (rows, num_items, L) codes at a time
        probs = torch.softmax(teacher_scores[rows, 1:].float(), dim=1)
        items = torch.arange(1, teacher_scores.shape[1]).expand(len(rows), -1)
        masses = level_targets(sids.codes, items, probs, codes[rows], sids.codebook_sizes)
        nats.append(torch.stack([-(m.gather(1, codes[rows, level:level + 1])[:, 0] / m.sum(1)).log()
                                 for level, m in enumerate(masses)], 1))
        top1.append(torch.stack([m.argmax(1) == codes[rows, level] for level, m in enumerate(masses)], 1))
    return torch.cat(nats), torch.cat(top1)


def _generator_levels(level_log_probs: list[torch.Tensor], trie, codes: torch.Tensor) -> list[torch.Tensor]:
    """The generator's ``L`` raw per-level log-softmaxes ``(P, K_l)`` along the targets' ``codes (P, L)`` -> ``(P, L)``
    each: nats of the target's code, whether it is the most likely of the codes that continue the target's prefix
    to some item (``trie``, the model's prefix trie, as constrained decoding chooses), the nats renormalised over
    those codes, and the probability the generator puts on them."""
    nodes = torch.zeros(len(codes), dtype=torch.int64)
    valid = []
    for level in range(len(level_log_probs)):
        valid.append(trie.allowed(level, nodes))
        nodes = trie.advance(level, nodes, codes[:, level])
    nats, top1, valid_nats, valid_mass = [], [], [], []
    for level, logp in enumerate(level_log_probs):
        target = logp.gather(1, codes[:, level:level + 1])[:, 0]
        allowed = logp.masked_fill(~valid[level], float("-inf"))
        on_valid = allowed.logsumexp(1)
        nats.append(-target)
        top1.append(allowed.argmax(1) == codes[:, level])
        valid_nats.append(on_valid - target)
        valid_mass.append(on_valid.exp())
    return [torch.stack(column, 1) for column in (nats, top1, valid_nats, valid_mass)]


def _test_levels(generator, teacher, batch) -> list[torch.Tensor]:
    """An evaluation batch -> ``(B, L)`` :func:`_generator_levels` (its decoder, teacher-forced along the target's
    codes) and :func:`_teacher_levels`."""
    sids = generator.sids
    codes = sids.codes[batch.target_ids]  # (B, L)
    decoder = generator.decoder(batch)
    level_log_probs = [decoder.start()]
    for level in range(sids.num_levels - 1):
        level_log_probs.append(decoder.step(codes[:, level], level))
    return [*_generator_levels(level_log_probs, generator.trie, codes),
            *_teacher_levels(teacher.scores(batch, batch.last_positions()), sids, codes)]


def _train_levels(generator, teacher, batch) -> list[torch.Tensor]:
    """A training batch -> the same at every position that has an input (the teacher needs one)."""
    targets = generator.target_log_probs(batch)
    taught = targets.positions >= 0
    codes = generator.sids.codes[targets.items[taught]]
    return [*_generator_levels([level[taught] for level in targets.levels], generator.trie, codes),
            *_teacher_levels(teacher.scores(batch, targets.positions[taught]), generator.sids, codes)]


def _items_under_prefix(codes: np.ndarray) -> np.ndarray:
    """``codes (num_items + 1, L)`` (row 0 padding) -> ``(num_items + 1, L)``: at level ``l``, how many items share
    the item's first ``l`` codes (the choices left to that level and the ones after it)."""
    items = codes[1:]
    out = np.zeros(codes.shape, dtype=np.int64)
    for level in range(codes.shape[1]):
        _, inverse, counts = np.unique(items[:, :level], axis=0, return_inverse=True, return_counts=True)
        out[1:, level] = counts[inverse.reshape(-1)]
    return out


def _summary(columns: list[list[torch.Tensor]], level: int) -> dict[str, float]:
    names = ("generator_nats", "generator_top1", "generator_valid_nats", "generator_valid_mass", "teacher_nats",
             "teacher_top1")
    return {name: torch.cat(column)[:, level].double().mean().item() for name, column in zip(names, columns)}


def _beam_metrics(generator, batches, beam: int, ks: tuple[int, ...], exclude_history: bool,
                  renormalize: bool = False) -> dict[str, float]:
    """Recall/NDCG of the generator's constrained beam (``renormalize``: each level renormalised over the allowed
    codes, :func:`genrec.models.beam.beam_search`) over ``batches``."""
    from genrec.eval.metrics import Evaluator
    from genrec.models.beam import beam_search

    evaluator = Evaluator(ks, exclude_history)
    for batch in batches:
        seen = (batch.seen_ids, batch.seen_offsets) if exclude_history else None
        result = beam_search(generator.decoder(batch), generator.sids, beam, max(ks), generator.trie, seen,
                             renormalize)
        evaluator.update(result.score_matrix(generator.num_items + 1).float(), batch)
    return evaluator.compute()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generator", required=True, help="run folder of a generative model (sid_gpt, tiger)")
    parser.add_argument("--teacher", required=True, help="run folder of a retrieval model on the same data")
    parser.add_argument("--out", required=True, help="results JSON to write")
    parser.add_argument("--sample", type=int, default=5000, help="test users for the decoding comparison")
    parser.add_argument("--train-batches", type=int, default=40, help="training batches for the per-level fit")
    parser.add_argument("--wide-beam", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="draws the decoding sample")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    from torch.utils.data import DataLoader

    from genrec.data.batch import EvalSequences, collate
    from genrec.training.builders import load_run
    from genrec.training.distill import FrozenTeacher
    from genrec.utils.provenance import provenance, write_json

    torch.set_num_threads(args.threads)
    prov = provenance()
    gen_cfg, datamodule, gen_task = load_run(args.generator)
    teacher_cfg, teacher_data, teacher_task = load_run(args.teacher)
    if not np.array_equal(datamodule.data.item_raw_ids, teacher_data.data.item_raw_ids) \
            or datamodule.data.summary() != teacher_data.data.summary():
        raise SystemExit(f"diagnose_generator: error: {args.teacher} was trained on other data than {args.generator}")
    generator, teacher = gen_task.model, FrozenTeacher(teacher_task.model, {})
    started = time.time()
    test, train, test_items = [[] for _ in range(6)], [[] for _ in range(6)], []
    with torch.no_grad():
        for batch in datamodule.test_dataloader():
            test_items.append(batch.target_ids.numpy())
            for column, values in zip(test, _test_levels(generator, teacher, batch)):
                column.append(values)
        for _, batch in zip(range(args.train_batches), datamodule.train_dataloader()):
            for column, values in zip(train, _train_levels(generator, teacher, batch)):
                column.append(values)
    under = _items_under_prefix(generator.sids.codes.numpy())[np.concatenate(test_items)]  # (test users, L)
    levels = [{"level": level, "codebook_size": size, "test": _summary(test, level), "train": _summary(train, level),
               "test_items_under_prefix": float(under[:, level].mean())}
              for level, size in enumerate(generator.sids.codebook_sizes)]
    item_nats = {split: {"generator": torch.cat(columns[0]).double().sum(1).mean().item(),
                         "generator_valid": torch.cat(columns[2]).double().sum(1).mean().item(),
                         "teacher": torch.cat(columns[4]).double().sum(1).mean().item(),
                         "targets": sum(len(c) for c in columns[0])}
                 for split, columns in (("test", test), ("train", train))}
    levels_seconds = time.time() - started

    test_set = EvalSequences(datamodule.data, gen_cfg.data.max_len, "test")
    rng = np.random.default_rng(args.seed)
    chosen = rng.choice(len(test_set), size=min(args.sample, len(test_set)), replace=False)
    chosen = chosen[np.argsort(test_set.lengths[chosen], kind="stable")].tolist()  # similar lengths share a batch
    # 8 users per batch: a wide beam holds beam x history tokens per user in its cache
    sample = list(DataLoader(test_set, batch_sampler=[chosen[i:i + 8] for i in range(0, len(chosen), 8)],
                             collate_fn=collate))
    ks, exclude = tuple(gen_cfg.eval.ks), gen_cfg.eval.exclude_history
    started = time.time()
    with torch.no_grad():
        decoding = [{"beam": beam, "renormalize": renormalize,
                     **_beam_metrics(generator, sample, beam, ks, exclude, renormalize)}
                    for beam, renormalize in ((generator.beam, False), (generator.beam, True), (args.wide_beam, False))]
    write_json(Path(args.out), {
        "kind": "diagnose_generator", "dataset": datamodule.data.summary(), "split": "test",
        "generator": {"run": str(args.generator), "model": gen_cfg.model.name, "sid_table": str(gen_cfg.sid_table)},
        "teacher": {"run": str(args.teacher), "model": teacher_cfg.model.name},
        "train_batches": args.train_batches, "levels": levels, "item_nats": item_nats,
        "decoding": {"sample_users": len(chosen), "seed": args.seed, "rows": decoding},
        "seconds": {"levels": round(levels_seconds, 1), "decoding": round(time.time() - started, 1)},
        "threads": args.threads, **prov})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
