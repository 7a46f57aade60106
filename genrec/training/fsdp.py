"""Fully sharded data parallel training of a generative model's backbone (ZeRO-3: parameters, gradients and
optimizer state sharded over the processes), through Lightning's :class:`ModelParallelStrategy` and torch's FSDP2
``fully_shard``.

Why not Lightning's ``FSDPStrategy``: it refuses a CPU accelerator ("The strategy `fsdp` requires a GPU accelerator,
but received `accelerator='cpu'`"), and the torch FSDP (v1) it wraps fails on CPU even when that check is bypassed
("RuntimeError: FSDP needs a non-CPU accelerator device, but no accelerator device is detected", torch 2.13).
``ModelParallelStrategy`` launches the processes, builds the device mesh and leaves the sharding to the module's
``configure_model``; FSDP2 runs on CPU with gloo and on CUDA with NCCL alike.

What is sharded (:func:`shard_generator`): every transformer layer of a `transformers` backbone is one FSDP unit
(gathered for its own forward and backward, resharded after), and the generator itself is the root unit holding
the rest (embeddings, LM head, norms; genrec's own stacks, whose cached decoding calls their blocks' parts
directly, stay in the root unit). The root's parameters are gathered for every method the task calls
(``loss``, ``target_log_probs``, ``item_log_probs``, ``prefix_item_log_probs``, ``generate``), registered with
``register_fsdp_forward_method``. Gradients are averaged over processes like DDP's; the generative task rescales
each process's loss by its share of the global batch's targets, so two processes reach the weights one process
reaches on the concatenated batches.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from omegaconf import DictConfig, OmegaConf
from torch import nn

from genrec.dist.checkpoint import run_id_of
from genrec.errors import ConfigError, settings_from
from genrec.utils.integrity import write_manifest

#: the generator methods the tasks call (each gathers the root unit's parameters like a forward)
FORWARD_METHODS = ("loss", "target_log_probs", "item_log_probs", "prefix_item_log_probs", "generate",
                   "item_head_log_probs")


@dataclass(frozen=True)
class FSDPConfig:
    """``fsdp.*`` (conf/fsdp).

    Attributes:
        enabled: shard the generator over ``trainer.devices`` processes.
        reshard_after_forward: free each unit's gathered parameters after its forward (ZeRO-3; False keeps them
            until the backward, trading memory for one all-gather less).
        save_distributed_checkpoint: checkpoints as one folder of per-process shards (large models) instead of
            one file assembled on rank 0.
    """

    enabled: bool = False
    reshard_after_forward: bool = True
    save_distributed_checkpoint: bool = False

    @classmethod
    def from_config(cls, node: DictConfig | None) -> "FSDPConfig":
        values = OmegaConf.to_container(node, resolve=True) if node is not None else {}
        return settings_from(cls, values, "fsdp")


class FSDPStrategy(ModelParallelStrategy):
    """Lightning's :class:`ModelParallelStrategy` with every process in one data-parallel (FSDP) group, carrying
    the :class:`FSDPConfig` the task's ``configure_model`` shards with."""

    def __init__(self, config: FSDPConfig, devices: Any, backend: str | None = None):
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise ConfigError("trainer.devices", f"fsdp=full needs the number of processes, got {devices!r}")
        super().__init__(data_parallel_size=devices, tensor_parallel_size=1,
                         save_distributed_checkpoint=config.save_distributed_checkpoint,
                         process_group_backend=backend)
        self.fsdp = config

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Lightning's save; a distributed checkpoint folder then gets its manifest (bound to the run ID in
        ``checkpoint``, see :mod:`genrec.dist.checkpoint`); a file is sealed by the trainer's checkpoint writer."""
        super().save_checkpoint(checkpoint, filepath, storage_options)
        if self._save_distributed_checkpoint and self.global_rank == 0:
            write_manifest(Path(filepath), run_id_of(checkpoint))  # rank 0's path is the one written


def transformer_layers(model: nn.Module) -> list[nn.Module]:
    """The layers of every `transformers` model inside ``model``: instances of the classes its
    ``_no_split_modules`` names (what `transformers` itself keeps whole when it splits a model)."""
    layers = []
    for module in model.modules():
        names = set(getattr(module, "_no_split_modules", None) or ())
        if names and hasattr(module, "config"):
            layers += [m for m in module.modules() if type(m).__name__ in names and m not in layers]
    return layers


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def shard_generator(model: nn.Module, mesh, reshard_after_forward: bool = True) -> list[nn.Module]:
    """Apply FSDP2 to ``model`` in place (idempotent): each transformer layer a unit, then the root. Returns the
    layer units."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    if is_sharded(model):
        return transformer_layers(model)
    layers = transformer_layers(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    for name in FORWARD_METHODS:
        if hasattr(model, name):
            register_fsdp_forward_method(model, name)
    return layers
