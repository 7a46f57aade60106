"""genrec as a package: a built wheel installed into a fresh virtualenv runs genrec-train from any directory (its
configs ship inside it), and the layers import in one direction only: every import of every genrec module follows
genrec.architecture.LAYERS (the map docs/ARCHITECTURE.md draws, from the same source), the models import neither
Lightning nor the kernels, and the kernels do not import the models."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from genrec.architecture import allowed, render, unit_of
from tests.conftest import TINY_RUN

ROOT = Path(__file__).resolve().parents[1]
def _imports(path: Path) -> set[str]:
    """Every module a source file imports (at any depth of the file), as dotted names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _loaded_after_importing(package: str) -> list[str]:
    """Modules in ``sys.modules`` after importing every module of ``package`` (but ``__main__``, which would run
    the CLI), in a fresh interpreter."""
    code = (f"import importlib, pkgutil, sys, {package} as p\n"
            f"[importlib.import_module(m.name) for m in pkgutil.walk_packages(p.__path__, '{package}.')\n"
            " if not m.name.endswith('__main__')]\n"
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_import_follows_the_layers():
    """Each genrec module imports genrec units of lower layers (or its own unit) only, at any depth of the file."""
    wrong = []
    for path in sorted((ROOT / "genrec").rglob("*.py")):
        module = _module_name(path)
        assert unit_of(module) is not None, f"{module} belongs to no unit of genrec.architecture.LAYERS"
        wrong += [f"{module} imports {name}" for name in sorted(_imports(path))
                  if unit_of(name) is not None and not allowed(module, name)]
    assert wrong == []


def test_the_architecture_doc_draws_the_enforced_layers():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert f"```\n{render()}\n```" in doc, "docs/ARCHITECTURE.md: regenerate the layer diagram (python -m " \
                                            "genrec.architecture > the block under 'Layers')"


def test_models_import_neither_lightning_nor_kernels():
    loaded = _loaded_after_importing("genrec.models")
    assert "genrec.models.sasrec" in loaded  # the walk did import the models
    assert [m for m in loaded if m.split(".")[0] in ("lightning", "pytorch_lightning", "genrec_kernels")] == []


def test_kernels_do_not_import_models():
    for path in (ROOT / "kernels" / "genrec_kernels").glob("*.py"):
        assert not [i for i in _imports(path) if i.startswith("genrec.models")], path


def test_no_checkpoint_is_read_as_code():
    """Every torch.load in genrec reads with weights_only=True."""
    for path in list((ROOT / "genrec").rglob("*.py")) + list((ROOT / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
                assert keywords.get("weights_only") == "True", f"{path}:{node.lineno}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """genrec built as a wheel from only what the package is built from (no .git, runs, caches)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    for name in ("genrec", "kernels"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp / "wheels"), str(source)], check=True, timeout=600)
    (built,) = (tmp / "wheels").glob("genrec-*.whl")
    return built


def test_the_wheel_holds_every_module_config_and_data_file(wheel):
    """Every source and data file the package needs at run time (configs, the report's script and style sheet, the C
    and CUDA sources compiled on first use) is in the wheel; installing it and training from another folder is the
    slow test below."""
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    needed = [p.relative_to(ROOT).as_posix() for p in (ROOT / "genrec").rglob("*")
              if p.suffix in (".py", ".yaml", ".js", ".css", ".c") and "__pycache__" not in p.parts]
    needed += [p.relative_to(ROOT / "kernels").as_posix() for p in (ROOT / "kernels").rglob("*")
               if p.suffix in (".py", ".cu", ".cpp") and "__pycache__" not in p.parts]
    assert "genrec/conf/train.yaml" in needed and [n for n in needed if n not in names] == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_built_wheel_trains_from_any_directory(wheel, tmp_path):

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # reuse this environment's torch stack (the fresh venv sees it after its own site-packages)
    Path(site, "torch_stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True,
                   timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    located = subprocess.run([python, "-c", "import genrec, genrec.conf; print(genrec.__file__); "
                                            "print(genrec.conf.CONF_DIR)"], capture_output=True, text=True,
                             cwd=elsewhere, check=True).stdout.split()
    assert all(p.startswith(site) for p in located)  # the wheel's genrec, not this checkout's
    proc = subprocess.run([venv / "bin" / "genrec-train", *TINY_RUN, "hydra.run.dir=run"], capture_output=True,
                          text=True, cwd=elsewhere, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test metrics on synthetic" in proc.stdout
    metrics = json.loads((elsewhere / "run" / "metrics.json").read_text())
    assert metrics["commit"].startswith("genrec 0.1.0") and metrics["checkpoints"]["best"]["sha256"]
    # the report's script and style sheet are package data of the wheel
    proc = subprocess.run([venv / "bin" / "genrec-report", "run"], capture_output=True, text=True, cwd=elsewhere,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "function lineChart" in (elsewhere / "run" / "report.html").read_text()
