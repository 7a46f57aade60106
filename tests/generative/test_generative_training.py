"""genrec-train with model=tiger and model=sid_gpt on a tiny synthetic dataset: the run folder of the ID-based
models plus the SID table and decoding settings, 0 invalid IDs, baselines; genrec-eval reproduces the test
metrics from the checkpoint; errors name the key."""
import json
import shutil

import numpy as np
import pytest
import torch

from genrec import evaluate as eval_entry
from genrec.export import cli as export_cli
from genrec.export.manifest import validate_manifest
from genrec import train as train_entry
from genrec.tokenize.sid_table import SIDTable
from genrec.training.builders import load_run
from genrec.conf import compose_config
from tests.conftest import load_script
from tests.generative.helpers import SMALL, TINY, one_thread

single_thread = pytest.fixture(autouse=True, scope="module")(one_thread)

HYBRID = ["model.generator.item_head=true", "model.decoding.rank=hybrid"]  # the item head re-ranks the beam
# the same with the head scoring through the item-input table
TIED = HYBRID + ["model.generator.item_inputs=true", "model.generator.tie_item_tables=true"]


VARIANTS = {"tiger": ("tiger", []), "sid_gpt": ("sid_gpt", []), "sid_gpt_hybrid": ("sid_gpt", HYBRID),
            "sid_gpt_tied": ("sid_gpt", TIED)}  # test id -> (model, extra overrides)


@pytest.fixture(scope="module", params=list(VARIANTS))
def trained(request, sid_table, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    name, extra = VARIANTS[request.param]
    cfg = compose_config("train", TINY + SMALL[name] + extra + [f"model={name}", f"sid_table={sid_table}",
                                                               f"data.cache_dir={sid_table / 'cache'}"])
    return name, tmp / "run", train_entry.run(cfg, tmp / "run")


def _rank(run_dir) -> str:
    return json.loads((run_dir / "metrics.json").read_text())["decoding"]["rank"]


def test_run_folder_records_the_sid_table_and_decoding(trained, sid_table):
    name, run_dir, metrics = trained
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["model"] == name and (run_dir / "checkpoints" / "best.ckpt").exists()
    assert saved["sid_table"]["content_hash"] == SIDTable.load(sid_table).content_hash
    rank = _rank(run_dir)
    own = {"rank": rank, "code_weight": 1.0, "carried_by": "codes" if rank == "codes" else "both"}
    assert saved["decoding"] | {"ranking": None} == {"beam": 20, "top_k": 20, "constrained": True, "ranking": None,
                                                     "history_removal": "history items masked in the beam's last step",
                                                     **own}
    for split in ("valid", "test"):
        assert saved["metrics"][split]["invalid_rate"] == 0.0
        assert 0.0 <= saved["metrics"][split]["recall@20"] <= 1.0
    assert set(saved["baselines"]) == {"most_popular", "transitions", "transitions_last3_skip"}


def test_eval_entry_reproduces_test_metrics(trained):
    name, run_dir, metrics = trained
    cfg = compose_config("eval", overrides=[f"run_dir={run_dir}", "baselines=false"])
    out = eval_entry.run(cfg)
    for split in ("valid", "test"):
        got = out["models"][name]["metrics"][split]
        assert got == pytest.approx(metrics["metrics"][split], abs=1e-6)
        assert got["invalid_rate"] == 0.0


def test_eval_decoding_changes_the_first_runs_decoding_only(trained):
    """``decoding={rank:...}`` evaluates the run's checkpoint with another ranking; ``compare_to`` the same run keeps
    its own. The beam's 20 items are the same under ``codes`` and ``hybrid``: recall@20 agrees, the order may not."""
    name, run_dir, metrics = trained
    other = "codes" if _rank(run_dir) == "hybrid" else "hybrid"
    overrides = [f"run_dir={run_dir}", f"compare_to={run_dir}", "baselines=[]", f"out_dir={run_dir / 'eval_rank'}"]
    if name == "tiger" or other == "hybrid":  # no item head to rank with, or no rank at all
        with pytest.raises(Exception, match="decoding|item head"):
            eval_entry.run(compose_config("eval", overrides + [f"decoding={{rank:{other}}}"]))
        return
    out = eval_entry.run(compose_config("eval", overrides + [f"decoding={{rank:{other}}}"]))
    changed, own = out["models"][f"{name} #1"], out["models"][f"{name} #2"]
    assert changed["decoding"] == {"rank": other} and own["decoding"] is None
    assert own["metrics"]["test"] == pytest.approx(metrics["metrics"]["test"], abs=1e-6)
    assert changed["metrics"]["test"]["recall@20"] == pytest.approx(metrics["metrics"]["test"]["recall@20"], abs=1e-6)
    with pytest.raises(Exception, match=r"decoding: unknown key\(s\) \['width'\]"):
        eval_entry.run(compose_config("eval", overrides + ["decoding={width:5}"]))


def test_guided_beam_over_every_prefix_at_code_weight_zero_evaluates_as_the_item_head(trained, tmp_path):
    """genrec-eval ``decoding={rank:guided,code_weight:0}`` with a beam as wide as the corpus returns the item head's
    own top items: the same metrics as ``decoding={rank:items}``."""
    name, run_dir, metrics = trained
    if _rank(run_dir) != "hybrid":
        pytest.skip("guided decoding needs the item head")
    width = metrics["dataset"]["items"]
    test = {}
    for rank, extra in (("items", ""), ("guided", f",code_weight:0,beam:{width}")):
        out = eval_entry.run(compose_config("eval", [f"run_dir={run_dir}", "baselines=[]",
                                                     f"out_dir={tmp_path / rank}", f"decoding={{rank:{rank}{extra}}}"]))
        test[rank] = out["models"][name]["metrics"]["test"]
    assert test["guided"]["invalid_rate"] == 0.0
    assert test["guided"] == pytest.approx(test["items"], abs=1e-6)


def test_compare_rankings_reproduces_the_runs_own_ranking(trained, tmp_path):
    """scripts/analysis/compare_rankings.py: the run's own decoding (its beam of 20) gives its recorded metrics; a
    generator whose item head re-ranks the beam, ranked by its codes instead, ranks the same 20 items: recall@20
    agrees."""
    name, run_dir, metrics = trained
    hybrid = _rank(run_dir) == "hybrid"
    out = tmp_path / "rankings.json"
    variants = ["beam=20"] + (["rank=codes", "code_weight=0.5"] if hybrid else [])
    load_script("scripts/analysis/compare_rankings.py").main([str(run_dir), "--out", str(out)] +
                                         [a for v in variants for a in ("--variant", v)])
    rows = json.loads(out.read_text())["runs"]
    assert [r["decoding"] for r in rows] == [{"beam": 20}] + ([{"rank": "codes"}, {"code_weight": 0.5}]
                                                              if hybrid else [])
    for split in ("valid", "test"):
        assert rows[0]["metrics"][split] == pytest.approx(metrics["metrics"][split], abs=1e-6)
        for other in rows[1:]:
            assert other["metrics"][split]["recall@20"] == pytest.approx(rows[0]["metrics"][split]["recall@20"])


def test_compare_rankings_records_the_protocol_users_checkpoint_and_named_modes(trained, tmp_path):
    """Every row of a ranking file records the run's protocol (its split, the users scored in each split), the
    checkpoint it ranked (file and sha256, those of the run's own record) and what carries its ranking; ``--mode``
    takes the named settings of conf/ranking; the baselines are measured on the same splits."""
    name, run_dir, metrics = trained
    if _rank(run_dir) != "hybrid":
        pytest.skip("the named modes but codes rank with the item head")
    out = tmp_path / "modes.json"
    load_script("scripts/analysis/compare_rankings.py").main(
        [str(run_dir), "--out", str(out), "--baselines", "most_popular"] +
        [a for m in ("codes", "head", "liger", "guided") for a in ("--mode", m)])
    found = json.loads(out.read_text())
    rows = found["runs"]
    assert [(r["mode"], r["decoding"], r["carried_by"]) for r in rows] == [
        ("codes", {"rank": "codes", "code_weight": 1.0}, "codes"),
        ("head", {"rank": "items", "code_weight": 0.0}, "head"),
        ("liger", {"rank": "hybrid", "code_weight": 0.0}, "both"),
        ("guided", {"rank": "guided", "code_weight": 0.5}, "both")]
    users = metrics["protocol"]["split_details"]["users_evaluated"]
    for row in rows:
        assert row["checkpoint"] == metrics["checkpoints"]["best"]
        assert row["protocol"]["users_scored"] == users and row["protocol"]["split"] == metrics["protocol"]["split"]
        assert row["protocol"]["exclude_history"] is True and row["protocol"]["ranking"] == "full corpus"
    assert found["baselines"]["most_popular"]["test"] == pytest.approx(metrics["baselines"]["most_popular"]["test"])


def test_a_decoding_key_added_after_the_run_trained_takes_effect(trained, tmp_path):
    """A run whose saved config predates ``model.decoding.code_weight`` is evaluated with it all the same."""
    name, run_dir, metrics = trained
    if _rank(run_dir) != "hybrid":
        pytest.skip("code_weight acts on runs that rank with hybrid")
    old = tmp_path / "old_run"
    shutil.copytree(run_dir, old)
    config = (old / "config.yaml").read_text()
    assert "code_weight" in config
    (old / "config.yaml").write_text("\n".join(l for l in config.splitlines() if "code_weight" not in l) + "\n")
    _, _, task = load_run(old, decoding={"code_weight": 0.0})
    assert task.model.ranking.code_weight == 0.0


def test_export_writes_the_sid_table_and_decoding_settings(trained, sid_table, tmp_path):
    name, run_dir, metrics = trained
    cfg = compose_config("export", overrides=[f"run_dir={run_dir}", f"out_dir={tmp_path}"])
    manifest = export_cli.run(cfg)
    assert validate_manifest(json.loads((tmp_path / "manifest.json").read_text())) == json.loads(json.dumps(manifest))
    assert manifest["model"] == {"name": name, "kind": "generative", "num_items": metrics["dataset"]["items"],
                                 "max_len": 10}
    assert manifest["decoding"] | {"token_layout": None} == {
        "sid_table": "sid_table", "id_map": "item_ids", "beam": 20, "top_k": 20, "constrained": True,
        "exclude_history": True, "token_layout": None, "rank": _rank(run_dir), "code_weight": 1.0}
    files = {entry["file"] for entry in manifest["artifacts"].values()}
    assert files == {p.name for p in tmp_path.iterdir()} - {"manifest.json"}
    exported, trained_with = SIDTable.load(tmp_path), SIDTable.load(sid_table)
    assert exported.content_hash == trained_with.content_hash == manifest["artifacts"]["sid_table"]["content_hash"]
    assert json.loads((tmp_path / "item_ids.json").read_text())[1:] == list(trained_with.item_raw_ids[1:])


def test_missing_sid_table_is_named(sid_table, tmp_path):
    cfg = compose_config("train", TINY + ["model=sid_gpt", f"data.cache_dir={sid_table / 'cache'}"])
    with pytest.raises(ValueError, match="sid_table: model=sid_gpt generates semantic IDs"):
        train_entry.run(cfg, tmp_path / "run")


def test_the_diagnosis_levels_add_up_to_each_models_log_probability(trained, tiny_run, tmp_path):
    """scripts/analysis/diagnose_generator.py: the generator's per-level nats sum to its test code ``-log p(target)``
    (the run's own metric where its codes rank, else computed here), the teacher's to its softmax over every item, and
    the beam row over every test user is the run's test metrics."""
    name, run_dir, metrics = trained
    script = load_script("scripts/analysis/diagnose_generator.py")
    out = tmp_path / "diagnosis.json"
    script.main(["--generator", str(run_dir), "--teacher", str(tiny_run[0]), "--out", str(out), "--sample", "1000",
                 "--train-batches", "2", "--wide-beam", "40"])
    found = json.loads(out.read_text())
    test = metrics["metrics"]["test"]
    _, datamodule, teacher = load_run(tiny_run[0])
    gen_cfg, gen_data, generator = load_run(run_dir)
    if _rank(run_dir) == "codes":
        code_log_prob = test["target_log_prob"]
    else:
        with torch.no_grad():
            code_log_prob = torch.cat([generator.model.item_log_probs(batch, batch.target_ids[:, None])[:, 0]
                                       for batch in gen_data.test_dataloader()]).double().mean().item()
    assert sum(level["test"]["generator_nats"] for level in found["levels"]) == pytest.approx(-code_log_prob, rel=1e-5)
    scorer, nats = teacher.make_scorer(), []
    with torch.no_grad():
        for batch in gen_data.test_dataloader():
            logp = torch.log_softmax(scorer(batch)[:, 1:], dim=1)
            nats.append(-logp.gather(1, batch.target_ids[:, None] - 1)[:, 0])
    assert found["item_nats"]["test"]["teacher"] == pytest.approx(torch.cat(nats).double().mean().item(), rel=1e-5)
    assert sum(level["test"]["teacher_nats"] for level in found["levels"]) == \
        pytest.approx(found["item_nats"]["test"]["teacher"], rel=1e-6)
    assert found["levels"][0]["test_items_under_prefix"] == metrics["dataset"]["items"]
    for level in found["levels"]:  # renormalised over the valid codes: the same minus log of their mass
        test_level = level["test"]
        assert 0 < test_level["generator_valid_mass"] <= 1 + 1e-6
        assert test_level["generator_valid_nats"] <= test_level["generator_nats"] + 1e-6
    codes = np.array([[-1, -1, -1], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]])  # 4 items, by hand:
    assert script._items_under_prefix(codes)[1:].tolist() == [[4, 3, 2], [4, 3, 2], [4, 3, 1], [4, 1, 1]]
    own_beam = found["decoding"]["rows"][0]
    assert found["decoding"]["sample_users"] == found["item_nats"]["test"]["targets"] == metrics["dataset"]["users"]
    # the run's metrics were logged as float32; the rows rank by codes, as the run does unless its item head re-ranks
    assert own_beam["beam"] == 20
    if _rank(run_dir) == "codes":
        assert own_beam["recall@10"] == pytest.approx(test["recall@10"], abs=1e-6)
