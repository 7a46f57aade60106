"""Sharding plans from config (built for 2 ranks without starting processes) and their printed summary."""
import pytest
import torch
from omegaconf import OmegaConf

from genrec.dist import ShardingConfig, build_plan, describe_plan
from genrec.embedding import EmbeddingTables, TableConfig


def _module() -> torch.nn.Module:
    return torch.nn.ModuleDict({"emb": EmbeddingTables([TableConfig("item_table", 121, 16, ("item",)),
                                                        TableConfig("sid_table", 40, 16, ("sid",))])})


def _plan(cfg: ShardingConfig, world: int = 2):
    module = _module()
    return build_plan(module, cfg, cfg.sharder("cpu"), world, world, "cpu"), module


def _shards(plan, table):
    spec = plan.plan["emb.collection"][table]
    return spec.sharding_type, spec.compute_kernel, [(s.placement.rank(), tuple(s.shard_sizes))
                                                     for s in spec.sharding_spec.shards]


def test_per_table_types_with_one_override():
    plan, _ = _plan(ShardingConfig(type="row_wise", tables={"sid_table": "table_wise"}))
    assert _shards(plan, "item_table") == ("row_wise", "fused", [(0, (61, 16)), (1, (60, 16))])
    assert _shards(plan, "sid_table") == ("table_wise", "fused", [(1, (40, 16))])  # 2nd table -> rank 1


def test_column_wise_splits_columns_over_all_ranks():
    plan, _ = _plan(ShardingConfig(type="column_wise"))
    assert _shards(plan, "item_table") == ("column_wise", "fused", [(0, (121, 8)), (1, (121, 8))])
    with pytest.raises(ValueError, match="dim 16, not divisible by the 3 processes"):
        _plan(ShardingConfig(type="column_wise"), world=3)


def test_printed_plan_with_memory_per_rank_by_hand():
    cfg = ShardingConfig(type="row_wise", tables={"sid_table": "table_wise"})
    plan, module = _plan(cfg)
    text = describe_plan(plan, module, "rowwise_adagrad", 2)
    assert "item_table" in text and "0: 61 x 16, 1: 60 x 16" in text and "1: 40 x 16" in text
    # rank 0: 61 x 16 floats + 61 row states; rank 1: (60 + 40) x 16 floats + 100 row states
    assert f"0: {61 * 16 * 4 / 2**20:.3f} MiB + {61 * 4 / 2**20:.3f} MiB" in text
    assert f"1: {100 * 16 * 4 / 2**20:.3f} MiB + {100 * 4 / 2**20:.3f} MiB" in text


def test_planner_under_constraints_picks_an_allowed_type():
    cfg = ShardingConfig(type="planner", constraints={"item_table": {"sharding_types": ["column_wise"]},
                                                      "sid_table": {"sharding_types": ["table_wise"]}})
    plan, _ = _plan(cfg)
    assert _shards(plan, "item_table")[:2] == ("column_wise", "fused")
    assert _shards(plan, "sid_table")[:2] == ("table_wise", "fused")


@pytest.mark.parametrize("overrides,message", [
    ({"type": "table_row_wise"}, r"sharding.type must be one of .* got 'table_row_wise'"),
    ({"type": "row_wise", "tables": {"item_table": "data_parallel"}}, r"sharding.tables.item_table must be one of"),
    ({"type": "row_wise", "ranks": 3}, r"unknown sharding keys \['ranks'\]"),
])
def test_config_errors_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        ShardingConfig.from_config(OmegaConf.create(overrides))


def test_unknown_table_and_cpu_optimizer_errors():
    with pytest.raises(ValueError, match=r"sharding.tables names unknown tables \['items'\]"):
        _plan(ShardingConfig(type="row_wise", tables={"items": "row_wise"}))
    with pytest.raises(ValueError, match="sharding.optimizer.name='adam' has no CPU kernel"):
        ShardingConfig.from_config({"type": "row_wise", "optimizer": {"name": "adam"}}).sharder("cpu")


def test_widths_fbgemm_cannot_shard_are_refused_naming_the_table():
    """FBGEMM's fused kernels assert on a width that is not a multiple of 4 (the hstu preset's 50, for one)."""
    module = torch.nn.ModuleDict({"emb": EmbeddingTables([TableConfig("item_table", 121, 50, ("item",))])})
    cfg = ShardingConfig(type="row_wise")
    with pytest.raises(ValueError, match="table 'item_table' has dim 50; .* multiple of 4 \\(e.g. model.dim=48\\)"):
        build_plan(module, cfg, cfg.sharder("cpu"), 2, 2, "cpu")
    module = torch.nn.ModuleDict({"emb": EmbeddingTables([TableConfig("item_table", 121, 12, ("item",))])})
    with pytest.raises(ValueError, match="shards 6 wide"):
        build_plan(module, ShardingConfig(type="column_wise"), cfg.sharder("cpu"), 2, 2, "cpu")
