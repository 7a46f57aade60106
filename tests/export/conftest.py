import importlib.util
from pathlib import Path

import pytest

from genrec.export import cli
from genrec.conf import compose_config

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export_config(run_dir: Path, out_dir: Path, *overrides: str):
    return compose_config("export", overrides=[f"run_dir={run_dir}", f"out_dir={out_dir}", *overrides])


@pytest.fixture(scope="session")
def exported(tiny_run, tmp_path_factory):
    """The tiny run exported with the default config -> (export dir, manifest)."""
    out = tmp_path_factory.mktemp("export") / "export"
    return out, cli.run(export_config(tiny_run[0], out))
