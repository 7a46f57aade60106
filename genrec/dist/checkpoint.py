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


def load_weights(path: str | Path, module: nn.Module) -> None:
    """Load a checkpoint's model weights into ``module`` (a LightningModule): a distributed checkpoint folder
    (any world size) or a single Lightning ``.ckpt`` file."""
    if is_distributed_checkpoint(path):
        state = {"model": module.state_dict()}
        load_distributed(path, state)
        module.load_state_dict(state["model"])
    else:
        module.load_state_dict(torch.load(path, map_location="cpu", weights_only=False)["state_dict"])
