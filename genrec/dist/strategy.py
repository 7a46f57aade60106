"""A Lightning strategy for hybrid parallel training: TorchRec DistributedModelParallel over the LightningModule.

Embedding tables are sharded by the plan (model parallel, optimizer fused into the backward pass); every other
parameter is replicated and averaged by DDP (data parallel). Process launch and the process group are Lightning's
DDP machinery (local subprocesses, torchrun, SLURM), so the same CLI runs on one process or many nodes.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.types import ShardingEnv

from genrec.dist.checkpoint import restore, save_distributed, training_state
from genrec.dist.plan import ShardingConfig, build_plan, describe_plan

log = logging.getLogger("genrec.dist")


def shard_module(module: nn.Module, cfg: ShardingConfig, device: torch.device, local_world_size: int,
                 init_data_parallel: bool = True) -> tuple[DistributedModelParallel, str]:
    """Shard every EmbeddingCollection inside ``module`` in place (and, with ``init_data_parallel``, wrap the
    rest in DDP). Collective: every process of the default group calls it. Returns the DMP and the plan as text."""
    world_size = dist.get_world_size()
    sharder = cfg.sharder(device.type)
    plan = build_plan(module, cfg, sharder, world_size, local_world_size, device.type)
    text = describe_plan(plan, module, cfg.optimizer.name, world_size)
    model = DistributedModelParallel(module, env=ShardingEnv.from_process_group(dist.group.WORLD), device=device,
                                     plan=plan, sharders=[sharder], init_data_parallel=init_data_parallel)
    return model, text


class TorchRecStrategy(DDPStrategy):
    """DDP's launch and process group; DistributedModelParallel instead of DistributedDataParallel.

    The LightningModule is sharded once (at the first ``fit``/``validate``/``test``) and stays sharded: its state
    dict then holds sharded tables, so checkpoints are distributed checkpoints (a folder per checkpoint, see
    :mod:`genrec.dist.checkpoint`) that reload at another world size. The module's ``configure_optimizers`` must
    leave out the fused parameters (``torchrec.optim.optimizers.in_backward_optimizer_filter``).

    Args:
        sharding: the ``sharding`` config.
        kwargs: :class:`lightning.pytorch.strategies.DDPStrategy` arguments.
    """

    strategy_name = "torchrec"

    def __init__(self, sharding: ShardingConfig, **kwargs: Any):
        super().__init__(process_group_backend=sharding.backend, **kwargs)
        self.sharding = sharding
        self.dmp: DistributedModelParallel | None = None
        self.plan_text: str | None = None

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True  # load into the sharded module: DCP reshards to the current plan

    def setup_environment(self) -> None:
        super().setup_environment()
        if self.root_device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
            # local processes share the cores (torchrun sets OMP_NUM_THREADS itself)
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.num_processes))

    def setup(self, trainer: L.Trainer) -> None:
        assert self.accelerator is not None and self.lightning_module is not None
        self.accelerator.setup(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING
        if self.dmp is None:
            self.lightning_module.to(self.root_device)
            self.dmp, self.plan_text = shard_module(self.lightning_module, self.sharding, self.root_device,
                                                    self.num_processes, init_data_parallel=False)
            if self.is_global_zero:
                log.info("sharding plan (%d processes):\n%s", self.world_size, self.plan_text)
        if fitting:
            self.dmp.init_data_parallel()  # DDP over the dense parameters; a no-op after the first call
            self.model = self.dmp
            self.setup_optimizers(trainer)
        else:
            self.model = self.lightning_module  # evaluation needs no gradient averaging
        self.setup_precision_plugin()

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """A task that runs the DistributedModelParallel itself (``drives_model``: TorchRec's pipeline, see
        :mod:`genrec.dist.pipeline`) gets its ``training_step`` called directly; any other goes through the DMP."""
        if getattr(self.lightning_module, "drives_model", False):
            with self.precision_plugin.train_step_context():
                return self.lightning_module.training_step(*args, **kwargs)
        return super().training_step(*args, **kwargs)

    def teardown(self) -> None:
        """Lightning's teardown minus moving the module (and optimizer state) to the CPU: TorchRec's sharded
        modules keep views of their weights, so the module stays where its shards live for the strategy's life
        (``fit`` then ``validate``/``test`` reuse it)."""
        self.model = self.lightning_module
        assert self.cluster_environment is not None and self.accelerator is not None
        self.cluster_environment.teardown()
        self.precision_plugin.teardown()
        self.accelerator.teardown()
        self.checkpoint_io.teardown()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Collective: a distributed checkpoint folder, written beside ``filepath`` and swapped in when complete."""
        path = Path(self.broadcast(str(filepath)))
        save_distributed(path, training_state(checkpoint.pop("state_dict"), self.dmp), checkpoint,
                         self.is_global_zero)

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Weights (and, when resuming ``fit``, the fused optimizer's state) into the sharded module; returns the
        rest of the checkpoint for Lightning (loops, callbacks, the dense optimizer's state). Always read with
        ``weights_only=True`` (a checkpoint is data), whatever Lightning passes."""
        assert self.lightning_module is not None
        path = Path(self.broadcast(str(checkpoint_path)))
        resuming = self.lightning_module.trainer.state.fn == TrainerFn.FITTING
        return restore(path, self.lightning_module, self.dmp if resuming else None)

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """Nothing to do: :meth:`load_checkpoint` loaded the weights into the sharded module."""
