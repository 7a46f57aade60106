"""Prequential evaluation (predict, then train): every event is ranked by the current model before the model
trains on it, next to the online baselines, and the ranks are aggregated over windows.

Protocol, the same for the model and every baseline: the state at the start of the micro-batch (the model, the
baselines' counts, the set of items seen so far) scores every item seen so far for each target event, from the
event's context (the user's kept history and the user's earlier events of the batch); the items of that context
are removed from the ranking; ties go to the item seen first; a target that is no candidate (a new item), or that
the model holds no row for (an item it cannot serve), is a miss. Ranks go through genrec's own metric code
(:class:`genrec.eval.metrics.RankingMetrics`: Recall@K, NDCG@K, MRR).

Events are ranked from the event time ``from_time`` on (all of them by default; e.g. the last 20% of a replay after
a warm-up the model trains on unranked). Windows: tumbling windows of ``window_events`` ranked events and of
``window_seconds`` of event time (a time window closes when a later one starts; an event older than the open time
window is counted in the totals only). Each closed window is one row per method of ``logs/prequential.csv`` and
TensorBoard scalars; the totals go to ``metrics.json``; :func:`plot_prequential` draws the windows.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from genrec.eval.metrics import RankingMetrics, target_ranks  # noqa: E402
from genrec.stream.logs import CsvLog  # noqa: E402

KINDS = ("events", "time")
#: the rank of a miss (a target that is no candidate, or removed): beyond every cut-off, whatever the candidates
MISS = 2**40


def ranks_of(scores: np.ndarray | torch.Tensor, targets: np.ndarray, seen: list[np.ndarray]) -> torch.Tensor:
    """``scores (M, C)`` over the candidate columns, ``targets (M,)`` columns (``-1``: not a candidate), ``seen``:
    each target's context columns (removed) -> ``(M,)`` 0-based ranks, :data:`MISS` for a target that is no
    candidate, was removed or scores ``-inf`` (pass ``num_items=MISS`` to ``RankingMetrics.update``). ``scores`` may
    be overwritten (the context's columns set to ``-inf``)."""
    scores = torch.as_tensor(scores, dtype=torch.float32)
    m, c = scores.shape
    if c == 0:
        return torch.full((m,), MISS, dtype=torch.int64)
    lengths = np.fromiter((len(s) for s in seen), dtype=np.int64, count=len(seen))
    columns = np.concatenate(seen).astype(np.int64) if len(seen) else np.zeros(0, dtype=np.int64)
    rows = np.repeat(np.arange(len(seen)), lengths)
    known = columns >= 0
    scores[torch.from_numpy(rows[known]), torch.from_numpy(columns[known])] = float("-inf")
    candidate = torch.from_numpy(targets >= 0)
    ranks = target_ranks(scores, torch.from_numpy(np.maximum(targets, 0)))  # c where the target scores -inf
    return torch.where(candidate & (ranks < c), ranks, torch.full_like(ranks, MISS))


class Prequential:
    """Windows and totals of the ranks of ``methods`` (the model first, then baselines).

    Args:
        methods: the names ranked side by side.
        ks: metric cut-offs.
        window_events / window_seconds: window sizes (0: no such windows).
        from_time: events earlier than this are not ranked (``None``: every event is).
        csv: the CSV log of closed windows; writer: a TensorBoard ``SummaryWriter`` or ``None``.
    """

    def __init__(self, methods: list[str], ks: tuple[int, ...], window_events: int, window_seconds: int,
                 from_time: int | None, csv: CsvLog, writer=None):
        self.methods, self.ks = methods, tuple(ks)
        self.sizes = {"events": window_events, "time": window_seconds}
        self.from_time, self.csv, self.writer = from_time, csv, writer
        self.evaluated = 0
        self.late = 0
        self.open: dict[str, int | None] = dict.fromkeys(KINDS)
        self.windows = {kind: self._metrics() for kind in KINDS}
        self.totals = self._metrics()

    def _metrics(self) -> dict[str, RankingMetrics]:
        return {m: RankingMetrics(self.ks) for m in self.methods}

    @property
    def metric_names(self) -> list[str]:
        return RankingMetrics(self.ks).names()

    def add(self, ranks: dict[str, torch.Tensor], times: np.ndarray) -> None:
        """The ``(M,)`` ranks (:func:`ranks_of`) of every method for ``M`` targets with event ``times (M,)``."""
        m = len(times)
        if m == 0:
            return
        for method in self.methods:
            self.totals[method].update(ranks[method], MISS)
        window_ids = {"events": (self.evaluated + np.arange(m)) // max(self.sizes["events"], 1),
                      "time": times // max(self.sizes["time"], 1)}
        self.evaluated += m
        for kind in KINDS:
            if not self.sizes[kind]:
                continue
            ids = window_ids[kind]
            for w in np.unique(ids):
                w = int(w)
                if self.open[kind] is not None and w < self.open[kind]:
                    self.late += int((ids == w).sum())
                    continue
                if self.open[kind] is not None and w > self.open[kind]:
                    self._close(kind, complete=True)
                self.open[kind] = w
                pick = torch.from_numpy(ids == w)
                for method in self.methods:
                    self.windows[kind][method].update(ranks[method][pick], MISS)

    def _close(self, kind: str, complete: bool) -> None:
        w, size = self.open[kind], self.sizes[kind]
        count = self.windows[kind][self.methods[0]].count
        for method in self.methods:
            values = self.windows[kind][method].compute()
            self.csv.row({"window": kind, "index": w, "start": w * size, "end": (w + 1) * size, "events": count,
                          "complete": int(complete), "method": method, **values})
            if self.writer is not None and complete:
                for name, value in values.items():
                    self.writer.add_scalar(f"prequential_{kind}/{method}/{name}", value, w)
        self.windows[kind] = self._metrics()

    def close_open_windows(self) -> None:
        """Write the windows still open as incomplete rows (at the end of a run, after its last checkpoint)."""
        for kind in KINDS:
            if self.sizes[kind] and self.open[kind] is not None and self.windows[kind][self.methods[0]].count:
                self._close(kind, complete=False)

    def summary(self) -> dict[str, Any]:
        return {"evaluated": self.evaluated, "from_time": self.from_time, "late_for_time_window": self.late,
                "all": {m: self.totals[m].compute() for m in self.methods}}

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly (for the trainer's checkpoint): plain numbers only."""
        def pack(group: dict[str, RankingMetrics]) -> dict[str, Any]:
            return {m: {"count": r.count, "sums": dict(r.sums)} for m, r in group.items()}

        return {"evaluated": self.evaluated, "late": self.late, "open": dict(self.open),
                "windows": {k: pack(v) for k, v in self.windows.items()}, "totals": pack(self.totals)}

    def load(self, state: dict[str, Any]) -> None:
        def unpack(group: dict[str, RankingMetrics], saved: dict[str, Any]) -> None:
            for m, r in group.items():
                r.count, r.sums = int(saved[m]["count"]), dict(saved[m]["sums"])

        self.evaluated, self.late, self.open = int(state["evaluated"]), int(state["late"]), dict(state["open"])
        for k in KINDS:
            unpack(self.windows[k], state["windows"][k])
        unpack(self.totals, state["totals"])


def plot_prequential(csv_path: Path, out_png: Path, metrics: tuple[str, ...] = ("recall@10", "ndcg@10", "mrr")
                     ) -> Path | None:
    """One panel per (window kind, metric): the metric of every method over the windows. ``None`` if no rows."""
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return None
    frame = pd.read_csv(csv_path)
    kinds = [k for k in KINDS if (frame["window"] == k).any()]
    if not kinds:
        return None
    fig, axes = plt.subplots(len(kinds), len(metrics), figsize=(4.2 * len(metrics), 3.4 * len(kinds)), squeeze=False)
    for row, kind in enumerate(kinds):
        part = frame[frame["window"] == kind]
        x_label = "evaluated events" if kind == "events" else "event time (days)"
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            for method, lines in part.groupby("method", sort=False):
                x = lines["end"] if kind == "events" else lines["start"] / 86400.0
                ax.plot(x, lines[metric], marker=".", label=method)
            ax.set(title=f"{metric} per {kind} window", xlabel=x_label)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
