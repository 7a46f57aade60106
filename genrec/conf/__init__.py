"""genrec's Hydra config tree, shipped inside the package (``pkg://genrec.conf``), so an installed genrec (wheel or
non-editable ``pip install``) has its CLIs' configs wherever it runs."""
from pathlib import Path

#: The folder of ``train.yaml``, ``eval.yaml``, ... and the config groups (``data/``, ``model/``, ...).
CONF_DIR = Path(__file__).resolve().parent
#: What ``hydra.main(config_path=...)`` and ``hydra.initialize_config_module`` take.
CONF_MODULE = "genrec.conf"
