"""Beam-search throughput (users/s): genrec's decoder against a naive one, constrained against unconstrained.

Decoders, all through the same beam search over the same users, measured in one run:

* ``naive``: no cache (TIGER: the encoder once per user, then the whole decoder, cross-attention keys and values
  included, on every beam's full prefix at every step; decoder-only: the whole stack on every beam's history and
  prefix at every step) and the allowed next codes found by comparing every beam's prefix with every semantic ID
  (:class:`BruteForceConstraint`);
* ``no_cache``: no cache, genrec's tensor prefix trie (what the cache alone buys);
* ``brute_force``: genrec's KV cache, the brute-force prefix check (what the trie alone buys);
* ``genrec``: KV cache + prefix trie (the default);
* ``unconstrained``: KV cache, no constraint (what the constraint costs).

Also timed: genrec's prefill alone (``model.decoder(batch)``: TIGER's encoder and cross-attention keys/values, the
decoder-only model's history), the part every decoder pays once per user whatever the beam.

Models: the presets of ``experiment=beauty_tiger`` and ``experiment=beauty_sid_gpt`` with their SID table,
randomly initialised (decoding cost does not depend on the weights). Users: a seeded random sample of the
dataset's test users, with their real histories (the most recent ``data.max_len`` items), sorted by history
length (as genrec's evaluation batches them) in batches of ``--batch-size``; every variant decodes the same
users (after one warm-up batch per model; the fastest of ``--repeats`` runs counts, the machine being shared),
and its items are compared with genrec's (the constrained variants decode the same thing; floating-point ties
between cached and uncached scores can reorder items, which ``same_items_as_genrec`` records).

Usage::

    python -m scripts.bench.bench_beam --sid-table runs/tokenize/beauty-rqvae-seed0
    python -m scripts.bench.bench_beam --sid-table <folder> --models tiger --beams 10 20 50 --users 64

Prints a table with users/s and the ratios, and writes ``results/bench_beam.json``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from genrec.data.batch import EvalSequences, collate  # noqa: E402
from genrec.models.beam import BeamResult, beam_search  # noqa: E402
from genrec.models.trie import BruteForceConstraint  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

EXPERIMENTS = {"tiger": "beauty_tiger", "sid_gpt": "beauty_sid_gpt"}
#: variant -> (use the KV cache, constraint: "trie" | "brute" | None)
VARIANTS = {"naive": (False, "brute"), "no_cache": (False, "trie"), "brute_force": (True, "brute"),
            "genrec": (True, "trie"), "unconstrained": (True, None)}


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sid-table", required=True, help="SID table folder (genrec-tokenize) of the dataset")
    p.add_argument("--models", nargs="+", default=list(EXPERIMENTS), choices=list(EXPERIMENTS))
    p.add_argument("--beams", type=int, nargs="+", default=[10, 20, 50])
    p.add_argument("--users", type=int, default=64, help="test users decoded by every variant")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per variant; the fastest is reported")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_beam.json"))
    return p.parse_args()


def _setup(model: str, args: argparse.Namespace):
    """-> (config, task in eval mode, test batches of the sampled users)."""

    from genrec.conf import compose_config
    from genrec.training.builders import build_datamodule, build_task

    cfg = compose_config("train", overrides=[f"experiment={EXPERIMENTS[model]}", f"sid_table={args.sid_table}"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    data = datamodule.data
    torch.manual_seed(args.seed)
    task = build_task(cfg, data.num_items, data.item_raw_ids).eval()
    users = np.random.default_rng(args.seed).choice(data.num_users, args.users, replace=False)
    test = EvalSequences(data, cfg.data.max_len, "test")
    users = users[np.argsort(test.lengths[users], kind="stable")]  # similar lengths together, as genrec evaluates
    batches = [collate([test[int(u)] for u in users[i:i + args.batch_size]])
               for i in range(0, len(users), args.batch_size)]
    return cfg, task, batches


@torch.no_grad()
def _decode(task, batches, beam: int, variant: str) -> tuple[float, float, list[BeamResult]]:
    """Decode every batch -> (wall seconds, CPU seconds, the beam's result per batch)."""
    model = task.model
    use_cache, constraint = VARIANTS[variant]
    trie = {"trie": model.trie, "brute": BruteForceConstraint(model.sids.codes[1:], model.sids.codebook_sizes),
            None: None}[constraint]
    wall, cpu, results = time.perf_counter(), time.process_time(), []
    for batch in batches:
        results.append(beam_search(model.decoder(batch, use_cache), model.sids, beam, beam, trie,
                                   (batch.seen_ids, batch.seen_offsets)))
    return time.perf_counter() - wall, time.process_time() - cpu, results


@torch.no_grad()
def _prefill(task, batches) -> float:
    """Wall seconds of the beam-independent part of genrec's decoding alone: ``model.decoder(batch)`` (TIGER: the
    encoder and the cross-attention keys/values; decoder-only: the history's keys/values)."""
    wall = time.perf_counter()
    for batch in batches:
        task.model.decoder(batch, use_cache=True)
    return time.perf_counter() - wall


def _compare(results: list[BeamResult], reference: list[BeamResult]) -> dict:
    """Same items as ``reference`` (genrec's decoder)? And the largest difference of the (sorted) scores: when the
    items differ but the scores agree to float precision, only the order of near-equal scores differs."""
    diff = max(float((a.scores - b.scores).abs().nan_to_num(0.0).max()) for a, b in zip(results, reference))
    return {"same_items_as_genrec": all(torch.equal(a.items, b.items) for a, b in zip(results, reference)),
            "max_score_diff_vs_genrec": diff}


def main() -> None:
    args = _parse()
    torch.set_num_threads(args.threads)
    rows, ratios, settings = [], [], {}
    for model in args.models:
        cfg, task, batches = _setup(model, args)
        settings[model] = {"experiment": EXPERIMENTS[model], "max_len": cfg.data.max_len,
                           "codebook_sizes": list(task.model.sids.codebook_sizes), "num_items": task.model.num_items,
                           "mean_history": float(np.mean([float(b.lengths.float().mean()) for b in batches]))}
        users = sum(b.batch_size for b in batches)
        _decode(task, batches[:1], args.beams[0], "genrec")  # warm-up
        prefill = min(_prefill(task, batches) for _ in range(args.repeats))
        settings[model]["prefill_users_per_s"] = round(users / prefill, 2)
        print(f"{model:8s} prefill only       {users / prefill:9.2f} users/s", flush=True)
        for beam in args.beams:
            speed, reference = {}, None
            for variant in ("genrec", "unconstrained", "brute_force", "no_cache", "naive"):
                wall, cpu, results = min((_decode(task, batches, beam, variant) for _ in range(args.repeats)),
                                         key=lambda run: run[0])
                if variant == "genrec":
                    reference = results
                speed[variant] = users / wall
                rows.append({"model": model, "beam": beam, "variant": variant, "users": users,
                             "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "users_per_s": round(users / wall, 2),
                             "users_per_cpu_s": round(users / cpu, 2),
                             **({} if variant == "unconstrained" else _compare(results, reference))})
                print(f"{model:8s} beam {beam:3d} {variant:14s} {users / wall:9.2f} users/s  ({users} users, "
                      f"{wall:.1f} s)", flush=True)
            ratios.append({"model": model, "beam": beam,
                           "genrec_vs_naive": round(speed["genrec"] / speed["naive"], 2),
                           "cache_alone": round(speed["genrec"] / speed["no_cache"], 2),
                           "trie_alone": round(speed["genrec"] / speed["brute_force"], 2),
                           "constrained_vs_unconstrained": round(speed["genrec"] / speed["unconstrained"], 2)})
    print(f"\n{'model':8s} {'beam':>4s} " + " ".join(f"{v:>14s}" for v in VARIANTS)
          + f" {'genrec/naive':>13s} {'constr/unconstr':>16s}")
    for r in ratios:
        cells = [next(x["users_per_s"] for x in rows if (x["model"], x["beam"], x["variant"]) ==
                      (r["model"], r["beam"], v)) for v in VARIANTS]
        print(f"{r['model']:8s} {r['beam']:4d} " + " ".join(f"{c:14.2f}" for c in cells)
              + f" {r['genrec_vs_naive']:12.1f}x {r['constrained_vs_unconstrained']:15.2f}x")
    out = write_json(Path(args.out), {"kind": "bench_beam", "dataset": "beauty", "sid_table": args.sid_table,
                                      "settings": settings, "rows": rows, "ratios": ratios,
                                      "args": vars(args), **provenance()})
    print(f"written: {out}")


if __name__ == "__main__":
    main()
