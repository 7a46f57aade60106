"""genrec's Optuna sweeper plugin for Hydra (genrec_optuna_sweeper.py)."""
