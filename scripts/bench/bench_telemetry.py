"""Telemetry's overhead: the same training steps with telemetry on and off, alternating, in one process.

For each model preset (SASRec and HSTU on the synthetic default), ``--pairs`` pairs of short trainings run in this
process, one with ``telemetry.enabled=true`` and one with ``false``, the order alternating from pair to pair
(on-off, off-on, ...). Each training is the first ``--steps`` steps of an epoch, with the run's default loggers
(CSV + TensorBoard, so telemetry's rows are written as in a real run; a row every ``--every`` steps, by default
4x as often as a run's default, so that the timed steps include writing rows), no validation; a step's time is measured by
a callback present in both arms: every step's wall time after the first ``--warmup`` (end of one step to the end
of the next) and the process's CPU time. Per pair three ratios ``on / off - 1``: of the mean step, of the mean CPU
time per step, and of the fastest step (the least disturbed on a shared machine; it misses the steps that log).
The table reports the median over pairs; every pair is in the results file.

Measured directly as well: the time spent inside telemetry's own code (its hooks and its profiler wrapper, each
timed) in one more training per model, per step and as a share of the step. This is the cost the A/B comparison
estimates, without the machine's noise; the timers' own cost is included, so it is an upper bound.

The "on" trainings' telemetry summaries are kept in the results as the figures of one SASRec and one HSTU run.

Usage::

    python -m scripts.bench.bench_telemetry                 # SASRec and HSTU, 7 pairs of 15 timed steps each
    python -m scripts.bench.bench_telemetry --pairs 3 --steps 20 --models sasrec

Prints a table and writes ``results/bench_telemetry.json``.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import Callback  # noqa: E402

from genrec.conf import compose_config  # noqa: E402
from genrec.training.builders import build_datamodule, build_task  # noqa: E402
from genrec.training.telemetry import Telemetry, _FetchClock  # noqa: E402
from genrec.training.fit import build_trainer  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

MODELS = {"sasrec": ["model=sasrec"], "hstu": ["model=hstu"]}


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--pairs", type=int, default=7, help="on/off pairs per model")
    p.add_argument("--steps", type=int, default=15, help="timed training steps per training (within the first epoch)")
    p.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    p.add_argument("--every", type=int, default=5,
                   help="telemetry.every_n_steps and trainer.log_every_n_steps (default 5, 4x as often as a run's "
                        "default 20, so that rows are written inside the timed steps)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest on a shared machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_telemetry.json"))
    return p.parse_args()


class StepWall(Callback):
    """Wall time and process CPU time of every training step after the first ``warmup`` (from the end of one step
    to the end of the next)."""

    def __init__(self, warmup: int):
        self.warmup, self.previous = warmup, None
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = (time.perf_counter(), time.process_time())
        if batch_idx + 1 > self.warmup and self.previous is not None:
            self.wall.append(now[0] - self.previous[0])
            self.cpu.append(now[1] - self.previous[1])
        self.previous = now


class _TimedClock(_FetchClock):
    """The fetch clock with the time of its own calls added to ``owner.seconds``."""

    def __init__(self, inner, owner: "SelfTimedTelemetry"):
        super().__init__(inner)
        self.owner = owner

    def start(self, action_name: str) -> None:
        started = time.perf_counter()
        super().start(action_name)
        self.owner.seconds += time.perf_counter() - started

    def stop(self, action_name: str) -> None:
        started = time.perf_counter()
        super().stop(action_name)
        self.owner.seconds += time.perf_counter() - started


def _timed(name: str):
    def hook(self, *args, **kwargs):
        started = time.perf_counter()
        getattr(Telemetry, name)(self, *args, **kwargs)
        self.seconds += time.perf_counter() - started
    return hook


class SelfTimedTelemetry(Telemetry):
    """Telemetry that adds the time spent in its own hooks and profiler wrapper to ``seconds``."""

    seconds = 0.0
    on_train_batch_start = _timed("on_train_batch_start")
    on_before_backward = _timed("on_before_backward")
    on_after_backward = _timed("on_after_backward")
    on_train_batch_end = _timed("on_train_batch_end")
    on_train_epoch_start = _timed("on_train_epoch_start")

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._clock = _TimedClock(self._clock.inner, self)
        trainer.profiler = self._clock


def _config(model: str, args: argparse.Namespace, telemetry: bool, cache: str):
    overrides = MODELS[model] + [
        f"telemetry.enabled={str(telemetry).lower()}", f"telemetry.every_n_steps={args.every}",
        f"trainer.log_every_n_steps={args.every}", f"+trainer.max_steps={args.warmup + args.steps}",
        "+trainer.limit_val_batches=0", "+trainer.num_sanity_val_steps=0", "callbacks=none",
        "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false", f"threads={args.threads}",
        f"seed={args.seed}", f"data.cache_dir={cache}"]
    return compose_config("train", overrides=overrides), overrides


def _train(cfg, datamodule, folder: Path, args: argparse.Namespace, self_timed: bool = False) -> dict[str, Any]:
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids)
    trainer, _ = build_trainer(cfg, folder)
    wall = StepWall(args.warmup)
    trainer.callbacks.append(wall)
    if self_timed:
        index = next(i for i, c in enumerate(trainer.callbacks) if isinstance(c, Telemetry))
        trainer.callbacks[index] = SelfTimedTelemetry(cfg.telemetry.every_n_steps, cfg.telemetry.nvml)
    trainer.fit(task, datamodule=datamodule)
    telemetry = next((c for c in trainer.callbacks if isinstance(c, Telemetry)), None)
    out = {"step_ms": 1e3 * statistics.fmean(wall.wall), "step_cpu_ms": 1e3 * statistics.fmean(wall.cpu),
           "fastest_step_ms": 1e3 * min(wall.wall), "timed_steps": len(wall.wall)}
    if telemetry is not None:
        out["telemetry"] = telemetry.summary()
    if self_timed:
        out["telemetry_seconds"] = telemetry.seconds
        out["telemetry_us_per_step"] = 1e6 * telemetry.seconds / telemetry.summary()["steps"]
    return out


def bench_model(model: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cache = str(ROOT / ".cache" / "genrec")
    configs = {arm: _config(model, args, arm == "on", cache) for arm in ("on", "off")}
    datamodule = build_datamodule(configs["on"][0])
    datamodule.setup()
    steps_per_epoch = len(datamodule.train_dataloader().batch_sampler)
    if args.warmup + args.steps > steps_per_epoch:
        raise SystemExit(f"--warmup + --steps = {args.warmup + args.steps} exceeds the {steps_per_epoch} steps of an "
                         "epoch")
    pairs = []
    for i in range(args.pairs):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        result = {arm: _train(configs[arm][0], datamodule, tmp / f"{model}-{i}-{arm}", args) for arm in order}
        on, off = result["on"], result["off"]
        pairs.append({"order": "-".join(order), "on_step_ms": on["step_ms"], "off_step_ms": off["step_ms"],
                      "overhead": on["step_ms"] / off["step_ms"] - 1, "on_step_cpu_ms": on["step_cpu_ms"],
                      "off_step_cpu_ms": off["step_cpu_ms"], "cpu_overhead": on["step_cpu_ms"] / off["step_cpu_ms"] - 1,
                      "on_fastest_ms": on["fastest_step_ms"], "off_fastest_ms": off["fastest_step_ms"],
                      "fastest_overhead": on["fastest_step_ms"] / off["fastest_step_ms"] - 1,
                      "telemetry": on["telemetry"]})
        print(f"{model} pair {i} ({pairs[-1]['order']}): mean step on {on['step_ms']:.2f} ms, off {off['step_ms']:.2f} "
              f"ms ({pairs[-1]['overhead']:+.2%}); CPU {pairs[-1]['cpu_overhead']:+.2%}; fastest step "
              f"{pairs[-1]['fastest_overhead']:+.2%}", flush=True)
    timed = _train(configs["on"][0], datamodule, tmp / f"{model}-self-timed", args, self_timed=True)
    overheads = [p["overhead"] for p in pairs]
    cpu_overheads = [p["cpu_overhead"] for p in pairs]
    fastest_overheads = [p["fastest_overhead"] for p in pairs]
    median_pair = sorted(pairs, key=lambda p: p["on_step_ms"])[len(pairs) // 2]
    return {
        "overrides": configs["on"][1],
        "steps_per_epoch": steps_per_epoch,
        "pairs": pairs,
        "off_step_ms_median": statistics.median(p["off_step_ms"] for p in pairs),
        "on_step_ms_median": statistics.median(p["on_step_ms"] for p in pairs),
        "overhead_median": statistics.median(overheads),
        "overhead_min": min(overheads),
        "overhead_max": max(overheads),
        "cpu_overhead_median": statistics.median(cpu_overheads),
        "cpu_overhead_min": min(cpu_overheads),
        "cpu_overhead_max": max(cpu_overheads),
        "fastest_overhead_median": statistics.median(fastest_overheads),
        "fastest_overhead_min": min(fastest_overheads),
        "fastest_overhead_max": max(fastest_overheads),
        "self_timed": {"step_ms": timed["step_ms"], "telemetry_us_per_step": timed["telemetry_us_per_step"],
                       "share_of_step": timed["telemetry_us_per_step"] / (1e3 * timed["step_ms"])},
        "telemetry_summary": median_pair["telemetry"],  # the "on" training with the median step time
        "dataset": datamodule.data.summary(),
    }


def main() -> None:
    args = _parse()
    if args.every > args.steps:
        raise SystemExit(f"--every {args.every} > --steps {args.steps}: no telemetry row would be written in the "
                         "timed steps, and the cost of writing one would not be measured")
    origin = provenance()  # the commit checked out when the benchmark started
    torch.set_num_threads(args.threads)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            results[model] = bench_model(model, args, Path(tmp))
    print(f"\nTelemetry overhead ({args.pairs} on/off pairs per model, alternating; {args.steps} timed steps each, "
          f"threads={args.threads}; a shared 2-core machine):")
    print(f"{'model':<8}{'off ms/step':>13}{'on ms/step':>12}{'mean step':>11}{'CPU':>9}{'fastest step':>14}"
          f"{'own code µs/step':>18}{'share':>9}   (overheads: median over pairs)")
    for model, r in results.items():
        own = r["self_timed"]
        print(f"{model:<8}{r['off_step_ms_median']:>13.2f}{r['on_step_ms_median']:>12.2f}"
              f"{r['overhead_median']:>+11.2%}{r['cpu_overhead_median']:>+9.2%}{r['fastest_overhead_median']:>+14.2%}"
              f"{own['telemetry_us_per_step']:>18.1f}{own['share_of_step']:>9.3%}")
    write_json(Path(args.out), {
        "kind": "bench_telemetry",
        "settings": {"pairs": args.pairs, "steps": args.steps, "warmup": args.warmup, "every_n_steps": args.every,
                     "threads": args.threads, "seed": args.seed, "data": "synthetic (the default preset)"},
        "goal": "telemetry adds < 2% to a training step",
        "machine_note": "a 2-core machine shared with other engineers' jobs: single pairs are noisy; the self-timed "
                        "figure is the steadier measure of the cost",
        "models": results,
        **origin,
    })
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
