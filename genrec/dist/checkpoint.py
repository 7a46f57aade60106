"""Checkpoints, read as data: Lightning ``.ckpt`` files and distributed checkpoint folders (DCP, readable at any
world size), always with ``torch.load(weights_only=True)``, and corrupt or foreign files reported as one-line
errors that name the file.

Layout of a distributed ``<name>.ckpt/``: DCP's ``.metadata`` and ``__<rank>_0.distcp`` files hold ``model`` (the
LightningModule's state dict: each process writes the shards of the tables it owns, the replicated dense weights
are written once) and ``sparse_optimizer`` (the fused optimizer's state, sharded like the tables); ``meta.pt``
holds the rest of Lightning's checkpoint (epoch, loops, callbacks, the dense optimizer's state). DCP reshards on
load, so a checkpoint written by N processes loads into M processes, or into one unsharded model. A folder is
written beside its final name and swapped in (:func:`save_distributed`), so a process killed while saving leaves
the previous checkpoint loadable.

Binding to the run (docs/TRUST.md): every checkpoint genrec-train writes holds its run's ID (``genrec.run_id``,
written by :class:`~genrec.training.resume.ResumeState`; the run folder's ``run.json`` names it) and a digest of
its content: a file, the sha256 of everything else it holds (:func:`seal`, :data:`SEAL_KEY`); a distributed
folder, a ``manifest.json`` with the sha256 of every file (the shards, ``.metadata``, ``meta.pt``), written last
before the folder is swapped in. :func:`check_checkpoint` is the check every reader runs.
"""
from __future__ import annotations

import logging
import os
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torchrec.distributed import DistributedModelParallel

from genrec.errors import DataError
from genrec.utils.integrity import check_manifest, expected_run, state_sha256, write_manifest

log = logging.getLogger("genrec")

META_FILE = "meta.pt"
#: the checkpoint entry holding the digest of every other entry (:func:`seal`)
SEAL_KEY = "genrec_seal"
#: the checkpoint entry :class:`~genrec.training.resume.ResumeState` writes, holding the run ID
RUN_STATE_KEY = "genrec"
#: beside ``<name>.ckpt/``: the folder being written, and the previous one while it is swapped out
WRITING_SUFFIX, PREVIOUS_SUFFIX = ".writing", ".previous"


def is_distributed_checkpoint(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / ".metadata").exists()


def _load(path: Path, **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True)`` with any failure reported as a :class:`DataError` naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **kwargs)
    except FileNotFoundError:
        raise DataError(path, "checkpoint not found") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError) as err:
        reason = " ".join(str(err).split())[:300]
        raise DataError(path, f"not a readable checkpoint (truncated, corrupt, or holding more than tensors and "
                              f"plain values): {reason}") from None


def run_id_of(checkpoint: dict[str, Any]) -> str | None:
    """The ID of the run that wrote ``checkpoint`` (``None``: a run folder without a recorded identity)."""
    return (checkpoint.get(RUN_STATE_KEY) or {}).get("run_id")


def seal(checkpoint: dict[str, Any]) -> None:
    """Add :data:`SEAL_KEY` to ``checkpoint``: the sha256 (:func:`~genrec.utils.integrity.state_sha256`) of every
    other entry."""
    checkpoint[SEAL_KEY] = {"sha256": state_sha256({k: v for k, v in checkpoint.items() if k != SEAL_KEY})}


def check_checkpoint(path: str | Path, run_id: str | None) -> dict[str, Any]:
    """The check every reader of a run's checkpoint runs before using it: the checkpoint (file or distributed
    folder) was written by the run ``run_id`` (the run folder's ``run.json``; ``None`` for a folder without one)
    and nothing in it changed since. Returns its meta (everything but the weights); a foreign, tampered,
    truncated or unreadable checkpoint is a :class:`DataError` naming the file and what was expected.

    A checkpoint without a digest is accepted only from a folder without ``run.json`` (both written by a genrec
    older than run identities), with a warning: nothing binds it to the run."""
    path = Path(path)
    if is_distributed_checkpoint(path):
        if not check_manifest(path, run_id):
            log.warning("%s holds no manifest (written by an older genrec): its run and content are not checked",
                        path)
        return _load(path / META_FILE)
    checkpoint = _lightning_checkpoint(path)
    sealed = checkpoint.pop(SEAL_KEY, None)
    if sealed is None:
        if run_id is not None:
            raise DataError(path, f"carries no digest: not a checkpoint written by {expected_run(run_id)}")
        log.warning("%s carries no digest (written by an older genrec): its run and content are not checked", path)
    else:
        if not isinstance(sealed, dict) or sealed.get("sha256") != state_sha256(checkpoint):
            raise DataError(path, "its content differs from the digest it was written with (modified or corrupted "
                                  "since)")
        if run_id_of(checkpoint) != run_id:
            raise DataError(path, f"written by run {run_id_of(checkpoint)}, not by {expected_run(run_id)}: a "
                                  "checkpoint of another run")
    return {k: v for k, v in checkpoint.items() if k != "state_dict"}


def read_meta(path: str | Path) -> dict[str, Any]:
    """Everything but the weights of a checkpoint file or folder (epoch, global_step, loops, callbacks): cheap, the
    tensors are memory-mapped, not read. Raises :class:`DataError` for a missing or unreadable checkpoint."""
    path = Path(path)
    if is_distributed_checkpoint(path):
        return _load(path / META_FILE)
    return {k: v for k, v in _lightning_checkpoint(path).items() if k != "state_dict"}


def _lightning_checkpoint(path: Path) -> dict[str, Any]:
    """A Lightning checkpoint file, memory-mapped (its tensors are read only when used)."""
    if path.is_dir():
        raise DataError(path, "a folder that is not a distributed checkpoint (no .metadata)")
    checkpoint = _load(path, mmap=True)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise DataError(path, "not a Lightning checkpoint (no state_dict)")
    return checkpoint


def save_distributed(path: str | Path, state: dict[str, Any], meta: dict[str, Any], is_rank_zero: bool) -> None:
    """Collective: every process passes its (sharded) ``state``; rank 0 also writes ``meta`` and, last, the
    folder's manifest (bound to ``meta``'s run ID). Written to ``<path>.writing`` and swapped in once complete."""
    path = Path(path)
    writing, previous = path.with_name(path.name + WRITING_SUFFIX), path.with_name(path.name + PREVIOUS_SUFFIX)
    if is_rank_zero:
        shutil.rmtree(writing, ignore_errors=True)
    _barrier()
    dcp.save(state, checkpoint_id=writing)
    if is_rank_zero:
        torch.save(meta, writing / META_FILE)
        with open(writing / META_FILE, "rb") as f:
            os.fsync(f.fileno())
        write_manifest(writing, run_id_of(meta))  # last: a folder with its manifest is complete
    _barrier()
    if is_rank_zero:
        shutil.rmtree(previous, ignore_errors=True)
        if path.exists():
            path.rename(previous)
        writing.rename(path)
        shutil.rmtree(previous, ignore_errors=True)
    _barrier()


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def recover(path: str | Path) -> Path:
    """``path``, or its swapped-out previous version when a process died between the two renames of
    :func:`save_distributed`."""
    path = Path(path)
    previous = path.with_name(path.name + PREVIOUS_SUFFIX)
    return previous if not path.exists() and is_distributed_checkpoint(previous) else path


def load_distributed(path: str | Path, state: dict[str, Any]) -> dict[str, Any]:
    """Fill ``state`` (tensors, sharded or not, of the target layout) in place from ``path``; returns ``meta``.
    Collective when a process group is initialised, plain reads otherwise."""
    path = recover(path)
    if not is_distributed_checkpoint(path):
        raise DataError(path, "not a distributed checkpoint folder (no .metadata)")
    meta = _load(path / META_FILE)
    try:
        dcp.load(state, checkpoint_id=path)
    except (RuntimeError, ValueError, KeyError) as err:
        raise DataError(path, f"does not fit this model: {' '.join(str(err).split())[:300]}") from None
    return meta


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
    load_state(module, state["model"], path)
    if "sparse_optimizer" in state:
        model.fused_optimizer.load_state_dict(state["sparse_optimizer"])
    return meta


def load_state(module: nn.Module, state: dict[str, Any], path: str | Path) -> None:
    """``module.load_state_dict(state)`` with a mismatch (another model, other sizes) reported as a
    :class:`DataError` naming the checkpoint."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError) as err:
        reason = " ".join(str(err).split())[:400]
        raise DataError(path, f"does not fit the model of this config (trained with another model or dataset?): "
                              f"{reason}") from None


def load_weights(path: str | Path, module: nn.Module) -> None:
    """Load a checkpoint's model weights into ``module`` (a LightningModule): a distributed checkpoint folder
    (any world size) or a single Lightning ``.ckpt`` file."""
    if is_distributed_checkpoint(recover(path)):
        restore(path, module)
        return
    checkpoint = _load(Path(path))
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise DataError(path, "not a Lightning checkpoint (no state_dict)")
    load_state(module, checkpoint["state_dict"], path)


def read_tensor(path: str | Path, key: str) -> torch.Tensor:
    """One tensor of a checkpoint's model state (``key`` as in the LightningModule's state dict), without building
    the model: from a file (memory-mapped) or a distributed checkpoint folder (only that tensor is read)."""
    path = recover(path)
    if is_distributed_checkpoint(path):
        metadata = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
        entry = metadata.get(f"model.{key}")
        if entry is None or not hasattr(entry, "size"):
            raise DataError(path, f"holds no tensor {key!r}")
        state = {"model": {key: torch.empty(tuple(entry.size), dtype=entry.properties.dtype)}}
        dcp.load(state, checkpoint_id=path)
        return state["model"][key]
    state = _load(Path(path), mmap=True).get("state_dict", {})
    if key not in state:
        raise DataError(path, f"holds no tensor {key!r}")
    return state[key].clone()
