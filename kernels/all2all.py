"""A host-level communication operator tuned with the function-level autotuner.

An all-to-all over ``torch.distributed``: rank ``r`` sends the ``p``-th block of rows of ``A`` to
rank ``p`` and receives block ``r`` of every peer into ``C``. Rows go in chunks of ``CHUNK``
rows, with at most ``DEPTH`` chunks in flight, so chunk size and pipelining depth are the
tunables. The tuned wrapper follows the usual recipe: reset state and synchronise at the start
of every call (it runs once per timed repetition), size the staging buffers for the largest
candidate, prune candidates that cannot help, read ``best_configs`` and write a manifest.

Run it on CPUs (gloo) or GPUs (NCCL), one process per rank::

    torchrun --nproc-per-node=2 -m kernels.all2all --rows 4096 --dim 256
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.distributed as dist

from triton_dist_plugin.tune import autotune

SPACE_VERSION = "all2all-chunked-v1"  # bump when the meaning of the space changes
CONFIG_SPACE = [{"CHUNK": c, "DEPTH": d} for c in (16, 32, 64, 128, 256) for d in (1, 2, 4)]


def all2all(A: torch.Tensor, C: torch.Tensor, staging: torch.Tensor, group, CHUNK: int, DEPTH: int) -> torch.Tensor:
    """``C[p*S:(p+1)*S] = A_p[r*S:(r+1)*S]`` for every peer ``p``, in chunks, ``DEPTH`` deep."""
    world = dist.get_world_size(group)
    S, D = A.shape[0] // world, A.shape[1]
    A3 = A.view(world, S, D)
    C3 = C.view(world, S, D)
    inflight: list = []
    for slot, start in enumerate(range(0, S, CHUNK)):
        rows = min(CHUNK, S - start)
        send = A3[:, start:start + rows].contiguous()
        recv = staging[slot % DEPTH].view(-1)[: world * rows * D].view(world, rows, D)  # contiguous
        inflight.append((dist.all_to_all_single(recv, send, group=group, async_op=True), recv, start, rows))
        if len(inflight) >= DEPTH:
            _drain(inflight.pop(0), C3)
    for item in inflight:
        _drain(item, C3)
    return C


def _drain(item, C3: torch.Tensor) -> None:
    work, recv, start, rows = item
    work.wait()
    C3[:, start:start + rows] = recv


def staging_for(A: torch.Tensor, world: int) -> torch.Tensor:
    """Buffers for the largest candidate: the deepest pipeline of the widest chunks."""
    max_chunk = max(c["CHUNK"] for c in CONFIG_SPACE)
    max_depth = max(c["DEPTH"] for c in CONFIG_SPACE)
    return torch.empty(max_depth, world, max_chunk, A.shape[1], dtype=A.dtype, device=A.device)


def _key(A, C, staging, group):
    return (SPACE_VERSION, tuple(A.shape), str(A.dtype), dist.get_world_size(group))


def _prune(config, A, C, staging, group):
    S = A.shape[0] // dist.get_world_size(group)
    covering = min((c["CHUNK"] for c in CONFIG_SPACE if c["CHUNK"] >= S), default=None)
    if config["CHUNK"] > S and config["CHUNK"] != covering:
        return False  # one chunk already covers every row: larger ones change nothing
    return config["DEPTH"] <= math.ceil(S / config["CHUNK"])  # deeper than the chunk count buys nothing


@autotune(config_space=CONFIG_SPACE, key_fn=_key, prune_fn=_prune)
def tuned_all2all(A, C, staging, group, CHUNK=64, DEPTH=2):
    C.zero_()  # every candidate starts from the same state
    dist.barrier(group=group)
    return all2all(A, C, staging, group, CHUNK, DEPTH)


def reference(A: torch.Tensor, group) -> torch.Tensor:
    out = torch.empty_like(A)
    dist.all_to_all_single(out, A.contiguous(), group=group)
    return out


def run(rows: int, dim: int, group=None, manifest: str | None = None) -> dict:
    """Tune for one shape, check against the library all-to-all, and (rank 0) write a manifest."""
    group = group or dist.group.WORLD
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    A = torch.randn(rows * world, dim, device=device) + rank
    C = torch.empty_like(A)
    staging = staging_for(A, world)
    out = tuned_all2all(A, C, staging, group, autotune_pg=group)
    best = tuned_all2all.best_configs[_key(A, C, staging, group)]
    ok = bool(torch.equal(out, reference(A, group)))
    result = {"rows": rows, "dim": dim, "world": world, **best, "correct": ok}
    if rank == 0 and manifest:
        entries = json.loads(open(manifest).read()) if os.path.exists(manifest) else []
        entries.append(result)
        from pathlib import Path

        from triton_dist_plugin.store.filestore import write_json_atomic

        write_json_atomic(Path(manifest), entries)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="tune a chunked all-to-all")
    parser.add_argument("--rows", type=int, default=1024, help="rows each rank sends to each peer")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--manifest", default="all2all_manifest.json")
    args = parser.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    result = run(args.rows, args.dim, manifest=args.manifest)
    print(json.dumps({"rank": dist.get_rank(), **result}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
