"""Hyperparameter search: ``genrec-train -m hparams_search=<preset>`` (genrec/conf/hparams_search/).

* :mod:`genrec.sweep.sweeper` — the Hydra sweeper (``hydra/sweeper=genrec_optuna``): Optuna TPE over Hydra's sweep
  syntax, the study in SQLite (resumable, shared by several processes), one genrec-train run folder per trial.
* :mod:`genrec.sweep.pruning` — the Lightning callback through which a trial's training reports its validation
  metric and is pruned (Optuna's own callback, given the trial the sweeper asked for).
* :mod:`genrec.sweep.summary` — best trial, parameter importances and plots, written beside the sweep.
"""
