"""Prefetching inside genrec-train (issue 46): a dynamic table with a tier 2 maps each step's rows while the step before
trains, and the run is the same as mapping them in the step — metrics and table counters (exact resume after a kill:
tests/test_resume.py, kind ``sasrec_dynamic_prefetch``)."""
from __future__ import annotations

from genrec import train as train_entry
from genrec.conf import compose_config
from tests.embedding.test_dynamic_runs import TINY_DYNAMIC

#: 600 items, 300 rows in memory, the last three batches' rows pinned (the one training, the one mapped ahead, the one
#: before): steps fetch rows from the store; step checkpoints every 5 steps
PREFETCH = [o for o in TINY_DYNAMIC if not o.startswith(("model.embedding.pinned_batches", "trainer.max_epochs",
                                                         "data.max_len"))]
PREFETCH += ["data.max_len=10", "model.embedding.pinned_batches=2", "trainer.max_epochs=2", "checkpoint_every_n_steps=5"]


def _train(tmp_path, name: str, *overrides: str) -> dict:
    cfg = compose_config("train", PREFETCH + [f"data.cache_dir={tmp_path / 'cache'}",
                                              f"model.embedding.store.path={tmp_path / name}-store", *overrides])
    return train_entry.run(cfg, tmp_path / name)


def _same(a: dict, b: dict) -> None:
    assert a["metrics"] == b["metrics"] and a["best_epoch"] == b["best_epoch"]  # == on the floats
    counters = ("admitted", "evicted", "hits_tier0", "hits_tier2", "live_rows_tier0")
    assert {k: a["item_table"][k] for k in counters} == {k: b["item_table"][k] for k in counters}


def test_prefetching_trains_exactly_like_mapping_in_the_step(tmp_path):
    mapped = _train(tmp_path, "depth0")
    prefetched = _train(tmp_path, "depth1", "model.embedding.prefetch_depth=1")
    assert prefetched["item_table"]["hits_tier2"] > 0  # rows really came back from the store
    _same(prefetched, mapped)
