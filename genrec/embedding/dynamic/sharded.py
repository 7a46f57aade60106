"""A dynamic table sharded over the processes of a group: rows partitioned by raw-ID hash, each process owning its
tiers (its own :class:`~genrec.embedding.dynamic.table.DynamicTable`, store folder ``<path>/rank<r>``).

A training lookup sends each distinct ID of the local batch (with its count) to its owner (all-to-all), the owner
maps everything it received as one step and sends the rows back; the backward pass sends the summed gradients to
the owners, which divide them by the world size (as TorchRec does, to match DDP's averaging of dense gradients) and
apply the row optimizer. Every process calls every lookup (collective), like a sharded TorchRec table.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.hashing import owner
from genrec.embedding.dynamic.table import _ANCHOR, DynamicTable, _numpy


class ShardedDynamicTable:
    """Args: config: the table's settings (capacity and store are per process); group: the process group."""

    def __init__(self, config: DynamicTableConfig, group: dist.ProcessGroup | None = None):
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.local = DynamicTable(config, self.rank, self.world_size)

    def _all_to_all(self, send: torch.Tensor, send_splits: list[int], recv_splits: list[int]) -> torch.Tensor:
        out = send.new_empty((sum(recv_splits), *send.shape[1:]))
        dist.all_to_all_single(out, send.contiguous(), recv_splits, send_splits, group=self.group)
        return out

    def _route(self, ids: np.ndarray) -> dict:
        """Distinct IDs of ``ids (B,)`` sent to their owners: what this process sends and receives."""
        unique, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        order = np.argsort(owner(unique, self.world_size), kind="stable")
        send_splits = np.bincount(owner(unique, self.world_size), minlength=self.world_size)
        recv_splits = self._all_to_all(torch.from_numpy(send_splits), [1] * self.world_size, [1] * self.world_size)
        route = {"inverse": torch.from_numpy(inverse), "order": torch.from_numpy(order),
                 "send": send_splits.tolist(), "recv": recv_splits.tolist(), "unique": len(unique)}
        route["ids"] = self._all_to_all(torch.from_numpy(unique[order]), route["send"], route["recv"]).numpy()
        route["counts"] = self._all_to_all(torch.from_numpy(counts[order]), route["send"], route["recv"]).numpy()
        return route

    def _return(self, rows: torch.Tensor, route: dict) -> torch.Tensor:
        """Rows of the received IDs back to their requesters -> ``(B, D)`` in the local batch's order."""
        got = self._all_to_all(rows, route["recv"], route["send"])
        ordered = torch.empty_like(got)
        ordered[route["order"]] = got
        return ordered[route["inverse"]]

    def lookup(self, ids: np.ndarray | torch.Tensor, times: np.ndarray | torch.Tensor | None = None
               ) -> torch.Tensor:
        """Training lookup (one step on every process; collective): ``(B,)`` raw IDs -> ``(B, D)``."""
        return _ShardedLookup.apply(_ANCHOR, self, _numpy(ids), times)

    @torch.no_grad()
    def read(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Evaluation lookup (changes nothing; collective): ``(B,)`` raw IDs -> ``(B, D)``."""
        route = self._route(_numpy(ids))
        return self._return(self.local.read(route["ids"]), route)

    def batch_time(self, times: np.ndarray | torch.Tensor | None) -> np.ndarray | None:
        """The global batch's event time (the largest over processes), or None."""
        if times is None:
            return None
        local = torch.tensor([int(_numpy(times).max()) if len(times) else -(2**62)])
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=self.group)
        return local.numpy()


class _ShardedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, sharded: ShardedDynamicTable, ids: np.ndarray, times) -> torch.Tensor:
        route = sharded._route(ids)
        table = sharded.local
        mapped = table.map(np.repeat(route["ids"], route["counts"]), sharded.batch_time(times))
        first = torch.from_numpy(np.cumsum(route["counts"]) - route["counts"])
        ctx.sharded, ctx.route, ctx.mapped = sharded, route, mapped
        ctx.entry = mapped.inverse[first]  # received ID -> index into mapped.unique_rows
        return sharded._return(table.weight.index_select(0, mapped.rows[first]), route)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        sharded, route, mapped = ctx.sharded, ctx.route, ctx.mapped
        per_id = grad.new_zeros(route["unique"], grad.shape[1]).index_add_(0, route["inverse"], grad)
        received = sharded._all_to_all(per_id[route["order"]], route["send"], route["recv"])
        summed = grad.new_zeros(len(mapped.unique_rows), grad.shape[1]).index_add_(0, ctx.entry, received)
        sharded.local.apply_summed(mapped, summed / sharded.world_size)
        return None, None, None, None
