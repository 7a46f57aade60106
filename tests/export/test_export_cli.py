"""genrec-export refuses a tower that fails its parity check and a config naming a missing index."""
import pytest
import torch

from genrec.errors import ConfigError
from genrec.export import cli
from genrec.export.tower import export_tower
from tests.export.conftest import export_config


def test_a_failed_parity_check_stops_the_export_before_the_manifest(tiny_run, tmp_path, monkeypatch):
    def drifted(tower, num_items):  # an exported tower whose item table is slightly off
        tower.item_table += 1e-2 * torch.randn_like(tower.item_table)  # (a constant shift would cancel in LayerNorm)
        return export_tower(tower, num_items)

    monkeypatch.setattr(cli, "export_tower", drifted)
    cfg = export_config(tiny_run[0], tmp_path / "export", "onnx=false")
    with pytest.raises(cli.ParityError, match=r"user_tower.pt2: exported tower differs .*max \|diff\| = .*"
                                              r"parity.atol=1e-05"):
        cli.run(cfg)
    assert (tmp_path / "export" / "user_tower.pt2").exists()
    assert not (tmp_path / "export" / "manifest.json").exists()


def test_default_index_must_be_exported(tiny_run, tmp_path):
    cfg = export_config(tiny_run[0], tmp_path / "export", "~indexes.hnsw")
    with pytest.raises(ConfigError, match=r"default_index: 'hnsw' is not among indexes \['flat', 'ivfpq'\]"):
        cli.run(cfg)
