"""Hydra finds sweepers in the ``hydra_plugins`` namespace only: this is genrec's, kept light because Hydra imports
every plugin module at each start; the work is in :mod:`genrec.sweep.sweeper` (imported when the sweeper is
built). Its config: genrec/conf/hydra/sweeper/genrec_optuna.yaml."""
from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper

#: the CLI a sweep runs in: its errors are that CLI's one-line errors
PROG = "genrec-train"


class GenrecOptunaSweeper(Sweeper):
    """Optuna hyperparameter search over genrec-train runs (see :class:`genrec.sweep.sweeper.OptunaSweeper`)."""

    def __init__(self, **settings: Any):
        from genrec.cli import run_cli
        from genrec.sweep.sweeper import OptunaSweeper

        self.sweeper = run_cli(PROG, lambda: OptunaSweeper(**settings))

    def setup(self, **kwargs: Any) -> None:
        self.sweeper.setup(**kwargs)

    def sweep(self, arguments: list[str]) -> Any:
        from genrec.cli import run_cli

        return run_cli(PROG, self.sweeper.sweep, arguments)
