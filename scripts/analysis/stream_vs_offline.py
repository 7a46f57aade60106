"""Offline vs online on the same events, prequentially: a dataset replayed as a stream in timestamp order, and four
ways to have a model for its last 20%:

* (a) **online**: the stream trainer from scratch over every event (each event trained on once, after it was
  ranked);
* (b) **offline, frozen**: the same model trained offline (``--epochs`` epochs over every user's sequence of events
  before the split, :mod:`genrec.stream.offline`), then frozen;
* (c) **offline, retrained**: (b), then at every ``--retrain-days`` boundary of event time in the last 20% trained
  one more epoch over all events before that boundary (warm-started from the previous model: the daily batch
  retraining of a production system), frozen in between;
* (d) **offline, then online**: (b)'s model as trained (a warm start), then trained online by the stream trainer on
  every event from the split on, after it was ranked.

``--variant NAME=OVERRIDE,OVERRIDE`` adds (a) runs with stream.yaml overrides on top of ``--override`` (the default
config's choices measured alone: e.g. the previous default, or it with one change); a variant that cuts the stream
into other micro-batches also changes the baselines (they are updated per micro-batch), which it carries.

Every event of the last 20% (its timestamp at or after the split: the time of the event at 80% of the stream) is
ranked before anything trains on it, by the model and by the online most-popular and item-transition baselines,
with the protocol of :mod:`genrec.stream.prequential` (candidates: every item seen before; the user's kept history
removed; a new item is a miss for everyone; an item the model holds no row for is a miss for the model). All three
read the stream in the same micro-batches, cut at the retraining boundaries, so the baselines are identical in
the four (checked). Writes ``results/stream_vs_offline_<dataset>.json``.

Usage::

    python -m scripts.analysis.stream_vs_offline --data ml100k --seeds 0 1 2
    python -m scripts.analysis.stream_vs_offline --data synthetic --retrain-days 7 --seeds 0 1 2
    python -m scripts.analysis.stream_vs_offline --data synthetic --quick      # a small check of the script
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from genrec.conf import compose_config  # noqa: E402
from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from genrec.stream.cli import build_learner  # noqa: E402
from genrec.stream.events import EventSchema  # noqa: E402
from genrec.stream.offline import train_offline, user_sequences  # noqa: E402
from genrec.stream.replay import ReplaySource  # noqa: E402
from genrec.stream.loop import StreamLoop  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

DAY = 86400
PROTOCOLS = ("online", "offline_frozen", "offline_retrained", "offline_then_online")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def config(args, seed: int, split_time: int, variant: list[str] = ()):
    overrides = [f"data={args.data}", f"data.max_len={args.max_len}", "source=replay", f"seed={seed}",
                 f"prequential.from_time={split_time}", "prequential.window_events=0",
                 "prequential.window_seconds=0", "checkpoint.every_events=0", "stream.log_every_events=0",
                 f"prequential.baselines=[{','.join(args.baselines)}]", *args.override, *variant]
    if args.limit:
        overrides.append(f"source.limit={args.limit}")
    return compose_config("stream", overrides=overrides)


def copy_learner(cfg, learner, folder: Path):
    """A new learner with ``learner``'s weights, optimizer state and item table."""
    other = build_learner(cfg)
    other.model.load_state_dict(learner.model.state_dict())
    other.optimizer.load_state_dict(learner.optimizer.state_dict())
    save_checkpoint({"t": learner.table}, folder)
    other.embedding.reset()
    load_checkpoint({"t": other.table}, folder)
    shutil.rmtree(folder)
    return other


def stream(cfg, learner, boundaries: list[int], train_from: int | None, retrain, work: Path) -> dict:
    """Replay the stream through a StreamLoop (micro-batches cut at the ``boundaries``, in records): block ``i``
    is the records ``[boundaries[i - 1], boundaries[i])``, trained on from block ``train_from`` on (``None``: a
    frozen model), and before block ``i >= 2`` (a retraining point) ``retrain(i, learner)`` may replace the learner.
    Returns the prequential summary."""
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    source = ReplaySource(cfg.source.reader, cfg.source.limit)
    trainer = StreamLoop(cfg, run_dir, source, learner, cfg.model.name)
    source.bind(trainer.schema, str(run_dir))
    source.restore(None)
    seconds = 0.0
    try:
        for index, end in enumerate(boundaries):
            if retrain is not None and index > 1:  # block 1 starts at the split: the offline model as trained
                trainer.learner = retrain(index, trainer.learner)
            trainer.train = train_from is not None and index >= train_from
            started = time.perf_counter()
            while trainer.counts["records"] < end:
                trainer.step(trainer.read(min(trainer.batch_size, end - trainer.counts["records"])))
            seconds += time.perf_counter() - started
        summary = trainer.prequential.summary()
        summary["stream_seconds"] = round(seconds, 1)
        summary["records"] = trainer.counts["records"]
        return summary
    finally:
        trainer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="synthetic")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=20, help="offline epochs before the split")
    parser.add_argument("--retrain-days", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--batch-users", type=int, default=128, help="offline batch: users per step")
    parser.add_argument("--baselines", nargs="+", default=["most_popular", "transitions", "transitions_last3_skip"])
    parser.add_argument("--override", action="append", default=[], help="a stream.yaml override")
    parser.add_argument("--limit", type=int, help="only the first N events (a check)")
    parser.add_argument("--quick", action="store_true", help="6000 events, 2 epochs, one seed: checks the script")
    parser.add_argument("--name", help="results file name (default stream_vs_offline_<data>)")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=OVERRIDE,OVERRIDE: an online run with these stream.yaml overrides, per seed")
    args = parser.parse_args()
    variants = {name: overrides.split(",") for name, _, overrides in (v.partition("=") for v in args.variant)}
    if args.quick:
        args.limit, args.epochs, args.seeds = 6000, 2, args.seeds[:1]
    torch.set_num_threads(1)
    origin = provenance()
    work = Path(tempfile.mkdtemp(prefix="stream-vs-offline-"))
    first = config(args, args.seeds[0], 0)
    source = ReplaySource(first.source.reader, first.source.limit)
    source.bind(EventSchema.build(first.stream.schema), str(work))
    frame = source.frame
    split = int(0.8 * len(frame))
    split_time = int(frame["timestamp"].iloc[split])
    train_end = int(np.searchsorted(frame["timestamp"].to_numpy(), split_time, side="left"))  # events before it
    last = int(frame["timestamp"].iloc[-1])
    starts = list(range(split_time + args.retrain_days * DAY, last + 1, args.retrain_days * DAY))
    boundaries = [train_end] + [int(np.searchsorted(frame["timestamp"].to_numpy(), t, side="left")) for t in starts]
    boundaries = sorted(set(boundaries + [len(frame)]))
    log(f"{args.data}: {len(frame)} events, split at {split_time} (event {train_end}); {len(frame) - train_end} "
        f"events ranked; {len(boundaries) - 1} retraining points every {args.retrain_days} day(s)")
    train_sequences = user_sequences(frame.iloc[:train_end])
    runs: dict[str, list[dict]] = {p: [] for p in PROTOCOLS}
    variant_runs: dict[str, list[dict]] = {name: [] for name in variants}
    baselines = None
    names = list(args.baselines)
    for seed in args.seeds:
        cfg = config(args, seed, split_time)
        max_len = int(cfg.stream.max_len)
        # (a) online, and its variants
        log(f"seed {seed}: online")
        online = stream(config(args, seed, split_time), build_learner(cfg), boundaries, 0, None, work)
        runs["online"].append({"seed": seed, **online})
        for name, overrides in variants.items():
            variant_cfg = config(args, seed, split_time, overrides)
            variant_runs[name].append({"seed": seed, **stream(variant_cfg, build_learner(variant_cfg), boundaries, 0,
                                                              None, work)})
            log(f"seed {seed}: {name} ndcg@10 {variant_runs[name][-1]['all'][cfg.model.name]['ndcg@10']:.4f}")
        # (b) offline, frozen
        learner = build_learner(cfg)
        fit = train_offline(learner, train_sequences, args.epochs, args.batch_users, max_len, seed)
        log(f"seed {seed}: offline {args.epochs} epochs, {fit['targets']} targets in {fit['seconds']:.0f} s")
        retrained_start = copy_learner(cfg, learner, work / "copy")
        warm_start = copy_learner(cfg, learner, work / "copy")
        frozen = stream(config(args, seed, split_time), learner, boundaries, None, None, work)
        runs["offline_frozen"].append({"seed": seed, "train_seconds": round(fit["seconds"], 1),
                                       "train_targets": fit["targets"], **frozen})
        # (c) offline, retrained at every boundary on everything before it
        retrain_seconds = []

        def retrain(index: int, current):
            # everything streamed so far (the records before block `index`), none of the events it will rank
            sequences = user_sequences(frame.iloc[:boundaries[index - 1]])
            done = train_offline(current, sequences, 1, args.batch_users, max_len, seed, first_epoch=args.epochs + index)
            retrain_seconds.append(done["seconds"])
            return current

        log(f"seed {seed}: offline retrained at {len(boundaries) - 2} boundaries")
        retrained = stream(config(args, seed, split_time), retrained_start, boundaries, None, retrain, work)
        runs["offline_retrained"].append({"seed": seed, "retrains": len(retrain_seconds),
                                          "retrain_seconds": round(sum(retrain_seconds), 1), **retrained})
        # (d) offline, then online from the split on
        log(f"seed {seed}: offline, then online")
        runs["offline_then_online"].append({"seed": seed, **stream(config(args, seed, split_time), warm_start,
                                                                   boundaries, 1, None, work)})
        found = [{n: runs[p][-1]["all"][n] for n in names} for p in PROTOCOLS]
        assert all(f == found[0] for f in found), "the baselines differ between protocols"
        baselines = baselines or found[0]
        log(f"seed {seed}: ndcg@10 " + " | ".join(f"{p} {runs[p][-1]['all'][cfg.model.name]['ndcg@10']:.4f}"
                                                  for p in PROTOCOLS)
            + " | " + " ".join(f"{n} {baselines[n]['ndcg@10']:.4f}" for n in names))
    model = first.model.name
    result = {
        "kind": "stream_vs_offline", "dataset": args.data, "model": model, "seeds": args.seeds,
        "events": len(frame), "split_time": split_time, "ranked_events": runs["online"][0]["evaluated"],
        "train_events": train_end, "retrain_days": args.retrain_days, "retrain_points": len(boundaries) - 2,
        "offline_epochs": args.epochs, "quick": bool(args.quick),
        "protocol": "prequential: every event from the split time on ranked before training on it; candidates = "
                    "items seen before the micro-batch; the user's kept history removed; new items and items "
                    "without a model row are misses",
        "runs": runs, "baselines": baselines,
        "variants": {name: {"overrides": variants[name], "runs": variant_runs[name],
                            "baselines": {n: variant_runs[name][0]["all"][n] for n in names}}
                     for name in variants},
        "machine_note": "2 shared CPU cores (other engineers' jobs running), one torch thread",
        **origin, "config": OmegaConf.to_container(first, resolve=True),
    }
    name = args.name or f"stream_vs_offline_{args.data}" + ("_quick" if args.quick else "")
    path = write_json(ROOT / "results" / f"{name}.json", result)
    shutil.rmtree(work, ignore_errors=True)
    rows = {p: np.mean([r["all"][model]["ndcg@10"] for r in runs[p]]) for p in PROTOCOLS}
    rows.update({name: np.mean([r["all"][model]["ndcg@10"] for r in v]) for name, v in variant_runs.items()})
    print("\n".join(f"{k:<20} ndcg@10 {v:.4f}" for k, v in {**rows, **{n: b["ndcg@10"]
                                                                       for n, b in baselines.items()}}.items()))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
