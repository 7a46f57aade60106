"""genrec-eval on a checkpoint: all metrics, breakdowns, two runs side by side, PNG and metrics.json."""
import json

import pytest
import torch
from omegaconf import OmegaConf

from genrec import evaluate as eval_entry
from genrec.conf import compose_config
from genrec.errors import UserError
from genrec.runs import file_digest
from genrec.training.builders import build_datamodule, build_task


def _eval_config(*overrides: str):
    return compose_config("eval", overrides=list(overrides))


def _untrained_run(run_dir, folder, **data_overrides):
    """A run folder like genrec-train's, holding the freshly initialised model of run_dir's config as the checkpoint
    its metrics.json names."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    for key, value in data_overrides.items():
        OmegaConf.update(cfg, key, value)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    torch.manual_seed(1)
    best = folder / "checkpoints" / "best.ckpt"
    torch.save({"state_dict": build_task(cfg, datamodule.data.num_items).state_dict()}, best)
    (folder / "metrics.json").write_text(json.dumps({"checkpoints": {"best": {"file": "checkpoints/best.ckpt",
                                                                              "sha256": file_digest(best)}}}))
    return folder


def test_breakdowns_plots_and_two_runs_side_by_side(tiny_run, tmp_path):
    run_dir, metrics = tiny_run
    other = _untrained_run(run_dir, tmp_path / "untrained")
    out = eval_entry.run(_eval_config(f"run_dir={run_dir}", f"compare_to={other}", f"out_dir={tmp_path / 'eval'}"))
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(out))
    assert (tmp_path / "eval" / "evaluation.png").stat().st_size > 10_000 and saved["plots"] == ["evaluation.png"]
    assert list(saved["models"]) == ["sasrec #1", "sasrec #2"]
    assert saved["models"]["sasrec #2"]["run_dir"] == str(other)
    assert set(saved["baselines"]) == {"most_popular", "transitions", "transitions_last3_skip"}
    users = metrics["dataset"]["users"]
    for name, row in {**saved["models"], **saved["baselines"]}.items():
        assert set(row["breakdowns"]) == {"history_length", "target_popularity", "cold_items"}
        for groups in row["breakdowns"].values():
            assert sum(g["users"] for g in groups.values()) == users, name
    for split in ("valid", "test"):  # the checkpoint's own numbers and the baselines the training run recorded
        assert saved["models"]["sasrec #1"]["metrics"][split] == pytest.approx(metrics["metrics"][split], abs=1e-6)
        for name, baseline in metrics["baselines"].items():
            assert saved["baselines"][name]["metrics"][split] == pytest.approx(baseline[split], abs=1e-6)
    assert saved["models"]["sasrec #2"]["metrics"]["test"] != saved["models"]["sasrec #1"]["metrics"]["test"]


def test_runs_on_different_data_are_not_compared(tiny_run, tmp_path):
    run_dir, _ = tiny_run
    other = _untrained_run(run_dir, tmp_path / "other", **{"data.reader.num_users": 200})
    with pytest.raises(UserError, match=r"compare_to: .*other/config.yaml was trained on .*users.*same dataset"):
        eval_entry.run(_eval_config(f"run_dir={run_dir}", f"compare_to={other}", f"out_dir={tmp_path / 'eval'}",
                                    "baselines=[]"))
    split = _untrained_run(run_dir, tmp_path / "split",
                           **{"data.split": {"kind": "time", "valid_from": 0.8, "test_from": 0.9}})
    with pytest.raises(UserError, match=r"compare_to: .*split/config.yaml was trained on .*'kind': 'time'.*and split"):
        eval_entry.run(_eval_config(f"run_dir={run_dir}", f"compare_to={split}", f"out_dir={tmp_path / 'eval'}",
                                    "baselines=[]"))
