"""The learning-rate schedule (``optim.warmup_steps``, ``optim.schedule``): the multiplier against hand-checked
values, and a real Lightning run whose optimizer follows it at every step."""
from __future__ import annotations

import math

import lightning as L
import pytest

from genrec.conf import compose_config
from genrec.training.builders import build_datamodule, build_task
from genrec.training.task import lr_factor
from tests.conftest import TINY_RUN


def test_the_multiplier_by_hand():
    # warm-up over 2 steps, then cosine over the 8 steps left of 10
    assert [lr_factor(s, 2, "cosine", 10) for s in (0, 1, 2, 6, 10, 12)] == [0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    assert lr_factor(4, 2, "cosine", 10) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert [lr_factor(s, 2, "constant", 10) for s in (0, 1, 5, 10)] == [0.5, 1.0, 1.0, 1.0]
    assert [lr_factor(s, 0, "cosine", 4) for s in (0, 2, 4)] == [1.0, 0.5, 0.0]


class _LearningRates(L.Callback):
    """(global step, learning rate) before every optimizer step."""

    def __init__(self):
        self.seen: list[tuple[int, float]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append((trainer.global_step, trainer.optimizers[0].param_groups[0]["lr"]))


def test_a_run_follows_the_warm_up_and_the_cosine_to_its_last_step(tmp_path):
    cfg = compose_config("train", overrides=TINY_RUN + [f"data.cache_dir={tmp_path}", "trainer.max_epochs=2",
                                                        "optim.warmup_steps=2", "optim.schedule=cosine"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items)
    rates = _LearningRates()
    trainer = L.Trainer(max_epochs=2, callbacks=[rates], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, datamodule=datamodule)
    total = trainer.global_step
    assert total == 2 * len(datamodule.train_dataloader()) and len(rates.seen) == total
    for step, lr in rates.seen:
        assert lr == pytest.approx(cfg.optim.lr * lr_factor(step, 2, "cosine", total), abs=1e-12), step
    assert rates.seen[1][1] == pytest.approx(cfg.optim.lr) and rates.seen[-1][1] < 0.05 * cfg.optim.lr
