"""What a sweep leaves beside its trials: ``summary.json`` (every trial, the best one with its run's validation and
test metrics and baselines, parameter importances) and three plots drawn by Optuna (``history.png``: the
objective by trial; ``intermediate.png``: every trial's validation curve, where pruning shows; ``importances.png``).
"""
from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
from optuna.trial import FrozenTrial, TrialState  # noqa: E402

from genrec.utils.provenance import provenance, write_json  # noqa: E402
from genrec.utils.results import write_result  # noqa: E402

#: the parts of a run's metrics.json the summary keeps for the best trial
RUN_FIELDS = ("dataset", "model", "seed", "protocol", "metrics", "baselines", "best_epoch", "epochs_run",
              "train_seconds", "resumes", "commit")


def _trial_row(trial: FrozenTrial) -> dict:
    history = optuna.storages.RetryHeartbeatStaleTrialCallback.retry_history(trial)
    return {"number": trial.number, "state": trial.state.name, "value": trial.value, "params": trial.params,
            "epochs_reported": len(trial.intermediate_values), "run_dir": trial.user_attrs.get("run_dir"),
            "retry_of": history[-1] if history else None,
            "seconds": round(trial.duration.total_seconds()) if trial.duration else None}


def _importances(study: optuna.Study) -> dict[str, float]:
    """Optuna's default importance (PED-ANOVA in Optuna 5) over the completed trials; empty below two."""
    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 2:
        return {}
    return {name: round(value, 4) for name, value in optuna.importance.get_param_importances(study).items()}


def _plots(study: optuna.Study, folder: Path, importances: dict) -> list[str]:
    """Draw the history, the intermediate values and (with importances) the importances with Optuna."""
    from optuna.visualization import matplotlib as optuna_plots

    plots = {"history.png": optuna_plots.plot_optimization_history,
             "intermediate.png": optuna_plots.plot_intermediate_values}
    if importances:
        plots["importances.png"] = optuna_plots.plot_param_importances
    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for name, plot in plots.items():
            axes = plot(study)
            axes.figure.set_size_inches(8, 5)
            axes.figure.tight_layout()
            axes.figure.savefig(folder / name, dpi=100)
            plt.close(axes.figure)
            written.append(name)
    return written


def write_summary(study: optuna.Study, folder: Path, settings: dict, results: Path | None = None) -> dict:
    """Write ``summary.json`` and the plots into ``folder`` (and the summary to ``results``); return it."""
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = None
    if complete:
        trial = study.best_trial
        run_dir = Path(trial.user_attrs["run_dir"])
        run = json.loads((run_dir / "metrics.json").read_text())
        best = {"number": trial.number, "value": trial.value, "params": trial.params, "run_dir": str(run_dir),
                "run": {k: run[k] for k in RUN_FIELDS if k in run},
                "config": {k: run["config"][k] for k in ("data", "model", "optim", "trainer", "callbacks")
                           if k in run["config"]}}
    importances = _importances(study)
    summary = {"name": results.stem if results else study.study_name, "kind": "hparams_search", **settings,
               "sweep_dir": str(folder), "states": dict(Counter(t.state.name for t in trials)),
               "best_trial": best, "importances": importances, "trials": [_trial_row(t) for t in trials],
               "plots": _plots(study, folder, importances), **provenance()}
    write_json(folder / "summary.json", summary)
    if results is not None:
        write_result(results, "hparams_search", summary)
    return summary
