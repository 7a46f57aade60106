"""genrec-export refuses a tower that fails its parity check and a config naming a missing index; its quantised
tables report memory and retrieval against float32; an HSTU run exports with its time inputs."""
import pytest
import torch

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.errors import ConfigError
from genrec.export import cli, retrieval
from genrec.export.tower import export_tower
from tests.conftest import TINY_RUN, load_script
from tests.export.conftest import export_config


def test_a_failed_parity_check_stops_the_export_before_the_manifest(tiny_run, tmp_path, monkeypatch):
    def drifted(tower, num_items):  # an exported tower whose item table is slightly off
        weight = tower.items.weight  # (a constant shift would cancel in LayerNorm)
        weight.data += 1e-2 * torch.randn_like(weight)
        return export_tower(tower, num_items)

    monkeypatch.setattr(retrieval, "export_tower", drifted)
    cfg = export_config(tiny_run[0], tmp_path / "export", "onnx=false")
    with pytest.raises(retrieval.ParityError, match=r"user_tower.pt2: exported tower differs .*max \|diff\| = .*"
                                                    r"atol=1e-05"):
        cli.run(cfg)
    assert (tmp_path / "export" / "user_tower.pt2").exists()
    assert not (tmp_path / "export" / "manifest.json").exists()


def test_default_index_must_be_exported(tiny_run, tmp_path):
    cfg = export_config(tiny_run[0], tmp_path / "export", "~indexes.hnsw")
    with pytest.raises(ConfigError, match=r"default_index: 'hnsw' is not among indexes \['flat', 'ivfpq'\]"):
        cli.run(cfg)


def test_quantized_tables_report_their_memory_and_retrieval(exported, tiny_run):
    _, manifest = exported
    figures = manifest["quantization"]
    # float32 through the export's evaluation is the run's own test result
    assert figures["fp32"]["test_metrics"] == pytest.approx(tiny_run[1]["metrics"]["test"], abs=1e-6)
    rows, dim = manifest["artifacts"]["item_vectors"]["shape"]
    assert figures["fp16"]["table_bytes"] >= rows * dim * 2 and figures["fp16"]["bytes_vs_fp32"] < 0.55
    assert figures["int8"]["table_bytes"] >= rows * (dim + 4) and figures["int8"]["bytes_vs_fp32"] < 0.5
    assert figures["fp16"]["recall_at_10_vs_fp32"] > 0.95 and figures["int8"]["recall_at_10_vs_fp32"] > 0.8
    for dtype in ("fp16", "int8"):
        assert figures[dtype]["tower_max_abs_diff"] < 0.1
        assert {"item_vectors_" + dtype, "user_tower_" + dtype} <= set(manifest["artifacts"])


def test_a_quantize_entry_other_than_fp16_or_int8_is_refused(tiny_run, tmp_path):
    cfg = export_config(tiny_run[0], tmp_path / "export", "quantize=[int4]")
    with pytest.raises(ConfigError, match=r"quantize: got \['int4'\], expected a list of fp16 and/or int8"):
        cli.run(cfg)


def test_an_hstu_run_exports_with_time_and_serves_genrec_ranking(tmp_path_factory):
    """HSTU with its time bias: the tower takes times, reloaded it matches genrec on every test user, and served by
    examples/retrieval_example.py (given each history's times and the request's) it gives genrec's own top 10."""
    tmp = tmp_path_factory.mktemp("hstu_run")
    cfg = compose_config("train", overrides=TINY_RUN + ["model=hstu", "model.encoder.num_layers=1",
                                                        f"data.cache_dir={tmp / 'cache'}"])
    train_entry.run(cfg, tmp / "run")
    manifest = cli.run(export_config(tmp / "run", tmp / "export", "quantize=[int8]", "~indexes.ivfpq",
                                  "onnx=false"))  # (ONNX with time: tests/export/test_tower.py)
    tower = manifest["artifacts"]["user_tower"]
    assert [i["name"] for i in tower["inputs"]] == ["item_ids", "offsets", "timestamps", "query_time"]
    assert tower["parity"]["passed"] and tower["parity"]["users"] == manifest["source"]["dataset"]["users"]
    assert manifest["quantization"]["int8"]["recall_at_10_vs_fp32"] > 0.8
    parity = load_script("scripts/check_export.py").check(tmp / "export")["indexes"]["index_flat"]["parity"]
    assert parity["users"] == manifest["source"]["dataset"]["users"] and parity["other_differences"] == 0
    retriever = load_script("examples/retrieval_example.py").ExportedRetriever(tmp / "export", "index_flat")
    with pytest.raises(ValueError, match="needs every history item's time and the request's time"):
        retriever.encode([[1, 2]])
    top = retriever.recommend(retriever.raw_ids[1:3], 5, times=[100, 200], query_time=300)
    assert len(top) == 5 and not {item for item, _ in top} & set(retriever.raw_ids[1:3])
