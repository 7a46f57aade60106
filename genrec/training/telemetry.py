"""Telemetry of a training run: throughput, where a step's time goes, memory, and counters of the model's modules.

:class:`Telemetry` is a Lightning callback that genrec's ``build_trainer`` adds to every run (``telemetry.*`` in the
training config). Every ``every_n_steps`` training steps it logs, through the run's loggers (CSV, TensorBoard,
MLflow, W&B), the means over the steps since its last row:

* ``telemetry/samples_per_s`` (sequences) and ``telemetry/positions_per_s`` (item positions, the jagged ``N`` of a
  :class:`~genrec.data.batch.JaggedBatch`), this process's;
* ``telemetry/step_ms`` split into ``data_ms`` (fetching the batch from the data loader and moving it to the
  device), ``forward_ms`` (training step up to the loss: model, loss, ``self.log``), ``backward_ms``,
  ``optimizer_ms`` (from the end of the backward pass to the end of the batch: clipping, the optimizer step, the
  learning-rate schedule) and ``other_ms`` (from the end of one batch to the next fetch: logging, checkpoints,
  other callbacks); the parts add up to the step;
* ``telemetry/rss_gib`` and ``telemetry/peak_rss_gib`` (this process, from ``/proc`` and ``getrusage``);
* on CUDA, ``telemetry/gpu_util_pct`` (NVML, through ``torch.cuda.utilization``), ``gpu_memory_used_gib`` (NVML:
  the whole device), ``cuda_max_allocated_gib`` and ``cuda_reserved_gib`` (torch's allocator, this process);
  without CUDA or without ``nvidia-ml-py`` the GPU readings are skipped and the summary says why;
* ``telemetry/counters/<module>/<name>``: the counters of every module of the model that has a
  ``counters() -> dict[str, float]`` method (:class:`HasCounters`; the dynamic embedding tables do).

When training ends, :meth:`Telemetry.summary` holds the totals over every step this process trained (the
``telemetry`` section of ``metrics.json``, printed by genrec-train as a table).

How the split is measured: Lightning's hooks ``on_train_batch_start``, ``on_before_backward``,
``on_after_backward`` and ``on_train_batch_end`` mark the step; the data fetch is timed at Lightning's own
instrumentation point (its profiler action ``[_TrainingEpochLoop].train_dataloader_next``), by wrapping the
Trainer's profiler for the time of training (:class:`_FetchClock`; the profiler the run chose still receives every
call). Times are host (Python) wall-clock times: on CUDA, kernels run asynchronously, so a part's time is the time
the host spent in it, and the GPU's work shows up where the host waits for it (e.g. the loss read for logging);
the step total and the throughput are exact over many steps. Sharded runs (TorchRec): the input and output
all-to-alls of the embedding lookup are inside ``forward``, the gradients' all-to-all, the dense all-reduce and
the tables' fused optimizer inside ``backward``; communication is not timed apart (TorchRec's collectives run
inside autograd and awaitables, which no Lightning hook separates). A task that optimises manually (the pipelined
sparse input, ``sharding.pipeline=sparse_dist``) fetches, runs forward, backward and the optimizer inside one
``training_step``, where no hook can split them: its whole step, from the end of the previous one, is counted as
``other`` and the summary says ``"split": false``.

The callback reads clocks and counters only: it draws no random numbers and changes nothing in training, so exact
resume holds (tests/test_resume.py runs with it). It keeps no state in checkpoints: after a resume its totals
count the steps trained since the resume.
"""
from __future__ import annotations

import logging
import math
import os
import resource
import statistics
import sys
import time
from array import array
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler

from genrec.data.batch import JaggedBatch

log = logging.getLogger("genrec.train")

GIB = float(1 << 30)
#: Lightning's profiler action around ``next()`` of the training data loader
FETCH_ACTION = "[_TrainingEpochLoop].train_dataloader_next"
#: the parts of a step, in order; they add up to the step time
PARTS = ("data", "forward", "backward", "optimizer", "other")


@runtime_checkable
class HasCounters(Protocol):
    """A module whose counters telemetry logs: totals and rates as plain floats, e.g. a dynamic embedding table's
    ``{"lookups": ..., "hit_rate_tier0": ...}``."""

    def counters(self) -> dict[str, float]: ...


def counter_modules(model: torch.nn.Module) -> dict[str, HasCounters]:
    """The outermost submodules of ``model`` (``model`` included, named ``""``) with a ``counters()`` method, by
    their qualified name (a module inside one already taken is left out: its owner reports for it)."""
    found: dict[str, HasCounters] = {}
    for name, module in model.named_modules():
        if any(name.startswith(f"{owner}.") or owner == "" for owner in found):
            continue
        if isinstance(module, HasCounters) and callable(module.counters):
            found[name] = module
    return found


def rss_bytes() -> int | None:
    """This process's resident set size now (Linux ``/proc/self/statm``), or ``None`` where there is no /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def peak_rss_bytes() -> int:
    """This process's peak resident set size since it started (``getrusage``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def batch_counts(batch: Any) -> tuple[int, int]:
    """(sequences, item positions) of a training batch (a :class:`JaggedBatch`, or one inside a DrawnBatch or a
    SparseBatch); (0, 0) for anything else."""
    batch = getattr(batch, "batch", batch)
    if isinstance(batch, JaggedBatch):
        return batch.batch_size, int(batch.item_ids.numel())
    return 0, 0


class _GPU:
    """GPU readings through NVML (``torch.cuda.utilization`` / ``device_memory_used``) and torch's allocator;
    ``skipped`` says why there are none."""

    def __init__(self, device: torch.device, enabled: bool):
        self.device, self.skipped = device, None
        if not enabled:
            self.skipped = "telemetry.nvml=false"
        elif device.type != "cuda":
            self.skipped = f"training runs on {device.type}, not on a CUDA device"
        else:
            try:
                torch.cuda.utilization(device)
            except ModuleNotFoundError:
                self.skipped = "nvidia-ml-py (pynvml) is not installed (pip install nvidia-ml-py)"
            except Exception as err:  # NVML present but not usable (no driver access): say so, train on
                self.skipped = f"NVML is not usable: {' '.join(str(err).split())}"

    def read(self) -> dict[str, float]:
        if self.skipped:
            return {}
        return {"gpu_util_pct": float(torch.cuda.utilization(self.device)),
                "gpu_memory_used_gib": torch.cuda.device_memory_used(self.device) / GIB,
                "cuda_max_allocated_gib": torch.cuda.max_memory_allocated(self.device) / GIB,
                "cuda_reserved_gib": torch.cuda.memory_reserved(self.device) / GIB}


class _FetchClock(Profiler):
    """The Trainer's profiler, passed every call, plus the time the last training-batch fetch started
    (Lightning's action :data:`FETCH_ACTION`); the fetch ends where the step's ``on_train_batch_start`` begins, so
    the data part includes moving the batch to the device."""

    def __init__(self, inner: Profiler):
        super().__init__()
        self.inner = inner
        self.fetch_start: float | None = None

    def start(self, action_name: str) -> None:
        if action_name == FETCH_ACTION:
            self.fetch_start = time.perf_counter()
        self.inner.start(action_name)

    def stop(self, action_name: str) -> None:
        self.inner.stop(action_name)

    def summary(self) -> str:
        return self.inner.summary()

    def describe(self) -> None:
        self.inner.describe()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        self.inner.setup(stage, local_rank, log_dir)

    def teardown(self, stage: str | None) -> None:
        self.inner.teardown(stage)


class _Totals:
    """Sums over a span of training steps."""

    def __init__(self) -> None:
        self.steps = 0
        self.samples = 0
        self.positions = 0
        self.seconds = dict.fromkeys(PARTS, 0.0)

    def add(self, samples: int, positions: int, parts: dict[str, float]) -> None:
        self.steps += 1
        self.samples += samples
        self.positions += positions
        for part, seconds in parts.items():
            self.seconds[part] += seconds

    @property
    def step_seconds(self) -> float:
        return sum(self.seconds.values())

    def rates(self) -> dict[str, float]:
        """Throughput and the mean time of every part (ms per step)."""
        total = self.step_seconds
        out = {"samples_per_s": self.samples / total if total else math.nan,
               "positions_per_s": self.positions / total if total else math.nan,
               "step_ms": 1e3 * total / self.steps if self.steps else math.nan}
        out.update({f"{part}_ms": 1e3 * s / self.steps if self.steps else math.nan for part, s in self.seconds.items()})
        return out


class Telemetry(Callback):
    """Logs throughput, the parts of a step's time, memory, GPU readings and module counters every
    ``every_n_steps`` training steps, and sums them up when training ends (see the module doc).

    Args:
        every_n_steps: steps between two logged rows (``>= 1``).
        nvml: read GPU utilisation and device memory through NVML when training on CUDA.
    """

    def __init__(self, every_n_steps: int = 20, nvml: bool = True):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps, self.nvml = every_n_steps, nvml
        self._clock: _FetchClock | None = None
        self._gpu: _GPU | None = None
        self._counters: dict[str, HasCounters] = {}
        self._reset_run()

    def _reset_run(self) -> None:
        self.total, self.window = _Totals(), _Totals()
        self.step_times = array("d")  # seconds of every step
        self.gpu_samples: list[dict[str, float]] = []
        self.last_counters: dict[str, dict[str, float]] = {}
        self._summary: dict[str, Any] | None = None
        self._marks: dict[str, float] = {}
        self._previous_end: float | None = None
        self._split = True  # False for a task that optimises manually (see the module doc)

    # ---- set-up and tear-down ------------------------------------------------------------------------------------

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset_run()
        self._clock = _FetchClock(trainer.profiler)
        trainer.profiler = self._clock
        self._gpu = _GPU(pl_module.device, self.nvml)
        self._counters = counter_modules(pl_module)
        self._split = pl_module.automatic_optimization

    def _uninstall(self, trainer: L.Trainer) -> None:
        if self._clock is not None and trainer.profiler is self._clock:
            trainer.profiler = self._clock.inner
        self._clock = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._uninstall(trainer)
        self._summary = self._summarise(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._uninstall(trainer)  # training stopped by an exception: leave the Trainer's profiler as it was

    # ---- one step ------------------------------------------------------------------------------------------------

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
                             ) -> None:
        self._marks = {"start": time.perf_counter()}

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        self._marks["before_backward"] = time.perf_counter()

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._marks["after_backward"] = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._previous_end = None  # the gap across a validation pass is not part of a training step

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._previous_end = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        end = time.perf_counter()
        marks, clock = self._marks, self._clock
        if clock is None or "start" not in marks:
            return
        # a fetch Lightning did not report (it always does: see FETCH_ACTION) would count as "other"
        fetch_start = clock.fetch_start if clock.fetch_start is not None else marks["start"]
        clock.fetch_start = None
        # a batch without a backward pass (a skipped step) counts as forward only
        before_backward = marks.get("before_backward", end)
        after_backward = marks.get("after_backward", before_backward)
        if self._split:
            parts = {"data": marks["start"] - fetch_start, "forward": before_backward - marks["start"],
                     "backward": after_backward - before_backward, "optimizer": end - after_backward,
                     "other": fetch_start - self._previous_end if self._previous_end is not None else 0.0}
        else:
            parts = dict.fromkeys(PARTS, 0.0)
            parts["other"] = end - (self._previous_end if self._previous_end is not None else marks["start"])
        self._previous_end = end
        samples, positions = batch_counts(batch)
        self.total.add(samples, positions, parts)
        self.window.add(samples, positions, parts)
        self.step_times.append(sum(parts.values()))
        if trainer.global_step % self.every_n_steps == 0:
            self._log_row(trainer)

    # ---- logging -------------------------------------------------------------------------------------------------

    def _readings(self) -> dict[str, float]:
        """Memory, GPU and counters now (recorded for the summary as well)."""
        out = {"peak_rss_gib": peak_rss_bytes() / GIB}
        rss = rss_bytes()
        if rss is not None:
            out["rss_gib"] = rss / GIB
        gpu = self._gpu.read() if self._gpu is not None else {}
        if gpu:
            self.gpu_samples.append(gpu)
        out.update(gpu)
        for name, module in self._counters.items():
            values = {key: float(value) for key, value in module.counters().items()}
            if not values:  # e.g. a static item table: the interface has counters, this table keeps none
                continue
            self.last_counters[name or "model"] = values
            out.update({f"counters/{name or 'model'}/{key}": value for key, value in values.items()})
        return out

    def _log_row(self, trainer: L.Trainer) -> None:
        row = {**self.window.rates(), **self._readings()}
        self.window = _Totals()
        if trainer.is_global_zero:
            metrics = {f"telemetry/{key}": value for key, value in row.items() if not math.isnan(value)}
            metrics["epoch"] = trainer.current_epoch
            # the step index Lightning logs this batch's metrics at (it counts from 0): the CSV log's resume
            # truncation then keeps exactly the rows of the steps a checkpoint holds
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step - 1)

    # ---- the summary ---------------------------------------------------------------------------------------------

    def _summarise(self, trainer: L.Trainer) -> dict[str, Any]:
        readings = self._readings()
        total = self.total
        rates = total.rates()
        step_seconds = total.step_seconds
        summary: dict[str, Any] = {
            "steps": total.steps,
            "samples": total.samples,
            "positions": total.positions,
            "samples_per_s": rates["samples_per_s"],
            "positions_per_s": rates["positions_per_s"],
            "step_ms": {"mean": rates["step_ms"],
                        "median": 1e3 * statistics.median(self.step_times) if self.step_times else math.nan},
            "parts_ms": {part: rates[f"{part}_ms"] for part in PARTS},
            "parts_share": {part: total.seconds[part] / step_seconds if step_seconds else math.nan for part in PARTS},
            "peak_rss_gib": readings["peak_rss_gib"],
            "processes": trainer.world_size,
            "split": self._split,
            "note": "this process's steps since it started training (a resumed run counts from the resume); "
                    "host wall-clock times",
        }
        if self._gpu is not None and self._gpu.skipped:
            summary["gpu"] = {"skipped": self._gpu.skipped}
        elif self.gpu_samples:
            summary["gpu"] = {"util_pct_mean": statistics.fmean(s["gpu_util_pct"] for s in self.gpu_samples),
                              "samples": len(self.gpu_samples),
                              **{key: max(s[key] for s in self.gpu_samples)
                                 for key in ("gpu_memory_used_gib", "cuda_max_allocated_gib", "cuda_reserved_gib")}}
        if self.last_counters:
            summary["counters"] = self.last_counters
        return _finite(summary)

    def summary(self) -> dict[str, Any] | None:
        """The totals of the last training (``None`` before training ended), for ``metrics.json``."""
        return self._summary


def _finite(node: Any) -> Any:
    """``node`` with every NaN replaced by ``None`` (JSON has no NaN; a run that trained no step has no rates)."""
    if isinstance(node, dict):
        return {key: _finite(value) for key, value in node.items()}
    return None if isinstance(node, float) and math.isnan(node) else node


def format_summary(summary: dict[str, Any]) -> str:
    """The printed table of a telemetry summary: throughput, memory, then each part of a step and its share."""
    def number(value: float | None, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    lines = [f"Training telemetry ({summary['steps']} steps; per process, {summary['processes']} in all):",
             f"  {number(summary['samples_per_s'], ',.1f')} sequences/s, "
             f"{number(summary['positions_per_s'], ',.0f')} positions/s, "
             f"step {number(summary['step_ms']['mean'], '.2f')} ms mean / "
             f"{number(summary['step_ms']['median'], '.2f')} ms median, peak RSS {summary['peak_rss_gib']:.2f} GiB",
             f"  {'part':<10}{'ms/step':>10}{'share':>9}"]
    lines += [f"  {part:<10}{number(summary['parts_ms'][part], '.2f'):>10}"
              f"{number(summary['parts_share'][part], '.1%'):>9}" for part in PARTS]
    if not summary.get("split", True):
        lines.append("  (a manually optimised step, e.g. pipelined: its parts run inside one training_step and are "
                     "not split; all under other)")
    gpu = summary.get("gpu")
    if gpu and "skipped" in gpu:
        lines.append(f"  GPU readings skipped: {gpu['skipped']}")
    elif gpu:
        lines.append(f"  GPU: {gpu['util_pct_mean']:.0f}% utilisation (mean of {gpu['samples']} NVML samples), "
                     f"device memory {gpu['gpu_memory_used_gib']:.2f} GiB, torch max allocated "
                     f"{gpu['cuda_max_allocated_gib']:.2f} GiB")
    for name, values in summary.get("counters", {}).items():
        lines.append(f"  {name}: " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    return "\n".join(lines)
