"""Sharded embedding tables and hybrid data/model-parallel training (TorchRec DistributedModelParallel)."""
from genrec.dist.plan import ShardingConfig, SparseOptimizerConfig, build_plan, describe_plan
from genrec.dist.strategy import TorchRecStrategy, shard_module

__all__ = ["ShardingConfig", "SparseOptimizerConfig", "TorchRecStrategy", "build_plan", "describe_plan",
           "shard_module"]
