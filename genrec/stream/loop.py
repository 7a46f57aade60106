"""The stream loop (genrec-stream): micro-batches of events from a source -> prequential evaluation -> training
steps on the dynamic item table -> state updates; checkpoints with exactly-once semantics; versioned hot exports.

One micro-batch (``batch_size`` records, fewer only when the source has no more for now: the trainer waits for
records only while it has none, so a backlog is consumed in full micro-batches):

1. read the records (the source's offset after them is the batch's end offset);
2. reject what cannot be trained — malformed records, unknown event types, event IDs seen before, events older
   than their user's latest — counting them and writing them to ``dead_letters.jsonl`` with their offsets;
3. read the users' histories (the last ``max_len`` events of each, from the user-state store) and build one
   sequence per user: history + the user's new events, the new events being the targets
   (:mod:`genrec.stream.examples`);
4. rank every target with the current model and the online baselines (:mod:`genrec.stream.prequential`);
5. train on the targets in steps of at most ``step_targets`` targets, each sequence whole in one step, shortest
   first (:meth:`~genrec.stream.examples.Examples.steps`), with offline training's step
   (:class:`~genrec.stream.learner.Learner`: admission of new items into the dynamic table, eviction of stale ones,
   the fused row update, AdamW on the rest). A user's kept history is encoded once per micro-batch as the context of
   its new events: the larger the micro-batch, the fewer times per event;
6. write the new histories, the accepted event IDs and the baselines' counts.

Exactly-once: every ``checkpoint.every_events`` records (and at the end) the whole state — model, optimizer, table,
user and event stores, baselines, prequential windows, random state, the end offset of the last trained batch and
the size of every file the trainer appends to — goes into one checkpoint folder, atomically
(:mod:`genrec.stream.checkpoint`); the offset is committed to the source only after that folder is durable. A
restarted trainer loads the newest checkpoint, truncates its files to the recorded sizes and asks the source for
the records after the checkpoint's offset, so whatever the moment of the crash no event is lost or trained twice,
and with the same batches (a source whose records are all there) the result is bit-identical to a run that was
never interrupted. Every checkpoint is bound to the run (``run.json``) and checked against its manifest before it
is loaded: a tampered, truncated, incomplete or foreign newest checkpoint is set aside, with a warning, and the run
resumes from the newest intact one it keeps (re-reading the records after that one's offset: a source that cannot
re-deliver what it has acknowledged, Redis, refuses instead); none intact is one line.

Memory is bounded: one micro-batch in flight (the source is pulled, never pushed: when training is slower than the
stream the backlog waits in the source, and ``lag_events`` in the log shows it), a fixed tier 0 for the item table,
the stores' caches; glibc's heap kept from fragmenting (:func:`bound_heap`) and its free pages handed back to the
OS after every checkpoint (:func:`release_free_memory`).
What grows is on disk: the stores (users, event IDs, tier-2 rows). Every
``log_every_events`` records one row of ``logs/stream.csv`` (and TensorBoard) gives throughput, the backlog, the
seconds from an event's arrival in the source to the end of its training step, RSS, the stores' own memory
(RocksDB block caches, with the memtables and index/filter blocks charged to them: ``state.cache_mib``,
``embedding.store.cache_mib``) and the table's counters.
"""
from __future__ import annotations

import ctypes
import logging
import resource
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig

from genrec.data.batch import JaggedBatch
from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint
from genrec.errors import DataError, UserError
from genrec.runs import RunFolder
from genrec.stream.baselines import ONLINE_BASELINES, ItemIndex, OnlinePopularity, OnlineTransitions
from genrec.stream.checkpoint import Checkpoints
from genrec.storage.durable import write_json_durably
from genrec.stream.events import REASONS, Events, EventSchema, Records, Rejected, parse
from genrec.stream.examples import Examples, build_examples
from genrec.stream.exports import HotExporter, checkpoint_source
from genrec.stream.hooks import pause_point
from genrec.stream.learner import Learner
from genrec.stream.logs import AppendLog, CsvLog, DeadLetters
from genrec.stream.prequential import Prequential, plot_prequential, ranks_of
from genrec.stream.source import Source
from genrec.stream.state import SeenEvents, UserHistories

log = logging.getLogger("genrec.stream")

TABLE = "item_table"
LOG_COLUMNS = ["records", "accepted", "targets", "cold", *[f"rejected_{r}" for r in REASONS], "steps", "loss",
               "records_per_s", "lag_events", "lag_seconds_mean", "lag_seconds_max", "event_time", "rss_mib",
               "peak_rss_mib", "live_rows", "admitted", "evicted", "written_back", "state_disk_mib", "stores_mib"]
#: the scores of the model are chunked so that one chunk holds at most this many floats
SCORE_CHUNK = 1 << 22


def rss_bytes() -> int:
    """The process's resident set size now (from /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; nothing elsewhere). Micro-batches of
    varying shapes leave freed memory scattered over the heap and its arenas, which glibc keeps: without this the
    RSS of a long run creeps up (scripts/bench/bench_stream.py's memory run: about 0.7 GiB per million events)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


#: glibc's mallopt parameters (malloc.h) and the values the trainer sets (see :func:`bound_heap`)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
HEAP_SETTINGS = {_M_ARENA_MAX: 2, _M_MMAP_THRESHOLD: 1 << 20, _M_TRIM_THRESHOLD: 128 << 10}


def bound_heap() -> None:
    """Keep glibc's heap from growing with a long run (nothing elsewhere): at most 2 malloc arenas, blocks of
    1 MiB and more mapped on their own (returned to the OS when freed; glibc otherwise raises this threshold as
    large blocks are freed and serves them from the heap, where they fragment), the heap's top trimmed past
    128 KiB. Set once, by the trainer, for the whole process. The threshold is a trade: every mapped block is
    fresh memory, zeroed page by page by the kernel when first touched; at 128 KiB the training step's activations
    (a micro-batch's ``(B, L, D)`` tensors are mostly 0.1-1 MiB) were all mapped and the step took 1.6x its CPU
    time (scripts/bench/bench_stream.py's SASRec)."""
    if _LIBC is not None and hasattr(_LIBC, "mallopt"):
        for parameter, value in HEAP_SETTINGS.items():
            _LIBC.mallopt(parameter, value)


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def concat_records(parts: list[Records]) -> Records:
    """Several reads as one batch."""
    if len(parts) == 1:
        return parts[0]
    sizes = np.cumsum([0] + [len(p) for p in parts])
    broken = {int(start) + row: why for p, start in zip(parts, sizes) for row, why in p.broken.items()}

    def raw(row: int) -> Any:
        i = int(np.searchsorted(sizes, row, side="right")) - 1
        return parts[i].raw(row - int(sizes[i]))

    arrival = None if any(p.arrival is None for p in parts) else np.concatenate([p.arrival for p in parts])
    return Records(pd.concat([p.frame for p in parts], ignore_index=True), sum((p.positions for p in parts), []),
                   parts[-1].end, arrival, broken, raw)


class StreamLoop:
    """Args:
        cfg: the resolved ``stream.yaml`` config (``stream``, ``checkpoint``, ``prequential``, ``export``, ``state``).
        run_dir: the run folder.
        source: where the events come from.
        learner: the model, its loss and optimizer.
        model_name: the model's name in the prequential tables.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, source: Source, learner: Learner, model_name: str):
        self.cfg, self.run_dir, self.source, self.learner = cfg, Path(run_dir), source, learner
        bound_heap()
        s = cfg.stream
        self.schema = EventSchema.build(s.schema)
        self.batch_size, self.max_len = int(s.batch_size), int(s.max_len)
        self.step_targets = int(s.get("step_targets", s.batch_size))  # a run started before the key: one step
        self.train = bool(s.train)
        self.checkpoints = Checkpoints(self.run_dir / "checkpoints", int(cfg.checkpoint.keep))
        live = self.run_dir / "live"
        self.histories = UserHistories(live / "users", self.max_len, cfg.state.backend, int(cfg.state.cache_mib))
        self.seen = SeenEvents(live / "events", cfg.state.backend, int(cfg.state.cache_mib))
        logs = self.run_dir / "logs"
        self.dead = DeadLetters(self.run_dir / "dead_letters.jsonl")
        self.log_csv = CsvLog(logs / "stream.csv", LOG_COLUMNS)
        self.ledger = AppendLog(self.run_dir / "ledger.txt") if s.ledger else None
        p = cfg.prequential
        self.methods = [model_name] + list(p.baselines) if p.enabled else []
        self.preq_csv = CsvLog(logs / "prequential.csv", ["window", "index", "start", "end", "events", "complete",
                                                          "method", *self._metric_names()])
        self.writer = None
        self.items = ItemIndex()
        self.popularity = OnlinePopularity()
        self.baselines = {name: ONLINE_BASELINES[name](self.popularity) for name in p.baselines} if p.enabled else {}
        self.prequential = Prequential(self.methods, tuple(p.ks), int(p.window_events), int(p.window_seconds),
                                       p.from_time, self.preq_csv) if p.enabled else None
        e = cfg.export
        self.exporter = HotExporter(self.run_dir / "exports", model_name, e.indexes, e.default_index, int(e.keep),
                                    e.parity) \
            if (e.every_events or e.every_seconds) else None
        self.counts = {"records": 0, "accepted": 0, "targets": 0, "cold": 0, "steps": 0, "positions": 0,
                       **{f"rejected_{r}": 0 for r in REASONS}}
        self.offset: Any = None
        self.event_time = 0
        self.export_state = {"version": 0, "events": 0, "time": None, "table_version": None, "pending": None}
        self.last_checkpoint: int | None = None
        self.run_id: str | None = None  # the run folder's run.json, read or written by restore()
        self._interval = {"loss": 0.0, "steps": 0, "lag_sum": 0.0, "lag_max": 0.0, "lag_n": 0, "started": 0.0,
                          "records": 0}
        self._recent: JaggedBatchSample | None = None
        self.started, self.cpu_started = time.time(), time.process_time()
        self.records_at_start = 0

    def _metric_names(self) -> list[str]:
        from genrec.eval.metrics import RankingMetrics

        return RankingMetrics(tuple(self.cfg.prequential.ks)).names()

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        """Restore (or start), consume until the source is idle (``stop_when_idle``) or ``max_events`` records are
        consumed, checkpoint, and return the run's summary (also ``metrics.json``)."""
        from torch.utils.tensorboard import SummaryWriter

        restored = self.restore()
        self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.counts["records"] + 1)
        if self.prequential is not None:
            self.prequential.writer = self.writer
        self.source.bind(self.schema, str(self.run_dir))
        self.source.restore(self.offset)
        if restored is None:
            self.checkpoint()  # the starting point: a crash before the first batch starts over from here
        elif self.export_state["pending"] is not None:
            self._export(restored)  # the checkpoint was taken for an export that may not have finished
        self.started, self.cpu_started = time.time(), time.process_time()
        self.records_at_start = self.counts["records"]
        self._interval.update(started=time.time(), records=self.counts["records"])
        s = self.cfg.stream
        max_events = s.max_events
        while max_events is None or self.counts["records"] < max_events:
            want = self.batch_size if max_events is None else min(self.batch_size, max_events - self.counts["records"])
            records = self.read(want)
            if len(records) == 0:
                if s.stop_when_idle:
                    break
                continue
            pause_point("batch_read")
            self.step(records)
            pause_point("batch_trained")
            self._maybe_log()
            if self._checkpoint_due():
                self.checkpoint()
            if self._export_due():
                self._export(self.checkpoint())
        return self.finish()

    def read(self, want: int) -> Records:
        """Up to ``want`` records: reads until that many or the source has no more for now, waiting (up to the
        source's poll timeout) only while it has none: a backlog is read in full micro-batches, a stream the trainer
        keeps up with in what has arrived."""
        parts, got = [], 0
        while got < want:
            part = self.source.read(want - got, wait=not parts)
            if len(part) == 0:
                if not parts:
                    self.offset = part.end if part.end is not None else self.offset
                break
            parts.append(part)
            got += len(part)
        return concat_records(parts) if parts else Records(pd.DataFrame(), [], self.offset)

    # ------------------------------------------------------------------ one micro-batch
    def step(self, records: Records) -> None:
        """Process one micro-batch (steps 2-6 of the module doc)."""
        events, rejected = parse(records, self.schema)
        users = np.unique(events.users)
        history = self.histories.histories(users)  # (U,) lengths, (U, max_len) items and times: read once
        events, more = self._accept(events, records, users, history[0], history[2])
        rejected = sorted(rejected + more, key=lambda r: r.row)
        self.dead.add(rejected, self.counts["records"])
        for r in rejected:
            self.counts[f"rejected_{r.reason}"] += 1
        if len(events):
            rows = np.searchsorted(users, np.unique(events.users))  # the users left after the rejections
            examples = build_examples(events, users[rows], *(a[rows] for a in history), self.max_len)
            if self.prequential is not None and examples.num_targets:
                self._predict(events, examples)
            batch_time = int(events.times.max())
            if self.train and examples.num_targets:
                parts = [part for part in examples.steps(self.step_targets) if part.num_targets]
                for part, loss in zip(parts, self.learner.train_steps(parts, batch_time)):
                    self._interval["loss"] += loss
                    self._interval["steps"] += 1
                    self.counts["steps"] += 1
                    self.counts["positions"] += len(part.batch.item_ids)
            self._update_state(events, examples)
            self.event_time = max(self.event_time, batch_time)
            if events.arrival is not None and len(events.arrival):
                lag = time.time() - events.arrival
                self._interval["lag_sum"] += float(lag.sum())
                self._interval["lag_n"] += len(lag)
                self._interval["lag_max"] = max(self._interval["lag_max"], float(lag.max()))
            self._recent = JaggedBatchSample.of(examples)
        self.counts["records"] += len(records)
        self.offset = records.end

    def _accept(self, events: Events, records: Records, users: np.ndarray, lengths: np.ndarray, times: np.ndarray
                ) -> tuple[Events, list[Rejected]]:
        """Drop duplicates (of earlier batches, or earlier in this one) and events out of order for their user
        (``users (U,)``: the events' distinct users, sorted; ``lengths (U,)`` and ``times (U, max_len)``: their
        histories)."""
        if len(events) == 0:
            return events, []
        first = np.zeros(len(events), dtype=bool)
        first[np.unique(events.keys, return_index=True)[1]] = True
        duplicate = ~first | self.seen.seen(events.keys)
        latest = np.where(lengths > 0, times[np.arange(len(users)), np.maximum(lengths - 1, 0)], -(2**62))
        where = np.searchsorted(users, events.users)
        late = np.zeros(len(events), dtype=bool)
        lateness = self.schema.allowed_lateness
        for i in np.flatnonzero(~duplicate):
            u, t = where[i], events.times[i]
            if t < latest[u] - lateness:
                late[i] = True
            else:
                latest[u] = max(latest[u], t)
        rejected = []
        for i in np.flatnonzero(duplicate | late):
            row = int(events.rows[i])
            if duplicate[i]:
                why = ("duplicate", f"event ID {events.event_ids[i]!r} was accepted before")
            else:
                why = ("out_of_order", f"time {events.times[i]} is before its user's latest accepted event "
                                       f"(allowed lateness {lateness} s)")
            rejected.append(Rejected(row, records.positions[row], *why, records.raw(row)))
        return events.take(~(duplicate | late)), rejected

    def _predict(self, events: Events, examples: Examples) -> None:
        """Rank every target (from ``prequential.from_time`` on) by the model and each baseline (the state at the
        start of the batch)."""
        times = events.times[examples.target_events]
        ranked = np.ones(len(times), dtype=bool) if self.prequential.from_time is None else \
            times >= self.prequential.from_time
        if not ranked.any():
            return
        queries = self.learner.queries(examples, self.step_targets)[torch.from_numpy(ranked)]  # (M, D)
        candidates = self.items.ids  # (C,)
        targets = events.items[examples.target_events[ranked]]
        target_columns = self.items.columns(targets)
        seen_columns = self.items.columns(examples.seen_ids)
        contexts = [seen_columns[a:b] for a, b, keep in
                    zip(examples.seen_offsets[:-1], examples.seen_offsets[1:], ranked) if keep]
        ranks: dict[str, list[torch.Tensor]] = {m: [] for m in self.methods}
        vectors, has_row = self.learner.item_vectors(candidates)
        step = max(1, SCORE_CHUNK // max(len(candidates), 1))
        for start in range(0, len(targets), step):
            stop = start + step
            part = slice(start, stop)
            scores = queries[part] @ vectors.T
            scores[:, torch.from_numpy(~has_row)] = float("-inf")
            ranks[self.methods[0]].append(ranks_of(scores, target_columns[part], contexts[part]))
            for name, baseline in self.baselines.items():
                ranks[name].append(ranks_of(baseline.scores(contexts[part], len(candidates)), target_columns[part],
                                            contexts[part]))
        self.prequential.add({m: torch.cat(r) for m, r in ranks.items()}, times[ranked])

    def _update_state(self, events: Events, examples: Examples) -> None:
        self.histories.write(examples.users, examples.lengths, examples.items, examples.times)
        self.seen.add(events.keys, events.times)
        if self.ledger is not None:
            self.ledger.write("".join(f"{e}\n" for e in events.event_ids))
        self.counts["accepted"] += len(events)
        self.counts["targets"] += examples.num_targets
        self.counts["cold"] += len(examples.cold)
        if self.baselines or self.prequential is not None:
            columns = self.items.add(events.items)
            self.popularity.update(columns, len(self.items))
            sequences = [self.items.columns(s) for s in examples.sequences]
            for baseline in self.baselines.values():
                if isinstance(baseline, OnlineTransitions):
                    baseline.update(sequences, examples.history_lengths.tolist())

    # ------------------------------------------------------------------ logging
    def _stores_bytes(self) -> int:
        """Process memory held by the embedded stores themselves (users, event IDs, the table's tier 2)."""
        table_store = self.learner.table.store
        return (self.histories.memory_bytes() + self.seen.memory_bytes()
                + (table_store.memory_bytes() if table_store is not None else 0))

    def _maybe_log(self) -> None:
        every = int(self.cfg.stream.log_every_events)
        if every and self.counts["records"] // every > self._interval["records"] // every:
            self.log_row()

    def log_row(self) -> dict[str, Any]:
        """One row of ``logs/stream.csv`` (and TensorBoard) about the records since the previous row."""
        now, i = time.time(), self._interval
        table = self.learner.table.counters()
        row = {**self.counts, "loss": i["loss"] / i["steps"] if i["steps"] else None,
               "records_per_s": (self.counts["records"] - i["records"]) / max(now - i["started"], 1e-9),
               "lag_events": self.source.backlog(),
               "lag_seconds_mean": i["lag_sum"] / i["lag_n"] if i["lag_n"] else None,
               "lag_seconds_max": i["lag_max"] if i["lag_n"] else None, "event_time": self.event_time,
               "rss_mib": rss_bytes() / 2**20, "peak_rss_mib": peak_rss_bytes() / 2**20,
               "live_rows": table["live_rows_tier0"], "admitted": table["admitted"], "evicted": table["evicted"],
               "written_back": table["written_back"],
               "state_disk_mib": (self.histories.disk_bytes() + self.seen.disk_bytes()) / 2**20,
               "stores_mib": self._stores_bytes() / 2**20}
        self.log_csv.row(row)
        for key in ("records_per_s", "loss", "lag_events", "lag_seconds_mean", "rss_mib", "live_rows"):
            if row[key] is not None:
                self.writer.add_scalar(f"stream/{key}", row[key], self.counts["records"])
        log.info("records %d (accepted %d, rejected %d) | %.0f records/s | loss %s | backlog %s | lag %s s | "
                 "RSS %.0f MiB | table rows %d", self.counts["records"], self.counts["accepted"],
                 sum(self.counts[f"rejected_{r}"] for r in REASONS), row["records_per_s"],
                 "-" if row["loss"] is None else f"{row['loss']:.4f}", row["lag_events"],
                 "-" if row["lag_seconds_mean"] is None else f"{row['lag_seconds_mean']:.2f}", row["rss_mib"],
                 row["live_rows"])
        self._interval = {"loss": 0.0, "steps": 0, "lag_sum": 0.0, "lag_max": 0.0, "lag_n": 0, "started": now,
                          "records": self.counts["records"]}
        return row

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_due(self) -> bool:
        every = int(self.cfg.checkpoint.every_events)
        last = self.last_checkpoint or 0
        return bool(every) and self.counts["records"] // every > last // every

    def _export_due(self) -> bool:
        """Whether an export version is due (every ``export.every_events`` records or ``export.every_seconds`` of
        event time since the previous one); marks it pending, so that the checkpoint taken for it records it."""
        if self.exporter is None:
            return False
        e, x = self.cfg.export, self.export_state
        if x["time"] is None:  # the event-time clock starts at the first batch
            x["time"] = self.event_time
        due = bool((e.every_events and self.counts["records"] // e.every_events > x["events"] // e.every_events)
                   or (e.every_seconds and self.event_time >= x["time"] + e.every_seconds))
        if due:
            x["pending"] = x["version"] + 1
        return due

    def checkpoint(self) -> Path:
        """Write the checkpoint of the current state, then commit its offset to the source (see the module doc)."""
        records = self.counts["records"]
        path = self.checkpoints.write(records, self._fill, lambda: pause_point("checkpoint_rename"), self.run_id)
        pause_point("checkpoint_durable")
        self.source.commit(self.offset)
        pause_point("committed")
        self.checkpoints.prune()
        self.last_checkpoint = records
        release_free_memory()
        return path

    def _fill(self, folder: Path) -> None:
        save_checkpoint({TABLE: self.learner.table}, folder / "tables", run_id=self.run_id)
        pause_point("checkpoint_tables")
        self.histories.checkpoint(folder / "users")
        self.seen.checkpoint(folder / "events")
        files = {}
        for name, f in self._files().items():
            f.sync()
            files[name] = f.size()
        torch.save(self._state(files), folder / "trainer.pt")
        write_json_durably(folder / "meta.json", {"records": self.counts["records"], "offset": self.offset,
                                                  "event_time": self.event_time, "created": time.time()})

    def _files(self) -> dict[str, AppendLog]:
        files = {"dead_letters": self.dead, "stream_csv": self.log_csv, "prequential_csv": self.preq_csv}
        if self.ledger is not None:
            files["ledger"] = self.ledger
        return files

    def _state(self, files: dict[str, int]) -> dict[str, Any]:
        """What ``trainer.pt`` holds: tensors and plain values only (loadable with ``weights_only=True``)."""
        baselines = {name: {k: torch.from_numpy(v) for k, v in b.state().items()}
                     for name, b in self.baselines.items() if isinstance(b, OnlineTransitions)}
        return {"model": self.learner.model.state_dict(), "optimizer": self.learner.optimizer.state_dict(),
                "rng": torch.get_rng_state(), "offset": self.offset, "counts": dict(self.counts),
                "dead_letter_counts": dict(self.dead.counts), "event_time": self.event_time,
                "export": dict(self.export_state), "files": files,
                "items": torch.from_numpy(self.items.ids.copy()),
                "popularity": torch.from_numpy(self.popularity.counts.copy()), "transitions": baselines,
                "prequential": self.prequential.state() if self.prequential is not None else None}

    def restore(self) -> Path | None:
        """Load the newest intact checkpoint (:meth:`_intact_checkpoint`; none: start from scratch, every file
        emptied, the run's identity written). Returns it."""
        run = RunFolder(self.run_dir)
        if self.checkpoints.latest() is None:
            self.run_id = run.start_run()
            for f in self._files().values():
                f.truncate(0)
            shutil.rmtree(self.run_dir / "tensorboard", ignore_errors=True)
            return None
        self.run_id = run.run_id()
        path = self._intact_checkpoint()
        state = torch.load(path / "trainer.pt", weights_only=True)
        self.learner.model.load_state_dict(state["model"])
        self.learner.optimizer.load_state_dict(state["optimizer"])
        self.learner.embedding.reset()  # a snapshot loads into a fresh table
        load_checkpoint({TABLE: self.learner.table}, path / "tables", self.run_id, checked=True)  # with the rest
        self.histories.restore(path / "users")
        self.seen.restore(path / "events")
        for name, f in self._files().items():
            f.truncate(state["files"].get(name, 0))
        self.counts.update(state["counts"])  # a checkpoint older than a counter leaves it at 0
        self.offset, self.event_time = state["offset"], state["event_time"]
        self.dead.counts = dict(state["dead_letter_counts"])
        self.export_state = dict(state["export"])
        self.items.load(state["items"].numpy())
        self.popularity.counts = state["popularity"].numpy().copy()
        for name, saved in state["transitions"].items():
            self.baselines[name].load({k: v.numpy() for k, v in saved.items()})
        if self.prequential is not None:
            self.prequential.load(state["prequential"])
        torch.set_rng_state(state["rng"])
        self.last_checkpoint = self.counts["records"]
        log.info("resumed from %s: %d records consumed, offset %s", path.name, self.counts["records"], self.offset)
        return path

    def _intact_checkpoint(self) -> Path:
        """The newest checkpoint that passes its check (:meth:`Checkpoints.newest_intact`); newer ones refused are
        set aside, saying so. A :class:`DataError` when none is intact; a :class:`UserError` when falling back would
        skip records the source cannot deliver again."""
        path, refused = self.checkpoints.newest_intact(self.run_id)
        if path is None:
            raise DataError(self.checkpoints.folder, "no intact checkpoint to resume from: "
                                                     + "; ".join(str(err) for _, err in refused))
        if refused and not self.source.rewinds:
            raise UserError(f"{refused[0][1]}; the older checkpoint {path.name} is intact, but "
                            f"{type(self.source).__name__} cannot deliver again the records it has acknowledged "
                            f"after it: restore {refused[0][0]} from a backup, or start a new run")
        for refused_path, err in refused:
            aside = self.checkpoints.set_aside(refused_path)
            log.warning("checkpoint %s refused (%s): set aside as %s; resuming from the older %s",
                        refused_path.name, err, aside.name, path.name)
        return path

    # ------------------------------------------------------------------ exports and the end
    def _export(self, checkpoint: Path) -> None:
        """Write the pending export version from the state of ``checkpoint`` (just written, or just restored).
        The global random state is left as it was (an export draws nothing the training would see)."""
        x = self.export_state
        version = x["pending"]
        if self._recent is None:  # restored right before an export: no batch in memory to check the tower on
            self._recent = JaggedBatchSample.from_store(self.histories)
        stream = {"version": version, "offset": self.offset, "events": self.counts["records"],
                  "event_time": self.event_time, "table_version": self.learner.table.step,
                  "delta_since": x["table_version"], "previous": x["version"] or None}
        rng = torch.get_rng_state()
        self.exporter.write(version, self.learner, self._recent.batch, stream, x["table_version"],
                            checkpoint_source(self.run_dir, checkpoint, self.source.description))
        torch.set_rng_state(rng)
        x.update(version=version, events=self.counts["records"], time=self.event_time,
                 table_version=self.learner.table.step, pending=None)

    def finish(self) -> dict[str, Any]:
        """The final checkpoint, the incomplete windows, the plot and ``metrics.json``."""
        if self.last_checkpoint != self.counts["records"]:
            self.checkpoint()
        seconds, cpu_seconds = time.time() - self.started, time.process_time() - self.cpu_started
        if self.counts["records"] - self._interval["records"] > 0:
            self.log_row()
        if self.prequential is not None:
            self.prequential.close_open_windows()
            plot_prequential(self.preq_csv.path, self.run_dir / "prequential.png")
        consumed = self.counts["records"] - self.records_at_start
        summary = {"counts": dict(self.counts), "offset": self.offset, "event_time": self.event_time,
                   "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
                   "records_per_s": consumed / seconds if seconds > 0 else None,
                   "records_this_process": consumed, "peak_rss_mib": peak_rss_bytes() / 2**20,
                   "item_table": self.learner.table.counters(),
                   "prequential": self.prequential.summary() if self.prequential is not None else None,
                   "exports": self.exporter.versions() if self.exporter is not None else [],
                   "checkpoint": str(self.checkpoints.latest().relative_to(self.run_dir))}
        self.writer.close()
        return summary

    def close(self) -> None:
        for f in self._files().values():
            f.close()
        self.histories.close()
        self.seen.close()
        self.learner.embedding.close()
        self.source.close()


class JaggedBatchSample:
    """Users' histories as a :class:`~genrec.data.batch.JaggedBatch` of raw item IDs (at most ``limit`` users), for
    checking an exported tower against the live model. The query time of a history's last position is its own
    time (the next event's time is not known)."""

    def __init__(self, users: np.ndarray, lengths: np.ndarray, items: np.ndarray, times: np.ndarray, limit: int = 256):
        keep = np.flatnonzero(lengths > 0)[:limit]
        lengths = lengths[keep]
        parts = [(items[u, :n], times[u, :n]) for u, n in zip(keep, lengths)]

        def cat(arrays: list[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64))

        self.batch = JaggedBatch(item_ids=cat([p[0] for p in parts]),
                                 offsets=torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)),
                                 target_ids=torch.zeros(0, dtype=torch.int64),
                                 user_ids=torch.from_numpy(users[keep].astype(np.int64)),
                                 timestamps=cat([p[1] for p in parts]),
                                 query_timestamps=cat([np.append(p[1][1:], p[1][-1]) for p in parts]))

    @classmethod
    def of(cls, examples: Examples) -> "JaggedBatchSample":
        """The histories (after the batch) of the users of a micro-batch."""
        return cls(examples.users, examples.lengths, examples.items, examples.times)

    @classmethod
    def from_store(cls, histories: UserHistories) -> "JaggedBatchSample":
        """Histories of up to 256 users read from the store (after a restore)."""
        users = next(histories.store.scan(256), (np.zeros(0, dtype=np.int64), None))[0]
        users = np.sort(users)
        return cls(users, *histories.histories(users))
