"""A dynamic item table through genrec-train, genrec-eval and genrec-export: the table is snapshotted beside the
run's checkpoints (tier 0 + the SSD tier), the test metrics come from the best checkpoint's table (genrec-eval
reproduces them), the counters reach metrics.json and the logs, and the export holds every admitted row keyed by
raw ID, or a delta since a version; a bad table setting stops genrec-train with one line."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from genrec import evaluate as eval_entry
from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.embedding.dynamic.export import apply_export
from genrec.export import cli as export_cli
from genrec.training.builders import load_run
from tests.conftest import TINY_RUN
from tests.test_cli_errors import _cli, _one_line_error

TINY_DYNAMIC = ["data.reader.num_users=300", "data.reader.num_items=600", "data.reader.num_clusters=6",
                "data.max_len=20", "data.batch_size=8", "trainer.max_epochs=3", "trainer.enable_progress_bar=false",
                "+trainer.enable_model_summary=false", "model.dim=16", "loss@model.loss=sampled",
                "model.loss.num_negatives=8", "embedding@model.embedding=dynamic", "model.embedding.capacity=300",
                "model.embedding.pinned_batches=1", "baselines=[]", "threads=1"]


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dynamic")
    cfg = compose_config("train", TINY_DYNAMIC + [f"data.cache_dir={tmp / 'cache'}",
                                                  f"model.embedding.store.path={tmp / 'store'}"])
    return tmp / "run", train_entry.run(cfg, tmp / "run")


def test_snapshots_beside_the_checkpoints_and_counters_in_the_records(dynamic_run):
    run_dir, metrics = dynamic_run
    snapshots = sorted(p.name for p in (run_dir / "checkpoints" / "tables").iterdir())
    assert 1 <= len(snapshots) <= 2  # best's and last's (the same one when the last epoch was the best)
    counters = metrics["item_table"]
    assert counters["evicted"] > 0 and counters["hits_tier2"] > 0  # rows went down to the store and came back
    assert counters["live_rows_tier0"] <= counters["capacity"] == 300
    logged = pd.read_csv(run_dir / "logs" / "metrics.csv").dropna(subset=["item_table/evicted"])
    assert len(logged) == metrics["epochs_run"] and logged["item_table/evicted"].is_monotonic_increasing


def test_eval_reproduces_the_best_checkpoints_metrics(dynamic_run):
    run_dir, metrics = dynamic_run
    out = eval_entry.run(compose_config("eval", [f"run_dir={run_dir}", "baselines=[]"]))
    assert out["models"]["sasrec"]["metrics"]["test"] == pytest.approx(metrics["metrics"]["test"], abs=1e-6)


def test_export_holds_every_admitted_row_by_raw_id_and_deltas(dynamic_run, tmp_path):
    run_dir, _ = dynamic_run
    full = export_cli.run(compose_config("export", [f"run_dir={run_dir}", f"out_dir={tmp_path / 'full'}",
                                                    "onnx=false"]))
    entry = full["artifacts"]["item_table_rows"]
    _, _, task = load_run(run_dir)
    table = task.model.item_embedding.table()
    ids, rows, version = apply_export(np.zeros(0, dtype=np.int64), np.zeros((0, 16), np.float32),
                                      tmp_path / "full" / "item_table_rows")
    assert version == entry["version"] and len(ids) == entry["rows"] > 0
    torch.testing.assert_close(torch.from_numpy(rows), table[torch.from_numpy(ids)], rtol=0, atol=0)

    since = entry["version"] - 10
    delta = export_cli.run(compose_config("export", [f"run_dir={run_dir}", f"out_dir={tmp_path / 'delta'}",
                                                     "onnx=false", f"dynamic_since={since}"]))
    delta = delta["artifacts"]["item_table_rows"]
    assert delta["since"] == since and 0 < delta["rows"] < entry["rows"]
    with pytest.raises(ValueError, match="a delta since version"):
        apply_export(ids, rows, tmp_path / "delta" / "item_table_rows", version=since + 1)
    assert json.loads((tmp_path / "delta" / "manifest.json").read_text())["artifacts"]["item_table_rows"] == delta


@pytest.mark.parametrize("override,expected", [
    ("model.embedding.capacity=0", "model.embedding.capacity: must be a positive number of tier-0 rows, got 0"),
    ("model.embedding.admission.policy=sometimes", "model.embedding.admission.policy: must be one of"),
    ("model.embedding.store.path=/etc/hostname/store",
     "model.embedding.store.path: /etc/hostname/store is not a writable folder"),
])
def test_bad_table_configs_stop_genrec_train_in_one_line_before_the_data_loads(override, expected, tmp_path):
    proc = _cli("genrec.train", *TINY_RUN, "embedding@model.embedding=dynamic", override,
                f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", expected)
    assert not (tmp_path / "cache").exists()
