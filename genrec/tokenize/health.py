"""Health of a semantic-ID table: code usage and entropy per level, collisions, reconstruction error, and how
many items share each prefix. ``health_report`` gives the numbers for metrics.json, ``plot_health`` the PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from genrec.tokenize.collisions import collision_stats  # noqa: E402


def level_usage(codes: np.ndarray, size: int) -> dict[str, float]:
    """Usage of one level's ``size`` codes by ``codes (N,)``: share of codes used, entropy of the code
    distribution in bits, that entropy over its maximum ``log2(size)``, and perplexity ``2**entropy``."""
    counts = np.bincount(codes, minlength=size)
    p = counts[counts > 0] / len(codes)
    entropy = float(-(p * np.log2(p)).sum())
    return {"codes": size, "used": int((counts > 0).sum()), "usage": float((counts > 0).mean()),
            "entropy_bits": round(entropy, 4), "normalized_entropy": round(entropy / np.log2(size), 4) if size > 1
            else 1.0, "perplexity": round(2.0 ** entropy, 2), "max_items_per_code": int(counts.max())}


def prefix_counts(codes: np.ndarray, length: int) -> np.ndarray:
    """Number of items under each distinct prefix of ``length`` codes."""
    return np.unique(codes[:, :length], axis=0, return_counts=True)[1]


def prefix_histogram(codes: np.ndarray) -> list[dict[str, Any]]:
    """Per prefix length ``1..L``: distinct prefixes, mean and max items per prefix, and the histogram as
    ``[[items_per_prefix, number_of_prefixes], ...]``."""
    out = []
    for length in range(1, codes.shape[1] + 1):
        counts = prefix_counts(codes, length)
        sizes, freq = np.unique(counts, return_counts=True)
        out.append({"length": length, "prefixes": int(len(counts)), "mean_items": round(float(counts.mean()), 3),
                    "max_items": int(counts.max()), "histogram": [[int(s), int(f)] for s, f in zip(sizes, freq)]})
    return out


def reconstruction_error(x: np.ndarray, x_hat: np.ndarray) -> dict[str, float]:
    """``mse``: mean over items of ``||x - x_hat||^2``; ``relative``: total squared error over the total
    variance of ``x`` (0 = perfect, 1 = no better than the mean item)."""
    error = ((x - x_hat) ** 2).sum(axis=1)
    variance = ((x - x.mean(axis=0)) ** 2).sum()
    return {"mse": round(float(error.mean()), 6), "relative": round(float(error.sum() / variance), 6)}


def health_report(raw_codes: np.ndarray, codes: np.ndarray, codebook_sizes: list[int], x: np.ndarray,
                  x_hat: np.ndarray) -> dict[str, Any]:
    """All health numbers of one run.

    Args:
        raw_codes: ``(N, L)`` the quantizer's codes before collision handling.
        codes: ``(N, L')`` the final unique codes (``L' = L + 1`` with an extra level).
        codebook_sizes: ``(L',)`` sizes of the final levels.
        x / x_hat: ``(N, D)`` embeddings and their reconstruction from the codes.
    """
    semantic = raw_codes.shape[1]
    levels = [level_usage(codes[:, level], size) | {"level": level, "kind": "semantic" if level < semantic
                                                     else "collision"}
              for level, size in enumerate(codebook_sizes)]
    return {
        "items": int(len(codes)),
        "levels": levels,
        "min_semantic_usage": min(level["usage"] for level in levels[:semantic]),
        "collisions_before": collision_stats(raw_codes),
        "collisions_after": collision_stats(codes),
        "reconstruction": reconstruction_error(x, x_hat),
        "prefixes": prefix_histogram(codes),
    }


def plot_health(codes: np.ndarray, codebook_sizes: list[int], out_png: Path) -> Path:
    """Left: items per code at each level, codes sorted by use (flat = even use). Right: histogram of items per
    prefix for each prefix length."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for level, size in enumerate(codebook_sizes):
        counts = np.sort(np.bincount(codes[:, level], minlength=size))[::-1]
        left.plot(np.arange(1, size + 1) / size, counts, label=f"level {level} ({(counts > 0).mean():.0%} used)")
    left.set(title="items per code (codes sorted by use)", xlabel="code rank / codebook size", ylabel="items",
             yscale="symlog")
    left.legend(fontsize=8)
    for length in range(1, codes.shape[1] + 1):
        sizes, freq = np.unique(prefix_counts(codes, length), return_counts=True)
        right.plot(sizes, freq, marker=".", label=f"prefix length {length}")
    right.set(title="items per prefix", xlabel="items sharing the prefix", ylabel="prefixes", xscale="log",
              yscale="log")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def plot_training(history: list[dict[str, float]], out_png: Path) -> Path:
    """RQ-VAE losses and dead codes per epoch."""
    epochs = [h["epoch"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(epochs, [h["recon_loss"] for h in history], label="reconstruction")
    left.plot(epochs, [h["quant_loss"] for h in history], label="quantisation")
    left.set(title="RQ-VAE training loss", xlabel="epoch", yscale="log")
    left.legend()
    right.plot(epochs, [h["dead_codes"] for h in history])
    right.set(title="codes unused in the epoch (reset)", xlabel="epoch")
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
