"""Hyperparameter search: search-space parsing, the pruning callback on a real study and a real Trainer, the presets,
and whole sweeps through genrec-train -m (killed and resumed, two processes on one study)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import optuna
import pytest
import torch
from hydra.core.plugins import Plugins
from hydra.utils import instantiate
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from genrec.conf import CONF_DIR, compose_config
from genrec.errors import ConfigError
from genrec.sweep.pruning import PRUNER_ATTR, OptunaPruning
from genrec.sweep.sweeper import search_space
from genrec.utils.results import load_result

PRESETS = sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[1]


def test_search_space_from_hydra_sweep_syntax():
    space, fixed = search_space(["optim.lr=tag(log, interval(1e-4, 1e-2))", "model.dim=choice(32, 64)",
                                 "data.max_len=range(50, 201, 50)", "model.encoder.dropout=interval(0.0, 0.5)",
                                 "model.encoder.num_layers=range(1, 4)", "hparams_search=ml100k_sasrec",
                                 "model.dim=16"])
    assert space == {"optim.lr": FloatDistribution(1e-4, 1e-2, log=True),
                     "data.max_len": IntDistribution(50, 200, step=50),
                     "model.encoder.dropout": FloatDistribution(0.0, 0.5),
                     "model.encoder.num_layers": IntDistribution(1, 3)}  # model.dim: fixed by the last override
    assert fixed == ["hparams_search=ml100k_sasrec", "model.dim=16"]
    space, _ = search_space(["model.similarity=choice(dot, cosine)"])
    assert space["model.similarity"] == CategoricalDistribution(["dot", "cosine"])
    with pytest.raises(ConfigError, match="hydra.sweeper.params.seed"):
        search_space(["seed=glob(*)"])


class _Climbing(L.LightningModule):
    """Logs val/score = 0.1 * (epoch + 1) (or a flat 0.05 when ``flat``): a known validation curve."""

    def __init__(self, flat: bool):
        super().__init__()
        self.flat, self.weight = flat, torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight * batch[0]).sum()

    def validation_step(self, batch, batch_idx):
        self.log("val/score", 0.05 if self.flat else 0.1 * (self.current_epoch + 1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 1)), batch_size=2)


def _fit(module, callback, epochs: int) -> L.Trainer:
    trainer = L.Trainer(max_epochs=epochs, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, _loader(), _loader())
    return trainer


def test_pruning_callback_reports_to_the_sweepers_trial_and_prunes(tmp_path):
    """The callback opens the study by URL, takes the pruner the sweeper stored there (not Optuna's default),
    reports every training validation to the trial it is given, and raises TrialPruned when the pruner says so;
    the validation after training is not reported."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    study.set_user_attr(PRUNER_ATTR, {"_target_": "optuna.pruners.ThresholdPruner", "lower": 0.1,
                                      "n_warmup_steps": 1})
    good, flat = study.ask(), study.ask()
    callback = OptunaPruning(storage, "s", good.number, "val/score")
    assert isinstance(callback._trial.study.pruner, optuna.pruners.ThresholdPruner)
    trainer = _fit(_Climbing(flat=False), callback, epochs=3)
    trainer.validate(trainer.lightning_module, _loader(), verbose=False)
    frozen = study.get_trials()[good.number]
    assert frozen.intermediate_values == pytest.approx({0: 0.1, 1: 0.2, 2: 0.3})
    with pytest.raises(optuna.TrialPruned, match="epoch 1"):  # 0.05 < 0.1 once past the warm-up epoch
        _fit(_Climbing(flat=True), OptunaPruning(storage, "s", flat.number, "val/score"), epochs=3)
    assert study.get_trials()[flat.number].intermediate_values == pytest.approx({0: 0.05, 1: 0.05})
    with pytest.raises(ConfigError, match="no trial 7"):
        OptunaPruning(storage, "s", 7, "val/score")
    with pytest.raises(ConfigError, match="callbacks.pruning.trial"):
        OptunaPruning(storage, "s", None, "val/score")


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_compose_and_instantiate(preset, tmp_path):
    """Each preset selects genrec's sweeper, an experiment and a search space; its sampler, pruner, sweeper and
    pruning callback build."""
    cfg = compose_config("train", overrides=[f"hparams_search={preset}", f"hydra.sweep.dir={tmp_path}"],
                         return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper.study_name == preset and cfg.data.name == "ml100k" and cfg.model.name in preset
    assert isinstance(instantiate(sweeper.sampler), optuna.samplers.TPESampler)
    assert isinstance(instantiate(sweeper.pruner), optuna.pruners.MedianPruner)
    space, _ = search_space([f"{k}={v}" for k, v in sweeper.params.items()])
    assert "optim.lr" in space and len(space) >= 5
    plugin = Plugins.instance()._instantiate(sweeper)
    assert type(plugin).__name__ == "GenrecOptunaSweeper" and plugin.sweeper.n_trials == 20
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name=preset, storage=storage).ask()
    node = cfg.callbacks.pruning
    callback = instantiate(node, storage=storage, study_name=preset, trial=0, monitor="val/ndcg@10")
    assert isinstance(callback, OptunaPruning) and callback.trial_number == 0


# --- whole sweeps: genrec-train -m in subprocesses -------------------------------------------------------------

#: a tiny synthetic sweep: the preset's other parameters fixed, the learning rate searched on the command line (random
#: draws: trial 0 gets 0.01, trial 1 0.00001), 5 epochs, a pruner that prunes what stays below 0.08 NDCG@10 (lr 0.01
#: reaches 0.11 at the second epoch, 0.00001 stays at 0.056)
SWEEP = ["hparams_search=ml100k_sasrec", "data=synthetic", "data.reader.num_users=300", "data.reader.num_items=120",
         "data.reader.num_clusters=6", "model.dim=16", "data.max_len=20", "data.batch_size=64",
         "model.encoder.num_layers=1", "optim.weight_decay=0.0", "model.encoder.dropout=0.1",
         "+trainer.enable_model_summary=false", "trainer.max_epochs=5", "hydra.sweeper.heartbeat_interval=1",
         "hydra.sweeper.grace_period=3", "hydra.sweeper.sampler.n_startup_trials=10", "optim.lr=choice(0.00001, 0.01)",
         "~hydra.sweeper.pruner",
         "+hydra.sweeper.pruner={_target_: optuna.pruners.ThresholdPruner, lower: 0.08, n_warmup_steps: 1}"]


def _sweep(tmp_path: Path, n_trials: int) -> list[str]:
    return [sys.executable, "-m", "genrec.train", "-m", *SWEEP, f"hydra.sweeper.n_trials={n_trials}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}", f"data.cache_dir={tmp_path / 'cache'}",
            f"hydra.sweeper.results_dir={tmp_path / 'results'}", "hydra.sweeper.results_name=tiny_sweep"]


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="ml100k_sasrec", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")


@pytest.mark.slow
def test_sweep_killed_and_resumed(tmp_path):
    """SIGKILL the sweep while a trial trains; the same command then fails that trial (stale heartbeat), retries it
    by resuming its run folder exactly, runs the missing trials and writes the summary; trials below the pruner's
    threshold are pruned, and every finished trial's value is its run's validation score."""
    proc = subprocess.Popen(_sweep(tmp_path, 4), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    deadline = time.time() + 600
    while not (tmp_path / "sweep" / "trial_0" / "checkpoints" / "last.ckpt").exists():
        assert proc.poll() is None and time.time() < deadline, "the sweep ended before trial 0 wrote a checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # trial 0 (lr 0.01, not pruned) has epochs to go
    proc.wait()
    killed = _study(tmp_path).trials[0]
    assert killed.state == TrialState.RUNNING  # as the killed process left it
    done = subprocess.run(_sweep(tmp_path, 4), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    trials = _study(tmp_path).trials
    assert trials[0].state == TrialState.FAIL
    retry = next(t for t in trials if optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == 0)
    assert retry.params == killed.params and retry.user_attrs["run_dir"] == str(tmp_path / "sweep" / "trial_0")
    resumes = (tmp_path / "sweep" / "trial_0" / "resumes.jsonl").read_text().splitlines()
    assert len(resumes) == 1 and json.loads(resumes[0])["checkpoint"] == "checkpoints/last.ckpt"
    counted = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(counted) == 4 and {t.state for t in counted} == {TrialState.COMPLETE, TrialState.PRUNED}
    for t in counted:
        folder = Path(t.user_attrs["run_dir"])
        if t.state == TrialState.PRUNED:
            assert t.params["optim.lr"] == 0.00001 and not (folder / "metrics.json").exists()
            continue
        metrics = json.loads((folder / "metrics.json").read_text())
        assert t.value == pytest.approx(metrics["metrics"]["valid"]["ndcg@10"])
        assert metrics["config"]["callbacks"]["pruning"]["trial"] == t.number
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    assert load_result(tmp_path / "results" / "tiny_sweep.json") == json.loads(json.dumps(summary))
    assert summary["best_trial"]["value"] == max(t.value for t in counted if t.value is not None and
                                                 t.state == TrialState.COMPLETE)
    assert "test" in summary["best_trial"]["run"]["metrics"] and summary["states"]["FAIL"] == 1
    assert all((tmp_path / "sweep" / name).exists() for name in ("history.png", "intermediate.png"))


@pytest.mark.slow
def test_two_processes_share_one_study(tmp_path):
    """Two sweep processes started together on one SQLite study: every trial runs once, in its own folder."""
    procs = [subprocess.Popen(_sweep(tmp_path, 4), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    trials = _study(tmp_path).trials
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert 4 <= len(finished) <= 5 and len(finished) == len(trials)  # at most one extra: both asked the last
    folders = [t.user_attrs["run_dir"] for t in finished]
    assert len(set(folders)) == len(folders)
    assert all(Path(f, "config.yaml").exists() for f in folders)


@pytest.mark.parametrize("case", ["foreign_trial_folder", pytest.param("bad_config_value", marks=pytest.mark.slow)])
def test_a_sweep_that_cannot_run_a_trial_stops_with_one_line(tmp_path, case):
    """A trial whose run folder already holds a run the study does not know, or that genrec-train refuses (a bad
    config value), stops the sweep with genrec-train's one-line error (exit 2); the trial is recorded as failed,
    not left running to be retried."""
    command = _sweep(tmp_path, 2)
    if case == "foreign_trial_folder":
        (tmp_path / "sweep" / "trial_0").mkdir(parents=True)
        (tmp_path / "sweep" / "trial_0" / "config.yaml").write_text("seed: 0\n")
        expected = f"{tmp_path / 'sweep' / 'trial_0'} already exists, but it is not a trial of study 'ml100k_sasrec'"
    else:
        command = [c if c != "optim.weight_decay=0.0" else "optim.weight_decay=-1" for c in command]
        expected = "optim.weight_decay"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("genrec-train: error: ") and expected in last, done.stderr[-3000:]
    assert [t.state for t in _study(tmp_path).trials] == [TrialState.FAIL]
