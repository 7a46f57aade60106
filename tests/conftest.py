"""Fixtures shared by several test folders.

Without a GPU, the kernel tests (tests/kernels) run Triton on CPU tensors through Triton's interpreter, which needs
``TRITON_INTERPRET=1`` before triton is first imported (lightning imports it): hence first thing here. It changes
nothing else: the attention switch's ``auto`` chooses Triton on CUDA tensors only.

Every test process computes on one thread (``OMP_NUM_THREADS=1``, inherited by the CLIs a test starts): the suite
runs one worker per core (pytest-xdist), and the tests' tiny tensors lose far more to threads waiting for each other
than they gain (a 150-step toy training: 1 s on one thread, 46 s on two beside another worker).
"""
import importlib.util
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from genrec import train as train_entry  # noqa: E402
from genrec.conf import compose_config  # noqa: E402

#: A tiny synthetic run: ~300 users, 120 items, one epoch (about 15 s on 2 cores).
TINY_RUN = ["data.reader.num_users=300", "data.reader.num_items=120", "data.reader.num_clusters=6",
            "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false",
            "model.dim=16", "data.max_len=20", "data.batch_size=64"]


ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str):
    """The script at ``path`` (from the repo root, e.g. ``scripts/analysis/record_curves.py``) imported afresh."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A trained run folder (config.yaml, metrics.json, checkpoints/) -> (run_dir, metrics.json contents)."""
    tmp = tmp_path_factory.mktemp("tiny_run")
    cfg = compose_config("train", overrides=TINY_RUN + [f"data.cache_dir={tmp / 'cache'}"])
    return tmp / "run", train_entry.run(cfg, tmp / "run")
