"""The cost model on a GPU: first calls against upstream, and the 1,152-config space, judged by CUPTI.

    python benchmarks/bench_model_gpu.py [first] [large] [--reps N] [--sides model,upstream,no_model]
    (default: both parts, 3 reps, every side)

Every run is a fresh process with empty Triton and plugin caches; the sides alternate within each rep.

- ``first``: the first call of the 48-config fp16 matmul at 4096^3: the plugin with its cost model
  (the default), upstream, and the plugin without the model (``TRITON_DIST_AUTOTUNE_MODEL=0``).
- ``large``: the first call over the 1,152-config space at 4096^3 (``_search.py``), with and without
  the model.

Each run reports its seconds, what it compiled and screened (from the tuning's notes), and its pick's
CUPTI kernel time against the exhaustive best (``results/search_truth_h200.json``: the 48's best is the
1,152's too), timed in the same process, interleaved over 7 rounds. Results: ``results/model_h200.json``.
"""

from __future__ import annotations

import json
import statistics
import sys

from _common import config_dict, launch_meta, save_results
from _procs import run_fresh, serve
from _search import SHAPE, large_space

BEST = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}


def cupti_ms(calls: dict, name: str, rounds: int = 7, per_round: int = 20) -> dict:
    """Median CUPTI kernel time (ms) of each call, the calls interleaved round by round."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    samples: dict = {k: [] for k in calls}
    for fn in calls.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for label, fn in calls.items():
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(per_round):
                    fn()
                torch.cuda.synchronize()
            times = [e.device_time for e in prof.events() if e.device_type == DeviceType.CUDA and name in e.name]
            samples[label].append(statistics.median(times) / 1e3 if times else float("nan"))
    return {k: statistics.median(v) for k, v in samples.items()}


def judged(tuned, a, b) -> dict:
    """The pick's and the exhaustive best's CUPTI times, side by side."""
    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    best = triton.Config({k: v for k, v in BEST.items() if not k.startswith("num_")}, num_warps=BEST["num_warps"],
                         num_stages=BEST["num_stages"])
    calls = {"pick": lambda: mm.launch(mm.jit, a, b, **launch_meta(tuned.best_config)),
             "best": lambda: mm.launch(mm.jit, a, b, **launch_meta(best))}
    ms = cupti_ms(calls, "matmul_kernel")
    return {"pick": str(tuned.best_config), "pick_config": config_dict(tuned.best_config), "pick_ms": ms["pick"],
            "best_ms": ms["best"], "pick_vs_best": ms["pick"] / ms["best"] - 1}


def _first(configs) -> dict:
    from bench_search_gpu import counts, tuned_call

    notes: list = []
    seconds, tuned, a, b = tuned_call(configs, SHAPE, notes)
    return {"first_call_s": seconds, **judged(tuned, a, b), **counts(notes),
            "notes": [n for n in notes if any(w in n for w in ("model", "screened", "compiled", "pick", "final"))]}


def child_first() -> dict:
    from kernels import KERNELS

    return _first(KERNELS["matmul"].configs("cuda"))


def child_large() -> dict:
    return _first(large_space())


def main() -> None:
    if serve(globals()):
        return
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
    only = sys.argv[sys.argv.index("--sides") + 1].split(",") if "--sides" in sys.argv else None
    args = [a for a in args if not a.isdigit() and (only is None or a != ",".join(only))]
    parts = args or ["first", "large"]
    sides = {"first": [("model", True, None), ("upstream", False, None),
                       ("no_model", True, {"TRITON_DIST_AUTOTUNE_MODEL": "0"})],
             "large": [("model", True, None), ("no_model", True, {"TRITON_DIST_AUTOTUNE_MODEL": "0"})]}
    results: dict = {}
    for part in parts:
        for rep in range(reps):
            for side, plugin, extra in sides[part]:
                if only is not None and side not in only:
                    continue
                got = run_fresh(__file__, part, plugin, extra)
                results.setdefault(part, {}).setdefault(side, []).append(got)
                print(part, side, rep, json.dumps(got)[:400], flush=True)
                save_results("model_h200.json", results)
    print(f"\n{'part':6} {'side':9} {'first call s (each rep)':32} {'compiled':>9} {'pick vs best (CUPTI)':>22}")
    for part, by_side in results.items():
        for side, runs in by_side.items():
            ok = [r for r in runs if "first_call_s" in r]
            if not ok:
                print(f"{part:6} {side:9} {runs[0].get('error', '?')[:80]}")
                continue
            secs = " ".join(f"{r['first_call_s']:.2f}" for r in ok)
            worst = max(r["pick_vs_best"] for r in ok)
            print(f"{part:6} {side:9} {secs:32} {str([r.get('compiled') for r in ok]):>9} {worst:+21.2%}")
    up = [r["first_call_s"] for r in results.get("first", {}).get("upstream", []) if "first_call_s" in r]
    mine = [r["first_call_s"] for r in results.get("first", {}).get("model", []) if "first_call_s" in r]
    if up and mine:
        up_s, mine_s = statistics.median(up), statistics.median(mine)
        print(f"first call: upstream median {up_s:.2f}s / plugin median {mine_s:.2f}s = {up_s / mine_s:.1f}x")


if __name__ == "__main__":
    main()
