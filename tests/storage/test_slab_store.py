"""The slab store (genrec/storage/slab.py) against a dict: random puts, deletes and gets on a tiny index (probe
chains that wrap, deletions that shift entries back), IDs whose fingerprints collide, the free list and the index
through a snapshot and a restore, a SIGKILL in the middle of writes, damaged snapshots and a full index."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.embedding.dynamic.hashing import mix64
from genrec.storage.stores import open_store, restore_snapshot
from genrec.errors import ConfigError, DataError
from genrec.storage import slab
from genrec.storage.slab import SlabStore

REPO = Path(__file__).resolve().parents[2]
RECORD = 12


def _record(i: int, version: int) -> bytes:
    return np.array([i, version], dtype=np.int64).tobytes()[:RECORD]


def _contents(store) -> dict[int, bytes]:
    return {int(i): r.tobytes() for ids, records in store.scan(7) for i, r in zip(ids, records)}


def _check_against(store, reference: dict[int, bytes], probe: np.ndarray) -> None:
    found, records = store.get(probe)
    expected = [reference.get(int(i)) for i in probe]
    assert found.tolist() == [e is not None for e in expected]
    assert records.tobytes() == b"".join(e for e in expected if e is not None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "delete"]),
                          st.lists(st.integers(-40, 40), min_size=1, max_size=25)), min_size=1, max_size=30))
def test_a_tiny_index_answers_like_a_dict(tmp_path_factory, operations):
    """64 positions (57 rows at most): long probe chains that wrap around the end, deletions inside them."""
    folder = tmp_path_factory.mktemp("slab")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slab, "index_positions", lambda cache_mib: 64)
        store = SlabStore(folder / "live", RECORD)
    reference: dict[int, bytes] = {}
    for version, (op, ids) in enumerate(operations):
        ids = np.array(ids, dtype=np.int64)
        if op == "put":
            fresh = len(set(ids.tolist()) - set(reference))
            if len(reference) + fresh > store.max_rows:
                with pytest.raises(ConfigError, match="embedding.store.cache_mib"):
                    store.put(ids, np.frombuffer(b"".join(_record(i, version) for i in ids), np.uint8))
                continue
            store.put(ids, np.frombuffer(b"".join(_record(i, version) for i in ids), np.uint8))
            reference.update({int(i): _record(i, version) for i in ids})  # a repeated ID: the last record wins
        else:
            store.delete(ids)
            for i in ids.tolist():
                reference.pop(i, None)
        _check_against(store, reference, np.arange(-45, 46))
        assert store.rows == len(reference) == (store.index != 0).sum()
    assert _contents(store) == reference
    assert store.slots_used == store.rows + len(store.free_slots())
    store.close()


def _colliding_ids(count: int = 3) -> np.ndarray:
    """IDs whose 32-bit fingerprints (the upper half of slab.c's hash) are equal."""
    ids = np.random.default_rng(5).integers(-2**62, 2**62, 400_000, dtype=np.int64)
    fingerprints = mix64(ids, 0x51AB5EED) >> np.uint64(32)
    order = np.argsort(fingerprints, kind="stable")
    same = np.flatnonzero(fingerprints[order][1:] == fingerprints[order][:-1])
    assert len(same), "no collision among 400,000 IDs (expected ~19)"
    pair = order[[same[0], same[0] + 1]]
    return ids[pair]


def test_ids_sharing_a_fingerprint_are_told_apart_by_the_id_on_disk(tmp_path):
    a, b = _colliding_ids()
    store = SlabStore(tmp_path / "live", RECORD)
    store.put(np.array([a]), np.frombuffer(_record(a, 1), np.uint8))
    assert not store.get(np.array([b]))[0].any()  # same fingerprint, another ID: absent
    store.put(np.array([b]), np.frombuffer(_record(b, 1), np.uint8))
    store.put(np.array([a, b]), np.frombuffer(_record(a, 2) + _record(b, 2), np.uint8))  # both overwritten in place
    assert store.slots_used == 2
    _check_against(store, {int(a): _record(a, 2), int(b): _record(b, 2)}, np.array([a, b]))
    store.delete(np.array([a]))
    _check_against(store, {int(b): _record(b, 2)}, np.array([a, b]))
    store.close()


def test_the_free_list_and_the_index_survive_a_snapshot_and_a_restore(tmp_path):
    rng = np.random.default_rng(0)
    store = SlabStore(tmp_path / "live", RECORD)
    ids = rng.permutation(5000).astype(np.int64)
    store.put(ids, np.frombuffer(b"".join(_record(i, 0) for i in ids), np.uint8))
    store.delete(ids[rng.permutation(5000)[:700]])  # 700 freed slots, stacked in this order
    reference = _contents(store)
    store.checkpoint(tmp_path / "snapshot")
    restore_snapshot(tmp_path / "snapshot", tmp_path / "restored")
    restored = open_store("slab", tmp_path / "restored", RECORD)
    every = np.arange(-10, 5010)
    assert np.array_equal(restored.slots_of(every), store.slots_of(every))
    assert np.array_equal(restored.free_slots(), store.free_slots()) and len(store.free_slots()) == 700
    assert _contents(restored) == reference and restored.rows == store.rows == 4300
    assert not (tmp_path / "restored" / slab.META_FILE).exists()  # the live copy keeps no stale counts
    new = np.arange(10_000, 10_900, dtype=np.int64)  # the same next writes land in the same slots
    for s in (store, restored):
        s.put(new, np.frombuffer(b"".join(_record(i, 1) for i in new), np.uint8))
    assert np.array_equal(restored.slots_of(new), store.slots_of(new))
    assert (tmp_path / "live" / slab.SLAB_FILE).read_bytes() == (tmp_path / "restored" / slab.SLAB_FILE).read_bytes()
    read_only = open_store("slab", tmp_path / "snapshot", RECORD, read_only=True)
    assert _contents(read_only) == reference
    for s in (store, restored, read_only):
        s.close()


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {repo!r})
    from genrec.storage.slab import SlabStore
    from tests.storage.test_slab_store import RECORD, _record
    store = SlabStore({live!r}, RECORD)
    rng = np.random.default_rng(1)
    for step in range(1_000_000):
        ids = np.unique(rng.integers(0, 50_000, 4000))
        store.put(ids, np.frombuffer(b"".join(_record(i, step) for i in ids), np.uint8))
        store.delete(np.unique(rng.integers(0, 50_000, 300)))
        if step == 5:
            store.checkpoint({snapshot!r})
        print(step, flush=True)
""")


def _expected_at(steps: int) -> dict[int, bytes]:
    """The writer's store after ``steps`` batches, by a dict."""
    reference: dict[int, bytes] = {}
    rng = np.random.default_rng(1)
    for step in range(steps):
        ids = np.unique(rng.integers(0, 50_000, 4000))
        reference.update({int(i): _record(i, step) for i in ids})
        for i in np.unique(rng.integers(0, 50_000, 300)).tolist():
            reference.pop(i, None)
    return reference


def test_a_kill_in_the_middle_of_writes_leaves_the_last_snapshot_exact(tmp_path):
    """A child writes batches (overwrites, new rows, deletions) without pause and snapshots after the sixth; it is
    SIGKILLed a random moment after its tenth, inside a write most likely (writing is all it does); the snapshot
    restores to exactly the store after six batches, slots and free list included."""
    script = WRITER.format(repo=str(REPO), live=str(tmp_path / "live"), snapshot=str(tmp_path / "snapshot"))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        for line in child.stdout:
            if int(line) == 10:
                break
        else:
            pytest.fail(f"the writer exited with {child.wait()}")
        time.sleep(np.random.default_rng().random() * 0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    restore_snapshot(tmp_path / "snapshot", tmp_path / "restored")
    restored = SlabStore(tmp_path / "restored", RECORD)
    reference = _expected_at(6)
    assert _contents(restored) == reference and restored.rows == len(reference)
    _check_against(restored, reference, np.arange(-5, 50_005))
    restored.close()


def test_a_damaged_snapshot_is_one_line_naming_its_file(tmp_path):
    store = SlabStore(tmp_path / "live", RECORD)
    ids = np.arange(100, dtype=np.int64)
    store.put(ids, np.frombuffer(b"".join(_record(i, 0) for i in ids), np.uint8))
    store.checkpoint(tmp_path / "snapshot")
    store.close()
    file = tmp_path / "snapshot" / slab.SLAB_FILE
    data = file.read_bytes()
    file.write_bytes(data[:-5])
    with pytest.raises(DataError, match=f"{file}: .*truncated"):
        SlabStore(tmp_path / "snapshot", RECORD, read_only=True)
    twice = bytearray(data)
    twice[8 + RECORD:8 + RECORD + 8] = data[:8]  # slot 1 says it holds slot 0's ID
    file.write_bytes(bytes(twice))
    with pytest.raises(DataError, match="ID 0 is in two slots"):
        SlabStore(tmp_path / "snapshot", RECORD, read_only=True)
    (tmp_path / "snapshot" / slab.META_FILE).unlink()
    with pytest.raises(DataError, match="slab.json: missing"):
        SlabStore(tmp_path / "snapshot", RECORD, read_only=True)
    with pytest.raises(DataError, match="with 12-byte records; expected format 1 with 16"):
        (tmp_path / "snapshot" / slab.META_FILE).write_text('{"format": 1, "record_bytes": 12, "slots": 100, '
                                                             '"rows": 100}')
        SlabStore(tmp_path / "snapshot", 16, read_only=True)


def test_a_full_index_names_cache_mib_and_changes_nothing(tmp_path):
    store = SlabStore(tmp_path / "live", RECORD, cache_mib=1)
    assert store.max_rows == int(0.9 * (1 << 20) // 8) and store.memory_bound_bytes() == 1 << 20
    ids = np.arange(store.max_rows, dtype=np.int64)
    store.put(ids, np.zeros((len(ids), RECORD), np.uint8))
    with pytest.raises(ConfigError, match=r"embedding.store.cache_mib: .* would hold 117966 rows; its ID index of 1 MiB"
                                          r" holds at most 117964"):
        store.put(np.array([5, -1, -2]), np.zeros((3, RECORD), np.uint8))
    assert store.rows == store.max_rows and store.get(np.array([-1]))[0].tolist() == [False]
    store.put(np.array([5]), np.ones((1, RECORD), np.uint8))  # an overwrite still fits
    store.close()


def test_without_a_compiler_the_slab_backend_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(slab, "_library", [])
    monkeypatch.setenv("GENREC_NATIVE_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.raises(ConfigError, match="embedding.store.backend: slab: cannot build or load slab.c .*no-such"):
        SlabStore(tmp_path / "live", RECORD)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise RuntimeError("no VmRSS")


def test_the_slab_holds_its_index_in_memory_not_its_rows(tmp_path):
    """160 MB of rows written in small batches and read back into a slab of cache_mib=8: what it reports is its
    index and write buffers, and the process's RSS grows by about that, not by the rows (they pass through the OS
    page cache, which no mapping puts in the RSS)."""
    store = SlabStore(tmp_path / "live", 800, cache_mib=8)
    before, rng = _rss_bytes(), np.random.default_rng(0)
    for i in range(400):
        store.put(np.arange(i * 500, (i + 1) * 500, dtype=np.int64), np.full((500, 800), i % 251, dtype=np.uint8))
        query = rng.integers(0, (i + 1) * 500, 200)
        found, records = store.get(query)
        assert found.all() and (records[:, 0] == (query // 500) % 251).all()
    grown = _rss_bytes() - before
    assert store.memory_bound_bytes() == 8 << 20
    assert store.memory_bytes() == (8 << 20) + store._free.nbytes + 2 * 500 * (808 + 16)
    assert grown < 3 * store.memory_bytes() < 200_000 * 800 / 4, grown
    assert store.disk_bytes() >= 200_000 * 808
    store.close()
