from pathlib import Path

import pytest

from genrec.export import cli
from genrec.conf import compose_config


def export_config(run_dir: Path, out_dir: Path, *overrides: str):
    return compose_config("export", overrides=[f"run_dir={run_dir}", f"out_dir={out_dir}", *overrides])


@pytest.fixture(scope="session")
def exported(tiny_run, tmp_path_factory):
    """The tiny run exported with the default config -> (export dir, manifest)."""
    out = tmp_path_factory.mktemp("export") / "export"
    return out, cli.run(export_config(tiny_run[0], out))
