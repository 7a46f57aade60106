"""The MovieLens-1M/20M HSTU presets run end to end once the user supplies the GroupLens files (here: small files
in the GroupLens formats, written to a temporary $GENREC_DATA_DIR)."""
import numpy as np
import pytest

from genrec import train as train_entry
from genrec.conf import compose_config


def _write_grouplens(folder, fmt: str, users: int = 40, movies: int = 30, per_user: int = 12) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    rows = [(u, int(m), int(rng.integers(1, 6)), 978300000 + 3600 * u + 60 * i)
            for u in range(1, users + 1) for i, m in enumerate(rng.choice(np.arange(1, movies + 1), per_user, False))]
    if fmt == "dat":  # MovieLens-1M: ratings.dat / movies.dat with '::'
        (folder / "ratings.dat").write_text("".join(f"{u}::{m}::{r}::{t}\n" for u, m, r, t in rows))
        (folder / "movies.dat").write_text("".join(f"{m}::Movie {m} (2000)::Drama|Comedy\n"
                                                   for m in range(1, movies + 1)), encoding="latin-1")
    else:  # MovieLens-20M: ratings.csv / movies.csv with headers
        (folder / "ratings.csv").write_text("userId,movieId,rating,timestamp\n"
                                            + "".join(f"{u},{m},{r}.0,{t}\n" for u, m, r, t in rows))
        (folder / "movies.csv").write_text("movieId,title,genres\n" + "".join(
            f"{m},Movie {m} (2000),Drama|Comedy\n" for m in range(1, movies + 1)))


@pytest.mark.parametrize("experiment,folder,fmt", [("ml1m_hstu", "ml-1m", "dat"), ("ml20m_hstu_large", "ml-20m", "csv")])
def test_movielens_presets_train_on_user_supplied_files(experiment, folder, fmt, tmp_path, monkeypatch):
    _write_grouplens(tmp_path / "data" / folder, fmt)
    monkeypatch.setenv("GENREC_DATA_DIR", str(tmp_path / "data"))
    cfg = compose_config("train", overrides=[f"experiment={experiment}", "trainer.max_epochs=1",
                                             "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false",
                                             f"data.cache_dir={tmp_path / 'cache'}"])
    metrics = train_entry.run(cfg, tmp_path / "run")
    assert metrics["dataset"]["users"] == 40 and metrics["dataset"]["has_timestamps"]
    assert metrics["model"] == cfg.model.name and 0 <= metrics["metrics"]["test"]["ndcg@10"] <= 1
