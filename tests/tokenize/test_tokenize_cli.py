"""End to end: genrec-tokenize writes a loadable SID table with its health report; bad input is one line."""
import json

import numpy as np
import pytest

from genrec.tokenize import SIDTable
from genrec.tokenize import cli
from genrec.conf import compose_config
from tests.cli_runner import run_entry

TINY_DATA = ["data.reader.num_users=300", "data.reader.num_items=150", "data.reader.num_clusters=6",
             "encoder=categorical", "threads=1"]


def _run(tmp_path, overrides):
    cfg = compose_config("tokenize", overrides=TINY_DATA + [f"data.cache_dir={tmp_path / 'cache'}"] + overrides)
    return cfg, cli.run(cfg, tmp_path / "run")


# rqvae: 18 distinct category + brand vectors for ~150 items, so collisions are certain; balanced residual
# k-means keeps <= ceil(N/16) items per first-level code, so a free last-level code always exists
@pytest.mark.parametrize("tokenizer, collisions, fields, size, first", [
    ("rkmeans_balanced", "nearest_free", "[categories,brand,title]", 16, None),
    ("rqvae", "extra_level", "[categories,brand]", 8, None),
    ("rqvae", "extra_level", "[categories,brand]", 8, 12)])  # a larger first codebook
def test_run_writes_a_loadable_table_and_health_report(tmp_path, tokenizer, collisions, fields, size, first):
    overrides = [f"tokenizer={tokenizer}", f"collisions={collisions}", f"encoder.fields={fields}",
                 f"tokenizer.codebook_size={size}", "tokenizer.num_levels=2"]
    overrides += [f"tokenizer.first_codebook_size={first}"] if first else []
    if tokenizer == "rqvae":
        overrides += ["tokenizer.epochs=5", "tokenizer.hidden_dims=[32]", "tokenizer.latent_dim=8",
                      "tokenizer.batch_size=64"]
    cfg, metrics = _run(tmp_path, overrides)
    run_dir = tmp_path / "run"
    for name in ("config.yaml", "metrics.json", "health.png", "sid_table.parquet", "sid_table.safetensors"):
        assert (run_dir / name).exists(), name
    assert (run_dir / "training.png").exists() == (tokenizer == "rqvae")
    table = SIDTable.load(run_dir)
    assert table.num_items == metrics["dataset"]["items"] > 100
    np.testing.assert_array_equal(table.item_of(table.codes[1:]), np.arange(1, table.num_items + 1))
    assert table.config["tokenizer"]["name"] == tokenizer and table.config["collisions"] == collisions
    assert list(table.codebook_sizes[:2]) == [first or size, size] and table.codes[1:, 0].max() < (first or size)
    health = json.loads((run_dir / "metrics.json").read_text())["health"]
    assert health["collisions_after"]["colliding_items"] == 0
    if tokenizer == "rqvae":
        assert health["collisions_before"]["colliding_items"] > 0
    assert [level["kind"] for level in health["levels"]] == ["semantic", "semantic"] + (
        ["collision"] if collisions == "extra_level" else [])
    assert table.num_levels == len(health["levels"]) and table.semantic_levels == 2
    assert health["reconstruction"]["relative"] < (1 if tokenizer != "rqvae" else 10)  # rqvae: 5 epochs only
    assert health["prefixes"][-1]["max_items"] == 1 and metrics["commit"]


def test_cli_reports_bad_embedding_file_in_one_line(tmp_path):
    bad = tmp_path / "emb.npy"
    np.save(bad, np.zeros((7, 4), dtype=np.float32))
    proc = run_entry("genrec.tokenize", *TINY_DATA[:3], "encoder=file", f"encoder.path={bad}",
                     f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"genrec-tokenize: error: {bad}: has shape (7, 4); expected (" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_same_seed_same_table(tmp_path):
    overrides = ["tokenizer=rqvae", "tokenizer.codebook_size=8", "tokenizer.num_levels=2", "tokenizer.epochs=3",
                 "tokenizer.hidden_dims=[32]", "tokenizer.latent_dim=8", "encoder.fields=[categories,brand,title]"]
    hashes = [_run(tmp_path / f"run{i}", overrides + [f"seed={seed}"])[1]["sid_table"]["content_hash"]
              for i, seed in enumerate((0, 0, 1))]
    assert hashes[0] == hashes[1] != hashes[2]


def test_level_order_puts_the_quantizers_levels_in_that_order(tmp_path):
    """``level_order=[1,0]``: the same fit (same seed) with its two semantic levels swapped (and the codebook sizes
    with them), the collision level last; an order that is no permutation is refused naming the key."""
    overrides = ["tokenizer=rqvae", "tokenizer.codebook_size=8", "tokenizer.first_codebook_size=12",
                 "tokenizer.num_levels=2", "tokenizer.epochs=3", "tokenizer.hidden_dims=[32]",
                 "tokenizer.latent_dim=8", "encoder.fields=[categories,brand,title]"]
    _run(tmp_path / "plain", overrides)
    _run(tmp_path / "swapped", overrides + ["level_order=[1,0]"])
    plain, swapped = SIDTable.load(tmp_path / "plain" / "run"), SIDTable.load(tmp_path / "swapped" / "run")
    assert list(plain.codebook_sizes[:2]) == [12, 8] and list(swapped.codebook_sizes[:2]) == [8, 12]
    np.testing.assert_array_equal(swapped.codes[1:], plain.codes[1:, [1, 0, 2]])
    assert swapped.config["level_order"] == [1, 0] and plain.config["level_order"] == [0, 1]
    with pytest.raises(Exception, match=r"level_order: got \[0, 0\]"):
        _run(tmp_path / "bad", overrides + ["level_order=[0,0]"])
