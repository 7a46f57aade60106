"""genrec's Hydra config tree, shipped inside the package (``pkg://genrec.conf``), so an installed genrec (wheel or
non-editable ``pip install``) has its CLIs' configs wherever it runs."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

#: The folder of ``train.yaml``, ``eval.yaml``, ... and the config groups (``data/``, ``model/``, ...).
CONF_DIR = Path(__file__).resolve().parent
#: What ``hydra.main(config_path=...)`` and ``hydra.initialize_config_module`` take.
CONF_MODULE = "genrec.conf"


def compose_config(name: str = "train", overrides: Iterable[str] = (), return_hydra_config: bool = False):
    """The config a CLI would run with (``name``: ``train``, ``eval``, ``stream``, ``export``, ``tokenize``) and the
    same command-line ``overrides``, composed without running anything -> an ``omegaconf.DictConfig``
    (``return_hydra_config``: with its ``hydra`` node, e.g. a sweeper's settings).

    For scripts, notebooks and tests; not inside a running Hydra app (Hydra allows one initialisation at a time).
    """
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=list(overrides), return_hydra_config=return_hydra_config)
