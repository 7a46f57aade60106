"""Sharding plans from Hydra config: per-table sharding types or TorchRec's planner; the fused sparse optimizer.

``sharding.type`` (and ``sharding.tables.<table>`` to override one table) is ``table_wise``, ``row_wise`` or
``column_wise``; ``planner`` hands the choice to TorchRec's ``EmbeddingShardingPlanner`` under
``sharding.topology`` and ``sharding.constraints``. Every table uses the FUSED compute kernel: its optimizer runs
inside FBGEMM's backward, row by row, so tables never hold dense gradients. (On CPU the DENSE kernel for an
EmbeddingCollection crashes or fails with TorchRec 1.8 / FBGEMM 1.8; table-row-wise and data-parallel
EmbeddingCollection shardings are not supported there either.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchrec import EmbeddingCollection
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.sharding_plan import (
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from torchrec.distributed.types import ShardingPlan

from genrec.errors import ConfigError, UserError

SHARDING_TYPES = ("table_wise", "row_wise", "column_wise")
#: ``sharding.pipeline``: the plain step, or TorchRec's TrainPipelineSparseDist (genrec.dist.pipeline)
PIPELINES = ("none", "sparse_dist")
FUSED = "fused"

#: fused optimizers by config name, and the 32-bit state each keeps per row and per element of a table
SPARSE_OPTIMIZERS: dict[str, tuple[EmbOptimType, int, int]] = {
    "sgd": (EmbOptimType.EXACT_SGD, 0, 0),
    "adagrad": (EmbOptimType.EXACT_ADAGRAD, 0, 1),
    "rowwise_adagrad": (EmbOptimType.EXACT_ROWWISE_ADAGRAD, 1, 0),
    "adam": (EmbOptimType.ADAM, 0, 2),
    "partial_rowwise_adam": (EmbOptimType.PARTIAL_ROWWISE_ADAM, 1, 1),
    "lamb": (EmbOptimType.LAMB, 0, 2),
}
#: what FBGEMM's CPU kernels implement
CPU_SPARSE_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")


@dataclass
class SparseOptimizerConfig:
    """The optimizer FBGEMM applies to sharded tables in the backward pass (``sharding.optimizer``)."""

    name: str = "rowwise_adagrad"
    lr: float = 0.05
    eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        if self.name not in SPARSE_OPTIMIZERS:
            raise UserError(f"sharding.optimizer.name must be one of {sorted(SPARSE_OPTIMIZERS)}, got {self.name!r}")

    def fused_params(self, device_type: str) -> dict[str, Any]:
        """FBGEMM keyword arguments of the fused kernel."""
        if device_type == "cpu" and self.name not in CPU_SPARSE_OPTIMIZERS:
            raise UserError(f"sharding.optimizer.name={self.name!r} has no CPU kernel in FBGEMM; on CPU use one of "
                            f"{CPU_SPARSE_OPTIMIZERS}")
        return {"optimizer": SPARSE_OPTIMIZERS[self.name][0], "learning_rate": self.lr, "eps": self.eps,
                "beta1": self.betas[0], "beta2": self.betas[1]}


@dataclass
class ShardingConfig:
    """The ``sharding`` config group. ``type=None`` means no sharding (plain one-process / DDP training);
    ``pipeline``: ``none`` (the plain step) or ``sparse_dist`` (TorchRec's TrainPipelineSparseDist, see
    :mod:`genrec.dist.pipeline`)."""

    type: str | None = None
    tables: dict[str, str] = field(default_factory=dict)
    optimizer: SparseOptimizerConfig = field(default_factory=SparseOptimizerConfig)
    topology: dict[str, Any] = field(default_factory=dict)
    constraints: dict[str, dict[str, Any]] = field(default_factory=dict)
    backend: str | None = None
    pipeline: str = "none"

    @classmethod
    def from_config(cls, cfg: DictConfig | dict) -> "ShardingConfig":
        raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
        unknown = set(raw) - {"type", "tables", "optimizer", "topology", "constraints", "backend", "pipeline"}
        if unknown:
            raise UserError(f"unknown sharding keys {sorted(unknown)}")
        optimizer = SparseOptimizerConfig(**{k: tuple(v) if k == "betas" else v
                                             for k, v in (raw.pop("optimizer", None) or {}).items()})
        out = cls(optimizer=optimizer, **{k: v for k, v in raw.items() if v is not None})
        for key, kind in [("sharding.type", out.type)] + [(f"sharding.tables.{t}", k) for t, k in out.tables.items()]:
            allowed = SHARDING_TYPES + (("planner",) if key == "sharding.type" else ())
            if kind is not None and kind not in allowed:
                raise UserError(f"{key} must be one of {allowed}, got {kind!r} (table_row_wise and data_parallel are "
                                "not supported for EmbeddingCollection tables)")
        if out.pipeline not in PIPELINES:
            raise ConfigError("sharding.pipeline", f"must be one of {PIPELINES}, got {out.pipeline!r}")
        if out.pipelined and not out.enabled:
            raise ConfigError("sharding.pipeline", "sparse_dist pipelines the input of sharded tables: choose a "
                                                   "sharding (e.g. sharding=row_wise), or leave the pipeline at none")
        return out

    @property
    def enabled(self) -> bool:
        return self.type is not None

    @property
    def pipelined(self) -> bool:
        """Train through TorchRec's TrainPipelineSparseDist (genrec.dist.pipeline)."""
        return self.pipeline == "sparse_dist"

    def sharder(self, device_type: str) -> EmbeddingCollectionSharder:
        return EmbeddingCollectionSharder(fused_params=self.optimizer.fused_params(device_type))


def embedding_collections(module: nn.Module) -> dict[str, EmbeddingCollection]:
    """Every unsharded EmbeddingCollection in ``module`` by its path."""
    return {name: m for name, m in module.named_modules() if isinstance(m, EmbeddingCollection)}


def build_plan(module: nn.Module, cfg: ShardingConfig, sharder: EmbeddingCollectionSharder, world_size: int,
               local_world_size: int, device_type: str) -> ShardingPlan:
    """The plan for every EmbeddingCollection in ``module``. Per-table types: table-wise tables go round-robin
    over the ranks (the ``i``-th table to rank ``i mod world_size``), row-wise tables are split evenly over all
    ranks, column-wise tables split their columns evenly over all ranks. ``planner``: TorchRec's planner
    (a collective call: every rank must call this)."""
    collections = embedding_collections(module)
    names = {c.name for ec in collections.values() for c in ec.embedding_configs()}
    for key, given in (("sharding.tables", cfg.tables), ("sharding.constraints", cfg.constraints)):
        if set(given) - names:
            raise UserError(f"{key} names unknown tables {sorted(set(given) - names)}; tables: {sorted(names)}")
    for ec in collections.values():
        for table in ec.embedding_configs():
            if table.embedding_dim % 4:
                raise UserError(f"sharding: table {table.name!r} has dim {table.embedding_dim}; FBGEMM's fused "
                                f"kernels need a multiple of 4 (e.g. model.dim={table.embedding_dim // 4 * 4})")
    if cfg.type == "planner":
        return _planner_plan(module, cfg, sharder, world_size, local_world_size, device_type)
    plan, index = {}, 0
    for path, ec in collections.items():
        per_table = {}
        for table in ec.embedding_configs():
            kind = cfg.tables.get(table.name, cfg.type)
            if kind == "table_wise":
                per_table[table.name] = table_wise(rank=index % world_size, compute_kernel=FUSED)
            elif kind == "row_wise":
                per_table[table.name] = row_wise(compute_kernel=FUSED)
            else:
                if table.embedding_dim % world_size:
                    raise UserError(f"sharding column_wise: table {table.name!r} has dim {table.embedding_dim}, "
                                    f"not divisible by the {world_size} processes")
                if table.embedding_dim // world_size % 4:
                    raise UserError(f"sharding column_wise: table {table.name!r} would have shards "
                                    f"{table.embedding_dim // world_size} wide; FBGEMM's fused kernels need a "
                                    "multiple of 4")
                per_table[table.name] = column_wise(ranks=list(range(world_size)), compute_kernel=FUSED)
            index += 1
        plan[path] = construct_module_sharding_plan(ec, per_table, sharder=sharder, local_size=local_world_size,
                                                    world_size=world_size, device_type=device_type)
    return ShardingPlan(plan)


def _planner_plan(module: nn.Module, cfg: ShardingConfig, sharder: EmbeddingCollectionSharder, world_size: int,
                  local_world_size: int, device_type: str) -> ShardingPlan:
    constraints = {}
    for ec in embedding_collections(module).values():
        for table in ec.embedding_configs():
            given = cfg.constraints.get(table.name, {})
            constraints[table.name] = ParameterConstraints(
                sharding_types=list(given.get("sharding_types", SHARDING_TYPES)), compute_kernels=[FUSED],
                min_partition=given.get("min_partition"))
    topology = Topology(world_size=world_size, local_world_size=local_world_size, compute_device=device_type,
                        **{k: v for k, v in cfg.topology.items() if v is not None})
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    if dist.is_initialized():
        return planner.collective_plan(module, [sharder], dist.group.WORLD)
    return planner.plan(module, [sharder])


def describe_plan(plan: ShardingPlan, module: nn.Module, optimizer: str, world_size: int) -> str:
    """A text table: each table's sharding, kernel, shard shape per rank; then weights + optimizer-state memory
    per rank (32-bit weights and state)."""
    _, per_row, per_element = SPARSE_OPTIMIZERS[optimizer]
    sizes = {c.name: (c.num_embeddings, c.embedding_dim)
             for ec in embedding_collections(module).values() for c in ec.embedding_configs()}
    weights, states = [0] * world_size, [0] * world_size
    lines = [f"{'table':<18}{'rows x dim':>14}  {'sharding':<12}{'kernel':<8}shards (rank: rows x cols)"]
    for module_plan in plan.plan.values():
        for table, sharding in module_plan.items():
            shards = []
            for shard in sharding.sharding_spec.shards:
                rank, (rows, cols) = shard.placement.rank(), shard.shard_sizes
                weights[rank] += rows * cols * 4
                states[rank] += (rows * per_row + rows * cols * per_element) * 4
                shards.append(f"{rank}: {rows} x {cols}")
            rows, dim = sizes[table]
            lines.append(f"{table:<18}{f'{rows} x {dim}':>14}  {sharding.sharding_type:<12}"
                         f"{sharding.compute_kernel:<8}{', '.join(shards)}")
    lines.append(f"memory per rank (weights + {optimizer} state): " + ", ".join(
        f"{r}: {_mib(w)} + {_mib(s)}" for r, (w, s) in enumerate(zip(weights, states))))
    return "\n".join(lines)


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:.3f} MiB"
