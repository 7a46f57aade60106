"""Distributed checkpoints: a folder written by torch.distributed.checkpoint (DCP), readable at any world size.

Layout of ``<name>.ckpt/``: DCP's ``.metadata`` and ``__<rank>_0.distcp`` files hold ``model`` (the
LightningModule's state dict: each process writes the shards of the tables it owns, the replicated dense weights
are written once) and ``sparse_optimizer`` (the fused optimizer's state, sharded like the tables); ``meta.pt``
holds the rest of Lightning's checkpoint (epoch, loops, callbacks, the dense optimizer's state). DCP reshards on
load, so a checkpoint written by N processes loads into M processes, or into one unsharded model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torchrec.distributed import DistributedModelParallel

META_FILE = "meta.pt"


def is_distributed_checkpoint(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / ".metadata").exists()


def save_distributed(path: str | Path, state: dict[str, Any], meta: dict[str, Any], is_rank_zero: bool) -> None:
    """Collective: every process passes its (sharded) ``state``; rank 0 also writes ``meta``."""
    dcp.save(state, checkpoint_id=Path(path))
    if is_rank_zero:
        torch.save(meta, Path(path) / META_FILE)


def load_distributed(path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
    """Fill ``state`` (tensors, sharded or not, of the target layout) in place from ``path``; returns ``meta``.
    Collective when a process group is initialised, plain reads otherwise."""
    if not is_distributed_checkpoint(path):
        raise FileNotFoundError(f"{path}: not a distributed checkpoint folder (no .metadata)")
    dcp.load(state, checkpoint_id=Path(path))
    return torch.load(Path(path) / META_FILE, map_location="cpu", weights_only=False)


def training_state(module_state: dict[str, Any], model: DistributedModelParallel | None) -> dict[str, Any]:
    """What a distributed checkpoint stores: the module's state dict and the fused optimizer's (sharded) state."""
    state = {"model": module_state}
    optimizer_state = model.fused_optimizer.state_dict() if model is not None else {}
    if optimizer_state.get("state"):  # empty on a process holding no shard (table-wise, fewer tables than ranks)
        state["sparse_optimizer"] = optimizer_state
    return state


def restore(path: str | Path, module: nn.Module, model: DistributedModelParallel | None = None) -> dict[str, Any]:
    """Load a distributed checkpoint into ``module`` (sharded by ``model``, or unsharded) and, given ``model``,
    the fused optimizer's state (to resume training). Returns the checkpoint's ``meta``."""
    state = training_state(module.state_dict(), model)
    meta = load_distributed(path, state)
    module.load_state_dict(state["model"])
    if "sparse_optimizer" in state:
        model.fused_optimizer.load_state_dict(state["sparse_optimizer"])
    return meta


def load_weights(path: str | Path, module: nn.Module) -> None:
    """Load a checkpoint's model weights into ``module`` (a LightningModule): a distributed checkpoint folder
    (any world size) or a single Lightning ``.ckpt`` file."""
    if is_distributed_checkpoint(path):
        restore(path, module)
    else:
        module.load_state_dict(torch.load(path, map_location="cpu", weights_only=False)["state_dict"])


def checkpoint_epoch(path: str | Path) -> int:
    """The epoch (0-based) in which a checkpoint was written: a distributed checkpoint folder (its ``meta.pt``) or a
    single Lightning ``.ckpt`` file (memory-mapped: only the epoch is read)."""
    if is_distributed_checkpoint(path):
        return int(torch.load(Path(path) / META_FILE, map_location="cpu", weights_only=False)["epoch"])
    return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["epoch"])
