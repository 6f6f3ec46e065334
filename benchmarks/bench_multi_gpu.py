"""Distributed tuning over NCCL, one process per GPU (start with torchrun).

    torchrun --nproc-per-node=2 benchmarks/bench_multi_gpu.py

1. function-level ``autotune`` with ``autotune_pg``: every rank must pick the same config; the
   last rank is made slower for one candidate, so MAX moves the pick away from it;
2. ``contextual_autotune(is_dist=True)`` on a matmul + layernorm step: same picks everywhere;
3. plain ``@triton.autotune`` kernels tuned with and without ``tuning_group``: how often the
   ranks' picks differ without it (never with it);
4. the chunked all-to-all example;
5. tuning wall time of each, gathered on rank 0 and printed as a table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402
from kernels import KERNELS, all2all  # noqa: E402
from triton_dist_plugin.autotuner import contextual_autotune  # noqa: E402
from triton_dist_plugin.tune import autotune  # noqa: E402


def timed(f):
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    out = f()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=timedelta(seconds=300), device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict = {"rank": rank, "world": world}
    add = KERNELS["add"]
    x, y = add.make_inputs("gpu", "cuda")

    # 1. function-level, with the last rank slow on the candidate it would otherwise pick
    space = [{"cfg": c} for c in add.configs("cuda")]

    @autotune(config_space=space, key_fn=lambda x, y: (tuple(x.shape), world))
    def launcher(x, y, cfg):
        if rank == world - 1 and cfg is space[0]["cfg"]:
            time.sleep(0.002)  # this rank pays 2 ms more for candidate 0
        return add.launch(add.jit, x, y, **cfg.all_kwargs())

    _, out["function_s"] = timed(lambda: launcher(x, y, autotune_pg=dist.group.WORLD))
    out["function_pick"] = str(launcher.best_configs[(tuple(x.shape), world)]["cfg"])

    # 2. contextual, distributed
    mm, ln = KERNELS["matmul"], KERNELS["layernorm"]
    mmk = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    lnk = triton.autotune(configs=ln.configs("cuda"), key=ln.key)(ln.jit)
    a, b = mm.make_inputs("gpu", "cuda")
    w = torch.randn(a.shape[1], device="cuda", dtype=a.dtype)
    bias = torch.randn_like(w)
    step = contextual_autotune(is_dist=True, n_repeat=5, n_warmup=3)(
        lambda: ln.launch(lnk, mm.launch(mmk, a, b), w, bias))
    _, out["contextual_s"] = timed(step)
    out["contextual_picks"] = [str(mmk.best_config), str(lnk.best_config)]

    # 3. plain kernels, alone and together
    shapes = [1 << 20, 1 << 22, 1 << 24]
    for mode in ("alone", "together"):
        picks = []
        for n in shapes:
            k = triton.autotune(configs=add.configs("cuda"), key=add.key)(add.jit)
            xs, ys = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            if mode == "alone":
                add.launch(k, xs, ys)
            else:
                with tdp.tuning_group(dist.group.WORLD):
                    add.launch(k, xs, ys)
            picks.append(str(k.best_config))
        out[f"plain_{mode}"] = picks

    # 4. the all-to-all example
    result, out["all2all_s"] = timed(lambda: all2all.run(2048, 256))
    out["all2all"] = result

    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        same = {k: len({json.dumps(g[k], default=str) for g in gathered}) == 1
                for k in ("function_pick", "contextual_picks", "plain_together", "all2all")}
        differ = sum(len({g["plain_alone"][i] for g in gathered}) > 1 for i in range(len(shapes)))
        print(json.dumps({"ranks": gathered, "same_on_all_ranks": same,
                          "plain_alone_shapes_differing": f"{differ}/{len(shapes)}"}, indent=1, default=str))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
