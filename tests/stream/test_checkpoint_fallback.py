"""Stream checkpoints bound to their run and checked before a resume (issue 47.4/47.5): a tampered, truncated,
incomplete or foreign newest checkpoint is refused with a warning naming it and why, the run falls back to the
newest intact checkpoint it keeps and ends bit-identical to an uninterrupted run; none intact, or a source that
cannot re-deliver what it acknowledged (Redis), is one line; a full disk while checkpointing is one line and the
run resumes exactly. At b9ac798 the newest checkpoint was loaded whatever it held (a traceback, or a silent
resume from a foreign state)."""
from __future__ import annotations

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from genrec.errors import DataError, DiskFullError, UserError
from genrec.runs import RunFolder
from genrec.stream.checkpoint import Checkpoints
from tests.stream.helpers import assert_same_state, final_state
from tests.stream.test_loop import _resume, _run, stream_files  # noqa: F401 (a fixture)

STOP = ["stream.max_events=1024"]  # checkpoints every 256 records, the newest 2 kept: step 768 and step 1024


def _kept(run_dir: Path) -> list[Path]:
    return Checkpoints(run_dir / "checkpoints").complete()


@pytest.fixture(scope="module")
def whole(stream_files, tmp_path_factory) -> dict:
    """The final state of an uninterrupted run over the whole stream."""
    run_dir, _ = _run(tmp_path_factory.mktemp("whole"), "whole", [], stream_files[0])
    return final_state(run_dir)


@pytest.fixture(scope="module")
def stopped(stream_files, tmp_path_factory) -> Path:
    """A run stopped after 1024 records (read only: tests tamper with copies of its checkpoints)."""
    run_dir, _ = _run(tmp_path_factory.mktemp("stopped"), "stopped", STOP, stream_files[0])
    return run_dir


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate_a_table_file(step: Path) -> Path:
    """Halve the tier-2 store's largest file (the slab file of the default store)."""
    store = max((step / "tables" / "item_table" / "rank0" / "store").iterdir(), key=lambda p: p.stat().st_size)
    with open(store, "r+b") as f:
        f.truncate(store.stat().st_size // 2)
    return store


def _another_runs(step: Path) -> str:
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["run_id"] = "0" * 32
    (step / "manifest.json").write_text(json.dumps(manifest))
    return "written by run 00000000000000000000000000000000, not by run"


TAMPER = {  # what is done to the newest checkpoint -> what the refusal says
    "bit flip in trainer.pt": lambda step: (_flip_a_byte(step / "trainer.pt"),
                                            f"{step / 'trainer.pt'}: its sha256 differs")[1],
    "table store file truncated": lambda step: f"{_truncate_a_table_file(step)}: ",
    "user store file deleted": lambda step: ((step / "users" / "CURRENT").unlink(),
                                             f"{step / 'users' / 'CURRENT'}: missing")[1],
    "manifest deleted (incomplete)": lambda step: ((step / "manifest.json").unlink(),
                                                   f"{step}: holds no manifest.json")[1],
    "checkpoint of another run": _another_runs,
}


@pytest.mark.parametrize("tamper", list(TAMPER))
def test_the_newest_intact_checkpoint_is_found(stopped, tmp_path, tamper):
    folder = Path(shutil.copytree(stopped / "checkpoints", tmp_path / "checkpoints", symlinks=True))
    checkpoints, run_id = Checkpoints(folder), RunFolder(stopped).run_id()
    older, newest = checkpoints.complete()
    assert checkpoints.newest_intact(run_id) == (newest, [])
    expected = TAMPER[tamper](newest)
    path, refused = checkpoints.newest_intact(run_id)
    assert path == older and [p for p, _ in refused] == [newest] and expected in str(refused[0][1])
    _flip_a_byte(older / "trainer.pt")
    assert checkpoints.newest_intact(run_id)[0] is None


def test_a_tampered_newest_checkpoint_is_set_aside_and_the_run_ends_bit_identical(stream_files, whole, tmp_path,
                                                                                   caplog):
    run_dir, _ = _run(tmp_path, "run", STOP, stream_files[0])
    older, newest = _kept(run_dir)
    _flip_a_byte(newest / "trainer.pt")
    with caplog.at_level(logging.WARNING, logger="genrec.stream"):
        second = _resume(run_dir, ["stream.max_events=null"])
    warnings = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warnings) == 1 and f"checkpoint {newest.name} refused" in warnings[0] \
        and "trainer.pt: its sha256 differs" in warnings[0] and f"resuming from the older {older.name}" in warnings[0]
    assert (run_dir / "checkpoints" / f"refused-{newest.name}" / "trainer.pt").is_file()  # kept for inspection
    assert second["counts"]["records"] == whole["counts"]["records"]
    assert_same_state(whole, final_state(run_dir))


def test_no_intact_checkpoint_is_one_line(stream_files, tmp_path):
    run_dir, _ = _run(tmp_path, "run", STOP, stream_files[0])
    older, newest = _kept(run_dir)
    _flip_a_byte(newest / "trainer.pt")
    (older / "users" / "CURRENT").unlink()
    with pytest.raises(DataError) as refused:
        _resume(run_dir, ["stream.max_events=null"])
    message = str(refused.value)
    assert message.startswith(f"{run_dir / 'checkpoints'}: no intact checkpoint to resume from: ")
    assert f"{newest / 'trainer.pt'}: its sha256 differs" in message and f"{older / 'users' / 'CURRENT'}: missing" \
        in message and "\n" not in message
    assert _kept(run_dir) == [older, newest]  # nothing set aside or deleted: the user decides


def test_redis_refuses_to_fall_back_past_what_it_acknowledged(stream_files, tmp_path, redis_server):
    """Falling back would skip the entries acknowledged after the older checkpoint: a Redis group does not deliver
    them again."""
    from genrec.stream.redis_streams import publish

    publish(redis_server.client, "fallback-events", stream_files[1])
    run_dir, _ = _run(tmp_path, "run", STOP + ["source=redis", f"source.url={redis_server.url}",
                                               "source.stream=fallback-events", "source.block_ms=100"])
    older, newest = _kept(run_dir)
    _flip_a_byte(newest / "trainer.pt")
    with pytest.raises(UserError, match=f"trainer.pt: its sha256 differs .*; the older checkpoint {older.name} is "
                                        "intact, but RedisStreamSource cannot deliver again the records it has "
                                        f"acknowledged after it: restore {newest} from a backup"):
        _resume(run_dir, ["stream.max_events=null"])


def test_a_full_disk_while_checkpointing_is_one_line_and_the_run_resumes_exactly(stream_files, whole, tmp_path,
                                                                                  monkeypatch):
    saves, save = [], torch.save

    def full_at_the_fourth(obj, path, *args, **kwargs):  # trainer.pt of the checkpoint at 768 records
        if Path(path).name == "trainer.pt":
            saves.append(path)
            if len(saves) == 4:
                raise OSError(errno.ENOSPC, "No space left on device")
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_at_the_fourth)
    with pytest.raises(DiskFullError) as full:
        _run(tmp_path, "run", [], stream_files[0])
    monkeypatch.undo()
    run_dir = tmp_path / "run"
    assert str(full.value).startswith(f"{run_dir / 'checkpoints' / 'step-000000000768'}: cannot be written: No space")
    # the unfinished checkpoint's folder is gone, the kept ones are intact
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000000000256", "step-000000000512"]
    assert Checkpoints(run_dir / "checkpoints").newest_intact(RunFolder(run_dir).run_id())[1] == []
    _resume(run_dir, [])
    assert_same_state(whole, final_state(run_dir))
