"""scripts/analysis/cold_start.py end to end on the tiny synthetic dataset with ``data.split.cold_items``: a SASRec
teacher and a SID generator with an item head trained on the split (SIDs recorded as content-made), then every ranking
on all, cold and warm targets, with the invariants that hold by construction."""
import dataclasses
import json

import pytest

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.tokenize.sid_table import SIDTable
from tests.conftest import load_script
from tests.generative.helpers import SMALL, TINY, one_thread

single_thread = pytest.fixture(autouse=True, scope="module")(one_thread)
COLD = ["data.split.cold_items=0.15", "data.split.cold_seed=2"]


@pytest.fixture(scope="module")
def cold_runs(sid_table, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cold")
    text = tmp / "sid_text"  # the random table, recorded as made from item text (what encoder=text writes)
    dataclasses.replace(SIDTable.load(sid_table), config={"encoder": {"name": "text"}}).save(text)
    cache = [f"data.cache_dir={sid_table / 'cache'}"]
    teacher = compose_config("train", TINY + COLD + cache + ["model=sasrec", "model.dim=16"])
    train_entry.run(teacher, tmp / "teacher")
    generator = compose_config("train", TINY + COLD + cache + SMALL["sid_gpt"] + [
        "model=sid_gpt", f"sid_table={text}", "model.generator.item_head=true", "model.generator.item_inputs=true",
        "model.generator.tie_item_tables=true", "ranking@model.decoding=head"])
    metrics = train_entry.run(generator, tmp / "gen")
    out = tmp / "cold.json"
    load_script("scripts/analysis/cold_start.py").main([str(tmp / "gen"), "--teacher", str(tmp / "teacher"),
                                                        "--out", str(out), "--epsilon", "0.1", "0.25"])
    return metrics, json.loads(out.read_text())


def test_every_row_on_all_cold_and_warm_targets(cold_runs):
    metrics, found = cold_runs
    details = found["protocol"]["split_details"]
    assert details["cold_item_count"] == round(0.15 * found["dataset"]["items"]) and details["cold_items"] == 0.15
    run = found["runs"][0]
    assert run["checkpoint"] == metrics["checkpoints"]["best"] and run["sid_table"]["encoder"] == "text"
    rows = {**run["metrics"]["test"], **found["baselines"]["test"]}
    assert set(rows) == {"codes", "codes_unseen", "codes_unseen_first", "head", "hybrid_eps0.1", "hybrid_eps0.25",
                         "most_popular", "transitions", "transitions_last3_skip", "semantic_knn", "semantic_knn_unseen",
                         "teacher"}
    cold = details["cold_targets"]["test"]
    assert cold > 0
    for name, row in rows.items():
        assert row["cold"]["users"] == cold and row["cold"]["users"] + row["warm"]["users"] == row["all"]["users"]
    # the head is the run's own ranking: its recorded test metrics
    assert rows["head"]["all"]["ndcg@10"] == pytest.approx(metrics["metrics"]["test"]["ndcg@10"], abs=1e-6)
    # rankings among the unseen items never hit a warm target; counting baselines never hit a cold one
    for name in ("codes_unseen", "codes_unseen_first", "semantic_knn_unseen"):
        assert rows[name]["warm"]["recall@20"] == 0
    for name in ("most_popular", "transitions", "transitions_last3_skip"):
        assert rows[name]["cold"]["recall@20"] == 0
    # the hybrid's cold items are codes_unseen's best, its other items warm: at ε = 0.25 (5 of 20 slots) it recalls
    # exactly the cold targets codes_unseen ranks in its top 5, and it ranks the warm targets below the head's rank
    assert rows["hybrid_eps0.25"]["cold"]["recall@20"] == pytest.approx(rows["codes_unseen"]["cold"]["recall@5"])
    assert rows["hybrid_eps0.25"]["warm"]["recall@20"] <= rows["head"]["warm"]["recall@20"] + 1e-9
