"""genrec's Hydra sweeper (``hydra/sweeper=genrec_optuna``): Optuna over Hydra's sweep syntax, one genrec-train run
folder per trial, the study in a database (SQLite by default).

It takes the settings of Hydra's Optuna sweeper (``sampler``, ``direction``, ``storage``, ``study_name``,
``n_trials``, ``n_jobs``, ``max_failure_rate``, ``params`` written as ``choice(...)``, ``range(...)``,
``interval(...)``, ``tag(log, interval(...))``) and adds what training with pruning and resume needs. The
``hydra-optuna-sweeper`` package itself (1.3.0) could not be used: it requires ``optuna<3`` (pip resolves it to
Optuna 2.10 beside everything else here), hands the job no trial (so nothing can prune), asks for ``n_trials``
*more* trials each time it starts, and numbers job folders from 0 again on a restart (genrec-train refuses a used
run folder). What this one does:

* **The trial reaches the training.** Every job gets ``callbacks.pruning.trial=<number>``; the callback
  (:mod:`genrec.sweep.pruning`, the ``hparams_search`` presets configure it) opens the same study and reports
  ``val/<eval.monitor>`` after each validation; the study's ``pruner`` decides. A job that ends in
  :class:`optuna.TrialPruned` is told ``PRUNED``; a finished one is told its run's validation score from
  ``metrics.json`` (the best checkpoint's ``valid`` value of the monitored metric).
* **One run folder per trial**: ``<hydra.sweep.dir>/trial_<number>`` (``hydra.sweep.subdir`` is set per job). A
  folder that exists but is not the study's trial stops the sweep (genrec-train never writes into a used run
  folder), and so does a trial genrec-train refuses (its one-line error); either trial is recorded as failed.
* **``n_trials`` is the size of the study**: a restarted sweep runs only the trials still missing, and several
  processes can work on one study at once (the storage hands every trial to one process; processes that ask for
  the last trials at the same moment may add up to ``n_jobs`` trials each beyond ``n_trials``). A process that has nothing left to
  ask waits for the trials other processes are running, then writes the summary.
* **Interrupted trials are resumed exactly.** While a process runs trials it records an Optuna heartbeat for each
  every ``heartbeat_interval`` seconds. A trial whose heartbeat stopped for ``grace_period`` seconds (its process
  was killed) is failed by Optuna and retried with the same parameters and reports
  (``RetryHeartbeatStaleTrialCallback``, up to ``max_retry`` times); the retry continues the original trial's run
  folder with ``resume_from=`` when it holds a checkpoint (genrec's exact resume), else it starts over in its own
  folder.
* **A summary beside the sweep** (:mod:`genrec.sweep.summary`), and with ``results_name`` a copy in
  ``<results_dir>/<results_name>.json``.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from genrec.errors import ConfigError, UserError
from genrec.runs import CHECKPOINT_DIR
from genrec.sweep.pruning import PRUNER_ATTR
from genrec.sweep.summary import write_summary

log = logging.getLogger(__name__)

#: trials that count towards ``n_trials`` (failed ones do not; their retries do)
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution of one sweep override: ``choice(a, b)`` -> categorical, ``range(1, 5)`` -> integers
    1..4, ``interval(a, b)`` -> uniform floats (Hydra's intervals are floats), ``tag(log, interval(a, b))`` ->
    log-uniform."""
    key = override.get_key_element()
    if override.is_choice_sweep() and not isinstance(override.value(), Glob):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():
        values = list(override.sweep_iterator(transformer=Transformer.encode))
        if all(isinstance(v, int) for v in values) and len(values) > 1:
            return IntDistribution(values[0], values[-1], step=values[1] - values[0])
        return CategoricalDistribution(values)
    if override.is_interval_sweep():
        interval = override.value()
        return FloatDistribution(interval.start, interval.end, log="log" in interval.tags)
    raise ConfigError(f"hydra.sweeper.params.{key}", f"cannot search {override.input_line!r}: expected choice(...), "
                                                      "range(...), interval(...) or tag(log, interval(...))")


def search_space(overrides: list[str]) -> tuple[dict[str, BaseDistribution], list[str]]:
    """``(parameter -> distribution, the overrides that are not sweeps)``; a parameter given a plain value (on the
    command line, after the preset's ``params``) is fixed, not searched."""
    space, fixed = {}, []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            space[override.get_key_element()] = distribution(override)
        else:
            space.pop(override.key_or_group, None)
            fixed.append(override.input_line)
    return space, fixed


class _Heartbeat:
    """While the ``with`` block runs, record an Optuna heartbeat for each trial every ``interval`` seconds."""

    def __init__(self, storage: RDBStorage, trial_ids: list[int], interval: int):
        self.storage, self.trial_ids, self.interval = storage, trial_ids, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            for trial_id in self.trial_ids:
                self.storage.record_heartbeat(trial_id)

    def __enter__(self) -> "_Heartbeat":
        for trial_id in self.trial_ids:
            self.storage.record_heartbeat(trial_id)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


@dataclass
class _Job:
    trial: optuna.trial.Trial
    trial_id: int
    folder: Path
    overrides: list[str]


class OptunaSweeper:
    """The implementation behind ``hydra_plugins.genrec_optuna_sweeper`` (see the module docstring).

    Args:
        sampler / pruner: Optuna objects (the config's ``_target_`` nodes, built by Hydra).
        direction: ``maximize`` or ``minimize`` the run's validation score.
        storage: database URL of the study, e.g. ``sqlite:///runs/sweeps/ml100k_sasrec/study.db``.
        study_name: the study (created, or loaded when it exists).
        n_trials: trials the study should hold (completed, pruned or running).
        n_jobs: trials asked per batch (the launcher runs a batch; the default launcher one job after another).
        max_failure_rate: stop when more than this share of a process's trials failed.
        params: parameter -> Hydra sweep expression.
        heartbeat_interval / grace_period: seconds between heartbeats / without one before a trial counts as
            interrupted.
        max_retry: times an interrupted trial is retried.
        results_name / results_dir: also write the summary to ``<results_dir>/<results_name>.json``.
    """

    def __init__(self, sampler: Any, pruner: Any, direction: str, storage: str, study_name: str, n_trials: int,
                 n_jobs: int = 1, max_failure_rate: float = 0.0, params: DictConfig | None = None,
                 heartbeat_interval: int = 10, grace_period: int = 60, max_retry: int = 3,
                 results_name: str | None = None, results_dir: str = "results"):
        if direction not in ("maximize", "minimize"):
            raise ConfigError("hydra.sweeper.direction", f"expected maximize or minimize, got {direction!r}")
        if n_trials < 1 or n_jobs < 1:
            raise ConfigError("hydra.sweeper.n_trials", f"n_trials and n_jobs must be positive, got {n_trials}, "
                                                        f"{n_jobs}")
        self.sampler, self.pruner, self.direction = sampler, pruner, direction
        self.storage_url, self.study_name, self.n_trials, self.n_jobs = storage, study_name, n_trials, n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = OmegaConf.to_container(params) if params is not None else {}
        self.heartbeat_interval, self.grace_period, self.max_retry = heartbeat_interval, grace_period, max_retry
        self.results_name, self.results_dir = results_name, results_dir
        self.config: DictConfig | None = None
        self.launcher = None
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def storage(self) -> RDBStorage:
        """The study's database with heartbeats on and interrupted trials retried. Two processes that open a new
        database at the same moment both create its tables; the one that loses (a duplicate schema version) opens
        it again, finding the other's tables."""
        for attempt in range(3):
            try:
                return RDBStorage(self.storage_url, engine_kwargs={"connect_args": {"timeout": 60}},
                                  heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period,
                                  heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                                      max_retry=self.max_retry, inherit_intermediate_values=True))
            except sqlalchemy.exc.IntegrityError:
                if attempt == 2:
                    raise
                time.sleep(1)

    def sweep(self, arguments: list[str]) -> dict:
        space, fixed = search_space([f"{k}={v}" for k, v in self.params.items()] + list(arguments))
        if not space:
            raise ConfigError("hydra.sweeper.params", "nothing to search: give at least one choice(...), range(...) "
                                                      "or interval(...)")
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        # heartbeats, fail_stale_trials and RetryHeartbeatStaleTrialCallback are marked experimental, and Optuna warns
        # that heartbeats are meant for Study.optimize: here the sweeper's own loop records them (see _Heartbeat)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        storage = self.storage()
        study = optuna.create_study(study_name=self.study_name, storage=storage, sampler=self.sampler,
                                    pruner=self.pruner, direction=self.direction, load_if_exists=True)
        study.set_user_attr(PRUNER_ATTR, OmegaConf.to_container(self.config.hydra.sweeper.pruner, resolve=True))
        log.info("study %s in %s: %d of %d trials there", self.study_name, self.storage_url,
                 len(study.get_trials(deepcopy=False, states=COUNTED)), self.n_trials)
        started, launched, failures = time.time(), 0, []
        while True:
            optuna.storages.fail_stale_trials(study)  # killed processes' trials: failed, and retried below
            trials = study.get_trials(deepcopy=False)
            batch = min(self.n_jobs, self.n_trials - sum(t.state in COUNTED for t in trials))
            if batch <= 0:
                if any(t.state == TrialState.RUNNING for t in trials):  # elsewhere, or killed and not yet stale
                    time.sleep(self.heartbeat_interval)
                    continue
                break
            jobs = []
            try:
                for _ in range(batch):
                    jobs.append(self._job(study, storage, fixed, space, sweep_dir))
                with _Heartbeat(storage, [job.trial_id for job in jobs], self.heartbeat_interval):
                    returns = self.launcher.launch([job.overrides for job in jobs], initial_job_idx=self.job_idx)
            except (UserError, SystemExit):
                # a trial genrec-train refused (a bad config value: its one-line error, exit 2) or that cannot get a
                # fresh run folder ends the sweep; its batch is recorded as failed, not left running to be retried
                for job in jobs:
                    study.tell(job.trial, state=TrialState.FAIL)
                raise
            self.job_idx += len(returns)
            launched += len(returns)
            failures += [error for job, ret in zip(jobs, returns) if (error := self._tell(study, job, ret))]
            if len(failures) > self.max_failure_rate * launched:
                raise RuntimeError(f"{len(failures)} of {launched} trials failed (max_failure_rate="
                                   f"{self.max_failure_rate}); the last one with: {failures[-1]!r}") from failures[-1]
        return write_summary(study, sweep_dir, settings=self._settings(arguments, time.time() - started),
                             results=Path(self.results_dir) / f"{self.results_name}.json" if self.results_name
                             else None)

    def _job(self, study: optuna.Study, storage: RDBStorage, fixed: list[str], space: dict[str, BaseDistribution],
             sweep_dir: Path) -> _Job:
        """Ask for a trial (an interrupted trial's retry first) and the overrides of its genrec-train job."""
        trial = study.ask(space)
        trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name),
                                                                   trial.number)
        history = RetryHeartbeatStaleTrialCallback.retry_history(storage.get_trial(trial_id))
        original = sweep_dir / f"trial_{history[0]}" if history else None
        if original is not None and (original / CHECKPOINT_DIR / "last.ckpt").exists():
            # continue the interrupted run exactly, in its folder, with its config.yaml; the sweep's preset only
            # composes the job's Hydra settings (genrec-train leaves hparams_search= out of a resumed config)
            folder = original
            overrides = [*(o for o in fixed if o.startswith("hparams_search=")), f"hydra.sweep.dir={sweep_dir}",
                         f"hydra.sweep.subdir={folder.name}", f"resume_from={folder}",
                         f"++callbacks.pruning.trial={trial.number}"]
        else:
            folder = sweep_dir / f"trial_{trial.number}"
            if folder.exists():  # the sweep folder holds runs of another study (or of a deleted study.db)
                study.tell(trial, state=TrialState.FAIL)
                raise ConfigError("hydra.sweep.dir", f"{folder} already exists, but it is not a trial of study "
                                                     f"{study.study_name!r} in {self.storage_url}: give the sweep "
                                                     "a fresh hydra.sweep.dir (or the storage that holds its trials)")
            overrides = [*fixed, *(f"{k}={v}" for k, v in trial.params.items()),
                         f"hydra.sweep.subdir={folder.name}", f"callbacks.pruning.trial={trial.number}"]
        trial.set_user_attr("run_dir", str(folder))
        if history:
            log.info("trial %d retries interrupted trial %d in %s", trial.number, history[-1], folder)
        return _Job(trial, trial_id, folder, overrides)

    def _tell(self, study: optuna.Study, job: _Job, ret: JobReturn) -> Exception | None:
        """Record the job's outcome in the study; the exception of a failed job (``None`` otherwise)."""
        error = ret._return_value if ret.status == JobStatus.FAILED else None  # the getter would re-raise it
        if isinstance(error, optuna.TrialPruned):
            study.tell(job.trial, state=TrialState.PRUNED)
            log.info("trial %d pruned: %s", job.trial.number, error)
            return None
        if error is None:
            try:
                metrics = json.loads((job.folder / "metrics.json").read_text())
                monitored = metrics["protocol"]["monitor"].split("/", 1)[1]
                value = float(metrics["metrics"]["valid"][monitored])
            except (OSError, KeyError, ValueError) as err:
                error = RuntimeError(f"no validation score in {job.folder / 'metrics.json'}: {err!r}")
            else:
                study.tell(job.trial, value)
                log.info("trial %d: valid %s = %.4f", job.trial.number, monitored, value)
                return None
        study.tell(job.trial, state=TrialState.FAIL)
        log.warning("trial %d failed: %r", job.trial.number, error)
        return error

    def _settings(self, arguments: list[str], seconds: float) -> dict:
        return {"study_name": self.study_name, "storage": self.storage_url, "direction": self.direction,
                "n_trials": self.n_trials, "sampler": type(self.sampler).__name__,
                "pruner": type(self.pruner).__name__, "params": self.params, "arguments": list(arguments),
                "process_seconds": round(seconds)}
