"""Telemetry (genrec.training.telemetry): every run's metrics.json and logs carry it, its step split puts known
delays in the right part, its parts add up to the step, its counts match the data, and module counters are
logged."""
from __future__ import annotations

import time

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from genrec.conf import compose_config
from genrec.data.batch import TrainSequences
from genrec.data.datamodule import load_dataset
from genrec.training.builders import build_datamodule, build_task
from genrec.training.telemetry import PARTS, Telemetry, counter_modules, format_summary
from genrec.training.fit import build_trainer
from tests.conftest import TINY_RUN

DELAY = 0.04  # seconds added to one part of every step


def test_every_run_has_a_telemetry_summary_and_rows(tiny_run):
    _, metrics = tiny_run
    summary = metrics["telemetry"]
    assert summary["steps"] == metrics["steps_run"] > 0
    # one epoch: every training sequence once
    train = _train_sequences(metrics)
    assert summary["samples"] == len(train) > 0
    assert summary["positions"] == int(train.lengths.sum())
    assert summary["positions_per_s"] / summary["samples_per_s"] == pytest.approx(
        summary["positions"] / summary["samples"])
    assert sum(summary["parts_ms"].values()) == pytest.approx(summary["step_ms"]["mean"])
    assert sum(summary["parts_share"].values()) == pytest.approx(1.0)
    assert 0.05 < summary["peak_rss_gib"] < 24
    assert "not on a CUDA device" in summary["gpu"]["skipped"]
    table = format_summary(summary)
    assert "sequences/s" in table and all(part in table for part in PARTS)


def _train_sequences(metrics) -> TrainSequences:
    cfg = OmegaConf.create(metrics["config"])
    return TrainSequences(load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir), cfg.data.max_len)


class Calls(nn.Module):
    """A module with counters, as the dynamic embedding tables have."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def counters(self) -> dict[str, float]:
        return {"steps": float(self.steps)}


def test_known_delays_land_in_their_part_and_counters_are_logged(tmp_path):
    cfg = compose_config("train", overrides=TINY_RUN + [f"data.cache_dir={tmp_path / 'cache'}", "callbacks=none",
                                                        "logger=csv", "telemetry.every_n_steps=2", "baselines=[]",
                                                        "threads=1"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items)
    task.model.add_module("calls", Calls())
    trainer, _ = build_trainer(cfg, tmp_path / "run")

    loader = datamodule.train_dataloader
    def slow_loader():
        real = loader()
        collate = real.collate_fn
        real.collate_fn = lambda examples: (time.sleep(DELAY), collate(examples))[1]
        return real
    datamodule.train_dataloader = slow_loader

    loss_of = task.training_loss
    def slow_loss(batch):
        time.sleep(DELAY)
        task.model.calls.steps += 1
        loss = loss_of(batch)
        loss.register_hook(lambda grad: time.sleep(DELAY))  # runs first thing in the backward pass
        return loss
    task.training_loss = slow_loss

    step = task.optimizer_step
    def slow_step(*args, **kwargs):
        step(*args, **kwargs)  # runs the closure (forward and backward), then the optimizer
        time.sleep(DELAY)
    task.optimizer_step = slow_step

    trainer.fit(task, datamodule=datamodule)
    telemetry = next(c for c in trainer.callbacks if isinstance(c, Telemetry))
    summary = telemetry.summary()
    parts = summary["parts_ms"]
    for part in ("data", "forward", "backward", "optimizer"):
        assert parts[part] >= 1e3 * DELAY, (part, parts)
    assert parts["other"] < 1e3 * DELAY, parts
    assert summary["counters"] == {"model.calls": {"steps": float(trainer.global_step)}}
    rows = pd.read_csv(tmp_path / "run" / "logs" / "metrics.csv").dropna(subset=["telemetry/step_ms"])
    # every 2 steps, at the step index Lightning logs the same batch's loss at (global step - 1)
    assert rows["step"].tolist() == [s - 1 for s in range(2, trainer.global_step + 1, 2)]
    assert set(f"telemetry/{p}_ms" for p in PARTS) <= set(rows.columns)
    assert (rows["telemetry/rss_gib"] > 0).all() and (rows["telemetry/samples_per_s"] > 0).all()
    assert rows["telemetry/counters/model.calls/steps"].tolist() == [float(s + 1) for s in rows["step"]]
    assert type(trainer.profiler).__name__ == "PassThroughProfiler"  # the run's own profiler is given back


def test_a_manually_optimised_step_is_counted_whole_under_other(tmp_path):
    import lightning as L

    class Manual(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            time.sleep(DELAY)  # fetch, forward, backward and optimizer all happen in here
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(self.layer(batch[0]).square().mean())
            optimizer.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    telemetry = Telemetry(every_n_steps=1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), batch_size=3)
    trainer = L.Trainer(max_epochs=1, callbacks=[telemetry], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Manual(), data)
    summary = telemetry.summary()
    assert summary["split"] is False and summary["steps"] == 4
    assert all(summary["parts_ms"][part] == 0.0 for part in ("data", "forward", "backward", "optimizer"))
    assert summary["parts_ms"]["other"] == pytest.approx(summary["step_ms"]["mean"])
    assert summary["parts_ms"]["other"] >= 1e3 * DELAY
    assert "not split" in format_summary(summary)


def test_counter_modules_takes_the_outermost_module_with_counters():
    inner = Calls()
    outer = nn.Sequential(nn.Linear(2, 2), nn.ModuleDict({"table": Calls(), "other": nn.ReLU()}))
    outer[1]["table"].add_module("nested", inner)  # reported by its owner
    assert list(counter_modules(outer)) == ["1.table"]
    assert list(counter_modules(Calls())) == [""]


def test_telemetry_can_be_switched_off(tmp_path):
    cfg = compose_config("train", overrides=TINY_RUN + ["telemetry.enabled=false"])
    trainer, _ = build_trainer(cfg, tmp_path / "run")
    assert not any(isinstance(c, Telemetry) for c in trainer.callbacks)


def test_every_n_steps_must_be_positive():
    with pytest.raises(ValueError, match="every_n_steps"):
        Telemetry(every_n_steps=0)


def test_batch_counts_of_a_jagged_batch():
    from genrec.data.batch import JaggedBatch
    from genrec.training.telemetry import batch_counts

    batch = JaggedBatch(item_ids=torch.arange(1, 8), offsets=torch.tensor([0, 3, 7]), target_ids=torch.arange(7),
                        user_ids=torch.tensor([0, 1]))
    assert batch_counts(batch) == (2, 7)
    assert batch_counts({"x": torch.zeros(3)}) == (0, 0)


def test_a_dynamic_tables_counters_are_logged_every_n_steps(tmp_path):
    """A real dynamic item table (genrec.embedding.dynamic, tier 2 on RocksDB): its counters are telemetry rows
    every N steps, and the summary holds the table's counters as training left them."""
    cfg = compose_config("train", overrides=[
        "data.reader.num_users=300", "data.reader.num_items=600", "data.reader.num_clusters=6",
        "data.max_len=20", "data.batch_size=8", "trainer.max_epochs=1", "trainer.enable_progress_bar=false",
        "+trainer.enable_model_summary=false", "+trainer.limit_val_batches=0", "model.dim=16",
        "loss@model.loss=sampled", "model.loss.num_negatives=8", "embedding@model.embedding=dynamic",
        "model.embedding.capacity=300", "model.embedding.pinned_batches=1", "callbacks=none", "logger=csv",
        "telemetry.every_n_steps=3", "baselines=[]", "threads=1", f"data.cache_dir={tmp_path / 'cache'}",
        f"model.embedding.store.path={tmp_path / 'store'}"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids)
    trainer, _ = build_trainer(cfg, tmp_path / "run")
    trainer.fit(task, datamodule=datamodule)
    table = task.model.item_embedding
    try:
        summary = next(c for c in trainer.callbacks if isinstance(c, Telemetry)).summary()
        assert summary["counters"] == {"model.item_embedding": {k: float(v) for k, v in table.counters().items()}}
        assert summary["counters"]["model.item_embedding"]["evicted"] > 0  # the table is smaller than the catalogue
        rows = pd.read_csv(tmp_path / "run" / "logs" / "metrics.csv").dropna(subset=["telemetry/step_ms"])
        assert rows["step"].tolist() == [s - 1 for s in range(3, trainer.global_step + 1, 3)]
        evicted = rows["telemetry/counters/model.item_embedding/evicted"]
        assert evicted.is_monotonic_increasing and evicted.iloc[-1] <= summary["counters"]["model.item_embedding"][
            "evicted"]
    finally:
        table.close()
