"""Draw docs/flow.svg, the picture of genrec's flow shown in README.md: python docs/flow.py

The batch path (data -> semantic IDs -> sequence model -> training -> evaluation -> export) on top, the streaming
path (genrec-stream) below it. Written deterministically (no date, fixed IDs): a rerun gives the same file.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent / "flow.svg"
BATCH, STREAM, EDGE = "#e8f0fb", "#fdf0e2", "#44546a"

STEP, WIDTH, HEIGHT = 2.15, 1.95, 1.25  # box i of a row starts at column(i); sizes in axis units


def column(i: int) -> float:
    """The left edge of the i-th box of a row."""
    return 0.1 + i * STEP


#: (x, y, width, title, command, lines) of every box; y is the box's bottom edge.
BOXES = {
    "data": (column(0), 2.4, WIDTH, "data", "genrec/data",
             ["MovieLens, Amazon,", "event logs, synthetic;", "splits, side features"]),
    "sid": (column(1), 2.4, WIDTH, "semantic IDs", "genrec-tokenize",
            ["item content ->", "RQ-VAE / k-means ->", "SID table"]),
    "model": (column(2), 2.4, WIDTH, "sequence model", "genrec/models",
              ["SASRec, HSTU;", "TIGER, SID generator", "(on semantic IDs)"]),
    "train": (column(3), 2.4, WIDTH, "training", "genrec-train",
              ["exact resume,", "sharded tables, FSDP,", "post-training stages"]),
    "eval": (column(4), 2.4, WIDTH, "evaluation", "genrec-eval",
             ["full-corpus ranking", "against baselines;", "genrec-report: HTML"]),
    "export": (column(5), 2.4, WIDTH, "export / serving", "genrec-export",
               ["faiss indexes,", "user tower, manifest;", "SID table"]),
    "events": (column(0), 0.25, WIDTH, "event stream", "source=...",
               ["files: event files", "redis: Redis Streams", "replay: a dataset"]),
    "stream": (column(2), 0.25, STEP + WIDTH, "online training", "genrec-stream",
               ["ranks each event, then trains on it, exactly once;",
                "dynamic item table: rows by raw ID, kept on SSD"]),
    "hot": (column(5), 0.25, WIDTH, "hot exports", "export.every_events",
            ["versioned exports", "with row deltas"]),
}


def box(ax, x, y, width, title, command, lines, colour):
    """A rounded box: a bold title, the command or package in monospace, then short lines."""
    ax.add_patch(FancyBboxPatch((x, y), width, HEIGHT, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=colour, edgecolor=EDGE, linewidth=1.2))
    middle = x + width / 2
    ax.text(middle, y + HEIGHT - 0.18, title, ha="center", va="center", fontsize=11, fontweight="bold")
    ax.text(middle, y + HEIGHT - 0.42, command, ha="center", va="center", fontsize=8.5, family="monospace",
            color="#1f4e99")
    for i, line in enumerate(lines):
        ax.text(middle, y + HEIGHT - 0.66 - 0.19 * i, line, ha="center", va="center", fontsize=8)


def arrow(ax, start, end, label=None, bend=0.0, label_at=None):
    """An arrow from ``start`` to ``end`` (curved by ``bend``), with an optional italic label at ``label_at``."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, linewidth=1.3, color=EDGE,
                                 connectionstyle=f"arc3,rad={bend}", shrinkA=2, shrinkB=2))
    if label:
        ax.text(*label_at, label, ha="center", va="center", fontsize=8, style="italic", color=EDGE)


def main() -> None:
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "genrec-flow"})
    fig, ax = plt.subplots(figsize=(13, 4.6))
    ax.set_xlim(0, 13)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    for name, (x, y, width, title, command, lines) in BOXES.items():
        box(ax, x, y, width, title, command, lines, STREAM if name in ("events", "stream", "hot") else BATCH)
    top, middle = 2.4 + HEIGHT, 2.4 + HEIGHT / 2
    order = ["data", "sid", "model", "train", "eval", "export"]
    for left, right in zip(order, order[1:]):
        x = BOXES[left][0] + BOXES[left][2]
        arrow(ax, (x, middle), (BOXES[right][0], middle))
    data, model, export = (BOXES[n][0] + WIDTH / 2 for n in ("data", "model", "export"))
    arrow(ax, (data, top), (model, top), "item IDs (SASRec, HSTU)", bend=-0.25, label_at=((data + model) / 2, 4.42))
    low = 0.25 + HEIGHT / 2
    arrow(ax, (column(0) + WIDTH, low), (column(2), low))
    arrow(ax, (column(2) + STEP + WIDTH, low), (column(5), low))
    arrow(ax, (model, 2.4), (model, 0.25 + HEIGHT), "same models", label_at=(model + 0.55, 2.05))
    arrow(ax, (export, 0.25 + HEIGHT), (export, 2.4), "same files", label_at=(export + 0.5, 2.05))
    ax.text(0.1, 1.98, "streaming path", fontsize=9, fontweight="bold", color="#9a5b13")
    ax.text(0.1, 4.3, "batch path", fontsize=9, fontweight="bold", color="#1f4e99")
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    print(OUT)


if __name__ == "__main__":
    main()
