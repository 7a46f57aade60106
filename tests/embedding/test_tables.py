"""EmbeddingTables and ItemEmbedding (unsharded): lookups equal weight rows; bad IDs raise or hash by config."""
import pytest
import torch
from torchrec import KeyedJaggedTensor

from genrec.embedding import EmbeddingTables, ItemEmbedding, TableConfig


def _tables(out_of_range: str = "error") -> EmbeddingTables:
    torch.manual_seed(0)
    return EmbeddingTables([TableConfig("item_table", 10, 4, ("item", "target"), out_of_range=out_of_range),
                            TableConfig("sid_level_0", 6, 4, ("sid_0",))])


def _kjt(item, target, sid, keys=("item", "target", "sid_0")):
    """One bag per feature (stride 1)."""
    parts = {"item": item, "target": target, "sid_0": sid}
    return KeyedJaggedTensor.from_lengths_sync(keys=list(keys), values=torch.tensor([i for k in keys for i in parts[k]]),
                                               lengths=torch.tensor([len(parts[k]) for k in keys]))


def test_each_feature_reads_the_rows_of_its_table():
    tables = _tables()
    out = tables(_kjt([1, 9, 1], [0], [5, 2]))
    items, sids = tables.weight("item_table"), tables.weight("sid_level_0")
    assert torch.equal(out["item"], items[[1, 9, 1]]) and torch.equal(out["target"], items[[0]])
    assert torch.equal(out["sid_0"], sids[[5, 2]])


@pytest.mark.parametrize("bad", [10, -1])
def test_out_of_range_id_names_the_feature_and_table(bad):
    with pytest.raises(ValueError, match=rf"feature 'target': IDs must lie in \[0, 10\) \(table 'item_table'\), got values "
                                         rf"in \[{min(bad, 2)}, {max(bad, 2)}\]"):
        _tables()(_kjt([1], [2, bad], [0]))


def test_hashing_maps_an_id_to_id_mod_rows_for_that_table_only():
    tables = _tables(out_of_range="hash")
    out = tables(_kjt([13, 3], [-1], [1]))
    assert torch.equal(out["item"], tables.weight("item_table")[[3, 3]])
    assert torch.equal(out["target"], tables.weight("item_table")[[9]])
    with pytest.raises(ValueError, match="feature 'sid_0'"):  # the SID table still raises
        tables(_kjt([1], [1], [6]))


def test_features_must_come_in_the_collection_order():
    with pytest.raises(ValueError, match=r"expected features \['item', 'target', 'sid_0'\]"):
        _tables()(_kjt([1], [1], [1], keys=("target", "item", "sid_0")))


def test_config_errors():
    with pytest.raises(ValueError, match="share one width"):
        EmbeddingTables([TableConfig("a", 5, 4, ("x",)), TableConfig("b", 5, 8, ("y",))])
    with pytest.raises(ValueError, match="unique"):
        EmbeddingTables([TableConfig("a", 5, 4, ("x",)), TableConfig("b", 5, 4, ("x",))])
    with pytest.raises(ValueError, match="clashes with torch.nn.ModuleDict.items"):
        TableConfig("items", 5, 4, ("x",))
    with pytest.raises(ValueError, match="out_of_range must be one of"):
        TableConfig("a", 5, 4, ("x",), out_of_range="clip")


def test_item_embedding_lookups_agree_with_its_table():
    torch.manual_seed(0)
    emb = ItemEmbedding(num_items=12, dim=8)
    jagged = KeyedJaggedTensor.from_offsets_sync(keys=["item"], values=torch.tensor([3, 4, 12, 1]),
                                                 offsets=torch.tensor([0, 3, 4]))
    table = emb.table()
    assert table.shape == (13, 8)
    assert torch.equal(emb(jagged), table[[3, 4, 12, 1]])
    ids = torch.tensor([[2, 7], [7, 0]])
    assert torch.equal(emb.lookup(ids), table[ids])
    inputs, items = emb.forward_with_items(jagged, ids)
    assert torch.equal(inputs, table[[3, 4, 12, 1]]) and torch.equal(items, table[ids])
