"""The pruning callback of a sweep trial: Optuna's Lightning callback, attached to the trial the sweeper asked for.

The sweeper (another object, possibly another process) asks the study for a trial and starts genrec-train with
``callbacks.pruning.trial=<number>``; this callback opens the same study in the same storage (SQLite), with the
pruner the sweeper stored in the study (a pruner is not part of an Optuna study's data), and reports
``val/<eval.monitor>`` after every validation of the training. When the pruner says so, Optuna's callback raises
:class:`optuna.TrialPruned`, which ends the training; the sweeper records the trial as pruned. The validation of
the best checkpoint after training is not reported.

It holds no state of its own (the reports live in the study), so exact resume is unaffected: a resumed trial reports
the epochs after its checkpoint, and a report of an epoch already in the study is ignored by Optuna.
"""
from __future__ import annotations

import lightning as L
import optuna
from hydra.utils import instantiate
from lightning.pytorch.trainer.states import TrainerFn
from optuna_integration import PyTorchLightningPruningCallback

from genrec.errors import ConfigError

#: the study's user attribute holding its pruner (a ``_target_`` config under ``optuna.pruners.``)
PRUNER_ATTR = "genrec:pruner"


def study_pruner(user_attrs: dict) -> optuna.pruners.BasePruner:
    """The pruner the sweeper stored in a study's user attributes (Optuna's default when there is none)."""
    config = user_attrs.get(PRUNER_ATTR)
    if config is None:
        return optuna.pruners.MedianPruner()
    if not str(config.get("_target_", "")).startswith("optuna.pruners."):
        raise ConfigError("hydra.sweeper.pruner", f"expected a _target_ under optuna.pruners., got {config!r}")
    return instantiate(config)


class OptunaPruning(PyTorchLightningPruningCallback):
    """Report ``monitor`` to trial ``trial`` of study ``study_name`` in ``storage`` and prune when told to.

    Args:
        storage: the study's storage URL, e.g. ``sqlite:///runs/sweeps/ml100k_sasrec/study.db``.
        study_name: the study.
        trial: the trial's number in the study (set by the sweeper for each run).
        monitor: the logged metric to report, e.g. ``val/ndcg@10``.
    """

    def __init__(self, storage: str, study_name: str, trial: int | None, monitor: str):
        if trial is None:
            raise ConfigError("callbacks.pruning.trial", "the trial number is set by the Optuna sweeper "
                                                         "(genrec-train -m hparams_search=<preset>)")
        backend = optuna.storages.get_storage(storage)
        try:
            study_id = backend.get_study_id_from_name(study_name)
            trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, trial)
        except KeyError as err:
            raise ConfigError("callbacks.pruning", f"no trial {trial} of study {study_name!r} in {storage}: "
                                                   f"{err}") from None
        study = optuna.load_study(study_name=study_name, storage=backend,
                                  pruner=study_pruner(backend.get_study_user_attrs(study_id)))
        super().__init__(optuna.trial.Trial(study, trial_id), monitor)
        self.trial_number = trial

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # not the best checkpoint's validation after training
            super().on_validation_end(trainer, pl_module)
