"""Tuning speed and configs=[] quality on one GPU, upstream and the plugin side by side.

    python benchmarks/bench_tiling_gpu.py

1. First call of the 48-config fp16 matmul at 4096^3 (compile + time every config), upstream in
   one process and the plugin in another, each with an empty Triton cache of its own. Then every
   config is measured carefully (do_bench median, 3 rounds) to place both picks.
2. configs=[] (the plugin's generated candidates) against an expert hand-written space for add,
   softmax, layernorm and matmul at a few fp16 shapes: the pick of each and every expert config,
   judged by CUPTI kernel time (5 rounds, round-robin), and how many candidates each side timed.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

from _common import (
    ROOT,
    careful_ms,
    collect_notes,
    config_dict,
    cupti_rounds,
    first_call_matmul,
    launch_meta,
    save_results,
)
from _procs import call_child, serve


def first_call(side: str) -> dict:
    notes = collect_notes() if side == "plugin" else []
    seconds, tuned = first_call_matmul()
    return {"side": side, "first_call_s": seconds, "notes": notes, "pick": config_dict(tuned.best_config)}


def expert_space(name: str, shape: tuple) -> list:
    """Hand-written spaces: what an expert would list for each kernel."""
    import triton

    if name == "add":
        return [{"BLOCK": b, "num_warps": w} for b in (1024, 2048, 4096, 8192) for w in (4, 8)]
    if name == "softmax":
        return [{"BLOCK_N": triton.next_power_of_2(shape[1]), "num_warps": w} for w in (2, 4, 8, 16)]
    if name == "layernorm":
        return [{"BLOCK_N": b, "num_warps": w} for b in (512, 1024, 2048, 4096) for w in (4, 8)]
    return [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w, "num_stages": st}
            for bm in (64, 128) for bn in (64, 128, 256) for bk in (32, 64) for w in (4, 8) for st in (3, 4)]


SHAPES = {"add": [(1 << 24,), (1 << 20,)], "softmax": [(4096, 4096), (8192, 1000)],
          "layernorm": [(4096, 4096), (8192, 2048)], "matmul": [(4096, 4096, 4096), (512, 4096, 4096)]}
KEYS = {"add": ["n"], "softmax": ["n_cols"], "layernorm": ["N"], "matmul": ["M", "N", "K"]}


def case(name: str, shape: tuple):
    """The plain jit kernel and ``run(kernel, **meta)`` launching it (or a tuner of it) on fp16 data."""
    import torch

    from kernels import add, layernorm, matmul, softmax

    def rand(*s):
        return torch.randn(*s, device="cuda", dtype=torch.float16)

    if name == "add":
        x, y = rand(shape[0]), rand(shape[0])
        return add.add_kernel, lambda k, **m: add.add(k, x, y, **m)
    if name == "softmax":
        x = rand(*shape)
        out = torch.empty_like(x)

        def run(k, **m):  # BLOCK_N is not passed: configs=[] generates it (a whole row)
            k[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], **m)
            return out

        return softmax.softmax_kernel, run
    if name == "layernorm":
        x, w, b = rand(*shape), rand(shape[1]), rand(shape[1])
        return layernorm.layernorm_kernel, lambda k, **m: layernorm.layernorm(k, x, w, b, **m)
    M, N, K = shape
    a, b = rand(M, K), rand(K, N)
    return matmul.matmul_kernel, lambda k, **m: matmul.matmul(k, a, b, **m)


def quality() -> list:
    import torch
    import triton

    import triton_dist_plugin as tdp

    timed = []

    class Count:
        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            timed.append(id(request.config))

    tdp.register(Count())
    rows = []
    wanted = [k for k in os.environ.get("TDP_KERNELS", "").split(",") if k] or list(SHAPES)
    for name, shapes in SHAPES.items():
        if name not in wanted:
            continue
        for shape in shapes:
            torch.manual_seed(0)
            jit, run = case(name, shape)
            hints = {"GROUP_M": [8]} if name == "matmul" else None
            gen = triton.autotune(configs=[], key=KEYS[name], hints=hints)(jit)
            timed.clear()
            t0 = time.perf_counter()
            run(gen)
            torch.cuda.synchronize()
            gen_s = time.perf_counter() - t0
            pick = gen.best_config
            space = expert_space(name, shape)
            # The pick and the expert space measured together by their kernels' device time (CUPTI,
            # an L2 flush before each call), round-robin, so drifting clocks hit both alike; the
            # median of five rounds counts.
            calls = [lambda c=c, run=run, jit=jit: run(jit, **c) for c in space]
            # The pick is launched with the same keywords the expert configs name: for a few-us kernel,
            # passing Triton's default options too costs ~1 us of host time that events would count.
            named = set().union(*space)
            pick_kwargs = {k: v for k, v in pick.all_kwargs().items() if k in named or k in pick.kwargs}
            calls.append(lambda run=run, jit=jit, kw=pick_kwargs: run(jit, **kw))
            rounds = cupti_rounds(dict(enumerate(calls)), getattr(jit, "fn", jit).__name__)
            med = [statistics.median(rounds[i]) for i in range(len(calls))]
            expert, pick_ms = med[:-1], med[-1]
            best_i = min(range(len(expert)), key=expert.__getitem__)
            rows.append({"kernel": name, "shape": shape, "generated_candidates": len(gen.configs_timings),
                         "generated_timed": len(set(timed)), "expert_space": len(space), "pick": str(pick),
                         "pick_ms": pick_ms, "expert_best_ms": expert[best_i], "expert_best": space[best_i],
                         "gap_pct": (pick_ms / expert[best_i] - 1) * 100, "tuning_s": gen_s})
            print(json.dumps(rows[-1], default=str), flush=True)
    return rows


def exhaustive_matmul(picks: dict) -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    a, b = mm.make_inputs("gpu", "cuda")
    configs = mm.configs("cuda")
    times = {i: careful_ms(lambda c=c: mm.launch(mm.jit, a, b, **c.all_kwargs())) for i, c in enumerate(configs)}
    best = min(times.values())
    out = {"exhaustive_best_ms": best}
    for side, p in picks.items():
        ms = careful_ms(lambda p=p: mm.launch(mm.jit, a, b, **launch_meta(p)))
        out[f"{side}_pick_ms"], out[f"{side}_gap_pct"] = ms, (ms / best - 1) * 100
    return out


def child_upstream() -> dict:
    return first_call("upstream")


def child_plugin() -> dict:
    return first_call("plugin")


def child_quality() -> list:
    return quality()


def child_exhaustive() -> dict:
    return exhaustive_matmul(json.loads(os.environ["TDP_PICKS"]))


def run_child(what: str, env: dict) -> dict:
    data, proc = call_child(__file__, what, {**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=900, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": proc.stderr[-4000:]}
    return data


def main() -> None:
    if serve(globals()):
        return
    results: dict = {}
    only = os.environ.get("TDP_ONLY", "first_call,exhaustive,quality").split(",")
    sides = os.environ.get("TDP_SIDES", "upstream,plugin").split(",")
    for side in sides if "first_call" in only else ():
        with tempfile.TemporaryDirectory() as cache:
            results[side] = run_child(side, {"TRITON_CACHE_DIR": cache,
                                             "TRITON_DIST_AUTOTUNE_DIR": os.path.join(cache, "tdp")})
            print(side, results[side], flush=True)
    picks = {s: results[s]["pick"] for s in ("upstream", "plugin") if "pick" in results.get(s, {})}
    results["exhaustive"] = run_child("exhaustive", {"TDP_PICKS": json.dumps(picks)}) if "exhaustive" in only else {}
    results["quality"] = run_child("quality", {"TDP_KERNELS": os.environ.get("TDP_KERNELS", "")}) if (
        "quality" in only) else []
    save_results("tiling_h200.json", results)
    up, pl = results.get("upstream", {}), results.get("plugin", {})
    if "first_call_s" in up and "first_call_s" in pl:
        print(f"\nfirst call, 48-config matmul 4096^3: upstream {up['first_call_s']:.2f}s, plugin "
              f"{pl['first_call_s']:.2f}s ({up['first_call_s'] / pl['first_call_s']:.1f}x)")
    print("exhaustive:", results["exhaustive"])
    for r in results["quality"] if isinstance(results["quality"], list) else [results["quality"]]:
        print(r if "error" in r else f"{r['kernel']:<9} {str(r['shape']):<20} generated {r['generated_candidates']:>2} "
              f"(timed {r['generated_timed']:>2}) vs expert {r['expert_space']:>2}: pick {r['pick_ms']:.4f} ms, "
              f"expert best {r['expert_best_ms']:.4f} ms, gap {r['gap_pct']:+.1f}%")


if __name__ == "__main__":
    main()
