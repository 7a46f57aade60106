"""PNG of the training and validation curves, from the CSV logger's metrics.csv."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def plot_curves(metrics_csv: Path, out_png: Path, val_metrics: tuple[str, ...] = ("ndcg@10", "recall@10")) -> Path:
    """Left: training loss per epoch; right: validation metrics per epoch. Returns ``out_png``."""
    frame = pd.read_csv(metrics_csv)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    if "train/loss_epoch" in frame:
        train = frame.dropna(subset=["train/loss_epoch"])
        left.plot(train["epoch"], train["train/loss_epoch"], marker="o")
    left.set(title="training loss", xlabel="epoch", ylabel="loss")
    for name in val_metrics:
        column = f"val/{name}"
        if column in frame:
            val = frame.dropna(subset=[column])
            right.plot(val["epoch"], val[column], marker="o", label=name)
    right.set(title="validation", xlabel="epoch")
    right.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
