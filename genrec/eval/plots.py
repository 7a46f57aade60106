"""PNG of an evaluation: overall metrics and each breakdown, one bar per model or baseline."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _bars(ax, groups: list[str], series: dict[str, list[float]], title: str, ylabel: str) -> None:
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, np.nan_to_num(values), width, label=name)
    ax.set_xticks(x, groups, fontsize=8)
    ax.set(title=title, ylabel=ylabel)


def plot_evaluation(rows: dict[str, dict], metric: str, overall_metrics: list[str], out_png: Path) -> Path:
    """``rows``: ``{name: {"metrics": {"test": {...}}, "breakdowns": {breakdown: {group: {"users", metric}}}}}``
    (models first, then baselines). Left panel: ``overall_metrics`` on the test split; then one panel per
    breakdown with ``metric`` per group (tick labels carry the group's user count). Returns ``out_png``."""
    first = next(iter(rows.values()))["breakdowns"]
    fig, axes = plt.subplots(1, 1 + len(first), figsize=(5 * (1 + len(first)), 4))
    _bars(axes[0], overall_metrics, {n: [r["metrics"]["test"][m] for m in overall_metrics] for n, r in rows.items()},
          "test, all users", "value")
    for ax, (breakdown, groups) in zip(axes[1:], first.items()):
        labels = [f"{g}\n(n={v['users']})" for g, v in groups.items()]
        _bars(ax, labels, {n: [r["breakdowns"][breakdown][g][metric] for g in groups] for n, r in rows.items()},
              f"test {metric} by {breakdown.replace('_', ' ')}", metric)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
