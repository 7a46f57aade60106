"""Quality against CPU time: a Lightning callback that records, at every validation pass, the validation metrics
the task logged and the test metrics of the same weights, against the process CPU seconds the run has spent; and
that stops training once a CPU budget is spent (``+callbacks@callbacks.budget=budget``; scripts/bench/bench_budget.py).

The clock is the process CPU time (``time.process_time``: every thread of the process, so with ``threads=1`` it is
the run's compute whatever else the machine runs) from the moment the callback is built -- with genrec-train,
before the model is built, so building it (the transition prior's counts, ``model.item_init``) counts -- minus the
callback's own evaluations: the test pass after each validation and the validation and test passes before the first
step (the point at step 0), which a run without the callback does not make. Validation passes count: a run makes
them to select its checkpoint.

The callback leaves the global random state and the model's mode as it found them, so a run trains the same with
it and without it. It keeps no state in checkpoints: a resumed run's curve starts afresh.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from genrec.errors import ConfigError
from genrec.eval.metrics import evaluate
from genrec.training.retrieval import RetrievalTask
from genrec.utils.provenance import write_json

#: the file the curve is written to, in the run folder
CURVE_FILE = "budget_curve.json"


class BudgetCurve(Callback):
    """Validation and test metrics against CPU seconds at every validation pass; stops training at ``cpu_seconds``.

    Training stops after the first step that ends with the budget spent; Lightning then validates once more (a run
    told to stop is validated), so the last point may lie past the budget by one validation pass. The curve is
    written to ``<run folder>/budget_curve.json`` after every point: ``{"cpu_seconds_budget", "stopped_by_budget",
    "points": [{"epoch", "step", "cpu_seconds", "valid": {metric: value}, "test": {...}}, ...]}``, the first point
    at step 0 (the model as initialised).

    Args:
        cpu_seconds: the CPU budget in seconds (``None``: none, the run's own epoch and step caps apply).
    """

    def __init__(self, cpu_seconds: float | None = None):
        if cpu_seconds is not None and cpu_seconds <= 0:
            raise ConfigError("callbacks.budget.cpu_seconds", f"got {cpu_seconds}, expected a positive number or null")
        self.cpu_seconds = cpu_seconds
        self.started = time.process_time()
        self.excluded = 0.0  # CPU seconds of the callback's own evaluations
        self.points: list[dict[str, Any]] = []
        self.stopped_by_budget = False

    def spent(self) -> float:
        """CPU seconds the run has spent so far (see the module doc)."""
        return time.process_time() - self.started - self.excluded

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and (trainer.world_size > 1 or not isinstance(pl_module, RetrievalTask)):
            raise ConfigError("callbacks.budget", "budget curves are recorded for a retrieval model (sasrec, hstu) "
                                                  "trained in one process")

    def _evaluate(self, trainer: L.Trainer, task: RetrievalTask, split: str) -> dict[str, float]:
        """``split``'s metrics of the task's current weights, in eval mode; its CPU time is left off the clock."""
        started, training = time.process_time(), task.training
        task.eval()
        with torch.no_grad():  # genrec's loaders draw from their own generators, never from the global one
            metrics = evaluate(task.make_scorer(), trainer.datamodule.eval_dataloader(split),
                               task.evaluator.metrics.ks, task.exclude_history, task.device)
        task.train(training)
        self.excluded += time.process_time() - started
        return metrics

    def _record(self, trainer: L.Trainer, cpu_seconds: float, valid: dict[str, float],
                test: dict[str, float]) -> None:
        self.points.append({"epoch": trainer.current_epoch, "step": trainer.global_step,
                            "cpu_seconds": round(cpu_seconds, 2), "valid": valid, "test": test})
        write_json(Path(trainer.default_root_dir) / CURVE_FILE, self.curve())

    def curve(self) -> dict[str, Any]:
        return {"cpu_seconds_budget": self.cpu_seconds, "stopped_by_budget": self.stopped_by_budget,
                "points": self.points}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        spent = self.spent()
        self._record(trainer, spent, self._evaluate(trainer, pl_module, "valid"),
                     self._evaluate(trainer, pl_module, "test"))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.cpu_seconds is not None and self.spent() >= self.cpu_seconds:
            self.stopped_by_budget = trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        spent = self.spent()
        valid = {k.split("/", 1)[1]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self._record(trainer, spent, valid, self._evaluate(trainer, pl_module, "test"))
