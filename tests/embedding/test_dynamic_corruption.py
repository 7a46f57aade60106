"""A damaged dynamic-table snapshot is one line naming its own file (issue 47.5), and a snapshot is bound to the run
that wrote it (47.4): a deleted or corrupted RocksDB ``.sst`` / ``MANIFEST``, a truncated ``state.npz``, a snapshot
of another run. At b9ac798 these were tracebacks of 27-96 lines (RocksDB's naming a private temporary copy of the
store, not the run folder's file), and another run's snapshot loaded silently."""
import shutil
from pathlib import Path

import pytest
import torch

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint
from genrec.embedding.dynamic.table import DynamicTable
from genrec.errors import DataError
from genrec.storage.slab import SLAB_FILE
from tests.embedding.test_dynamic_checkpoint import _batches, _config, _rows, _train
from tests.embedding.test_dynamic_runs import TINY_DYNAMIC
from tests.test_cli_errors import _cli, _one_line_error

RUN_ID = "a" * 32


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> tuple[Path, dict]:
    """A table with rows in its RocksDB tier (the store whose files this module damages), saved by run ``RUN_ID``
    -> (checkpoint folder, the rows it holds)."""
    tmp = tmp_path_factory.mktemp("snapshot")
    table = DynamicTable(_config(tmp / "store", backend="rocksdb"))
    _train(table, _batches(30))
    save_checkpoint({"item": table}, tmp / "ckpt", run_id=RUN_ID)
    rows = _rows([table])
    table.close()
    assert list((tmp / "ckpt" / "item" / "rank0" / "store").glob("*.sst"))  # the tier-2 rows are in table files
    return tmp / "ckpt", rows


def _load(folder: Path, tmp_path: Path, run_id: str | None = RUN_ID) -> DynamicTable:
    table = DynamicTable(_config(tmp_path / "live", backend="rocksdb"))
    try:
        load_checkpoint({"item": table}, folder, run_id)
    except BaseException:
        table.close()
        raise
    return table


def _store_file(folder: Path, pattern: str) -> Path:
    return sorted((folder / "item" / "rank0" / "store").glob(pattern))[0]


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _garble(path: Path) -> None:
    path.write_bytes(bytes(b ^ 0x5A for b in path.read_bytes()))


DAMAGE = {  # what is done to a copy of the snapshot -> what the one-line error says about which file
    "sst deleted": (lambda f: _store_file(f, "*.sst").unlink(), lambda f: "missing: the checkpoint lists it"),
    "sst truncated": (lambda f: _truncate(_store_file(f, "*.sst")), lambda f: "bytes, "),
    "MANIFEST corrupted": (lambda f: _garble(_store_file(f, "MANIFEST-*")), lambda f: "its sha256 differs"),
    "state.npz truncated": (lambda f: _truncate(f / "item" / "rank0" / "state.npz"), lambda f: "bytes, "),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_snapshot_is_refused_naming_its_file(snapshot, tmp_path, damage):
    folder = Path(shutil.copytree(snapshot[0], tmp_path / "ckpt"))
    if damage.startswith("state"):
        target = folder / "item" / "rank0" / "state.npz"
    else:
        target = _store_file(folder, "*.sst" if "sst" in damage else "MANIFEST-*")
    do, says = DAMAGE[damage]
    do(folder)
    with pytest.raises(DataError, match=f"^{target}: .*{says(folder)}"):
        _load(folder, tmp_path)


def test_an_intact_snapshot_loads_and_one_of_another_run_is_refused(snapshot, tmp_path):
    folder, rows = snapshot
    table = _load(folder, tmp_path)
    assert _rows([table]) == rows
    table.close()
    with pytest.raises(DataError, match=f"manifest.json: written by run {RUN_ID}, not by run {'b' * 32}"):
        _load(folder, tmp_path / "other", "b" * 32)


@pytest.mark.parametrize("damage", ["sst deleted", "state.npz truncated"])
def test_a_snapshot_without_a_manifest_still_names_its_own_file(snapshot, tmp_path, damage):
    """A snapshot written before manifests (loaded unchecked): the store or the state file that fails is named, not
    the live copy the store is opened from."""
    folder = Path(shutil.copytree(snapshot[0], tmp_path / "ckpt"))
    (folder / "manifest.json").unlink()
    DAMAGE[damage][0](folder)
    target = folder / "item" / "rank0" / ("state.npz" if damage.startswith("state") else "store")
    with pytest.raises(DataError) as refused:
        _load(folder, tmp_path, None)
    assert str(refused.value).startswith(f"{target}: ") and str(tmp_path / "live") not in str(refused.value)


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("dynamic")
    cfg = compose_config("train", TINY_DYNAMIC + ["trainer.max_epochs=1", f"data.cache_dir={tmp / 'cache'}",
                                                  f"model.embedding.store.path={tmp / 'store'}"])
    train_entry.run(cfg, tmp / "run")
    return tmp / "run"


def test_eval_of_a_run_with_a_damaged_table_snapshot_is_one_line_naming_the_run_folders_file(dynamic_run, tmp_path):
    run_dir = Path(shutil.copytree(dynamic_run, tmp_path / "run"))
    snapshot = run_dir / "checkpoints" / torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True,
                                                    mmap=True)["genrec_dynamic_tables"]
    slab = next(snapshot.rglob(SLAB_FILE))  # the default store's file
    slab.unlink()
    proc = _cli("genrec.evaluate", f"run_dir={run_dir}", "baselines=[]", cwd=tmp_path)
    line = _one_line_error(proc, "genrec-eval", f"{slab}: missing: the checkpoint lists it in {snapshot}")
    assert "genrec-store-" not in line  # not the private copy of the store
