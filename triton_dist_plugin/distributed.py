"""Distributed selection: timings reduced over a ``torch.distributed`` group."""

from __future__ import annotations

from .bus import hookimpl


class MaxReduce:
    """The built-in ``tdp_reduce_timings``: the slowest rank's time counts for each candidate.

    Every rank times the same candidates in the same order; after the all-reduce every rank
    holds identical numbers, so every rank picks the same config.
    """

    @hookimpl(trylast=True)
    def tdp_reduce_timings(self, request, timings, group):
        if group is None:
            return timings
        import torch
        import torch.distributed as dist

        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        flat = torch.tensor([v for t in timings.values() for v in t], dtype=torch.float64, device=device)
        dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group)
        values = flat.cpu().tolist()
        return {config: values[3 * i : 3 * i + 3] for i, config in enumerate(timings)}
