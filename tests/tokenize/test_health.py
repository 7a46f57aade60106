"""Health numbers against hand-computed values; the plots are written."""
import numpy as np
import pytest

from genrec.tokenize.health import (health_report, level_usage, plot_health, plot_training, prefix_histogram,
                                    reconstruction_error)


def test_level_usage_hand_checked():
    usage = level_usage(np.array([0, 0, 1, 1]), size=4)  # two of four codes, evenly: 1 bit of 2
    assert usage == {"codes": 4, "used": 2, "usage": 0.5, "entropy_bits": 1.0, "normalized_entropy": 0.5,
                     "perplexity": 2.0, "max_items_per_code": 2}
    skewed = level_usage(np.array([0, 0, 0, 1]), size=2)
    assert skewed["entropy_bits"] == pytest.approx(-(0.75 * np.log2(0.75) + 0.25 * np.log2(0.25)), abs=1e-4)


def test_prefix_histogram_hand_checked():
    codes = np.array([[0, 0], [0, 1], [0, 2], [1, 0]])
    first, full = prefix_histogram(codes)
    assert first == {"length": 1, "prefixes": 2, "mean_items": 2.0, "max_items": 3, "histogram": [[1, 1], [3, 1]]}
    assert full["prefixes"] == 4 and full["histogram"] == [[1, 4]]


def test_reconstruction_error_hand_checked():
    x = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert reconstruction_error(x, x) == {"mse": 0.0, "relative": 0.0}
    assert reconstruction_error(x, np.zeros_like(x)) == {"mse": 1.0, "relative": 1.0}  # the mean item


def test_report_separates_semantic_and_collision_levels_and_plots(tmp_path):
    raw = np.array([[0, 1], [0, 1], [1, 0]])
    final = np.array([[0, 1, 0], [0, 1, 1], [1, 0, 0]])
    x = np.eye(3, dtype=np.float32)
    report = health_report(raw, final, [2, 2, 2], x, x)
    assert [level["kind"] for level in report["levels"]] == ["semantic", "semantic", "collision"]
    assert report["min_semantic_usage"] == 1.0
    assert report["collisions_before"]["colliding_items"] == 2 and report["collisions_after"]["colliding_items"] == 0
    assert plot_health(final, [2, 2, 2], tmp_path / "health.png").stat().st_size > 1000
    history = [{"epoch": e, "recon_loss": 1.0 / (e + 1), "quant_loss": 0.5, "dead_codes": 3 - e} for e in range(3)]
    assert plot_training(history, tmp_path / "training.png").stat().st_size > 1000
