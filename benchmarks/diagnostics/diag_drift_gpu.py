"""Does the device's speed drift under sustained load, enough to reorder finalists measured one
after another?

    python benchmarks/diagnostics/diag_drift_gpu.py [--reps 5]

The fp16 matmul at 4096^3 and three configs of the 1,152-config space: the exhaustive best (A),
the pick the plugin kept making over that space while it measured finalists one after another (B),
and the runner-up of the exhaustive truth (C). Each rep starts after 1.5 s idle (as after the
compiles) and times every call with device events and an L2 flush, behind the same device-side
head start as the plugin's event timing:

- ``series``: A alone for 320 calls; the median of each 40 (the drift itself);
- ``sequential``: each config 160 calls, one after another, in the order A B C and in C B A;
- ``interleaved``: 4 rounds of 40 calls each, forwards, then backwards (the plugin's full
  measurement).

Prints B/A and C/A per ordering (median over reps): a drift shows as ratios that depend on the
order, and the interleaved ratios as the ones that do not. Results: ``results/drift_h200.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
from _common import launch_meta, save_results  # noqa: E402
from _search import SHAPE, inputs  # noqa: E402

CONFIGS = {  # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
    "A": (128, 256, 64, 8, 8, 4),
    "B": (128, 256, 32, 1, 8, 5),
    "C": (128, 256, 64, 1, 8, 4),
}


def timed(fn, n: int) -> list:
    """Milliseconds of each of ``n`` calls of ``fn``, as the plugin's ``event`` timing takes them."""
    import torch
    from triton.runtime.driver import driver

    from triton_dist_plugin import timing

    cache = driver.active.get_empty_cache_for_benchmark()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    timing._run_ahead(torch.cuda, n)
    for s, e in zip(starts, ends):
        cache.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def rep(calls: dict) -> dict:
    import torch

    out: dict = {}
    torch.cuda.synchronize()
    time.sleep(1.5)
    series = timed(calls["A"], 320)
    out["series"] = [statistics.median(series[i:i + 40]) for i in range(0, 320, 40)]
    for order in ("ABC", "CBA"):
        time.sleep(1.5)
        out[f"sequential {order}"] = {k: statistics.median(timed(calls[k], 160)) for k in order}
    time.sleep(1.5)
    rounds: dict = {k: [] for k in calls}
    for i in range(4):
        for k in ("ABC" if i % 2 == 0 else "CBA"):
            rounds[k].append(statistics.median(timed(calls[k], 40)))
    out["interleaved"] = {k: statistics.median(v) for k, v in rounds.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    a, b = inputs(SHAPE)
    calls = {}
    for name, (bm, bn, bk, g, w, s) in CONFIGS.items():
        meta = launch_meta(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g},
                                         num_warps=w, num_stages=s))
        calls[name] = lambda meta=meta: mm.launch(mm.jit, a, b, **meta)
        for _ in range(3):
            calls[name]()  # compiled and loaded before any timing
    reps = [rep(calls) for _ in range(args.reps)]
    orderings = [k for k in reps[0] if k != "series"]
    table = {o: {f"{k}/A": statistics.median(r[o][k] / r[o]["A"] for r in reps) for k in "BC"} for o in orderings}
    drift = [statistics.median(r["series"][i] for r in reps) for i in range(len(reps[0]["series"]))]
    save_results("drift_h200.json", {"configs": CONFIGS, "reps": reps, "ratios": table, "series_ms": drift})
    print("A alone, median ms of each 40 calls after idle:", " ".join(f"{t:.4f}" for t in drift))
    print(f"{'ordering':16} {'B/A':>8} {'C/A':>8}")
    for o, ratios in table.items():
        print(f"{o:16} {ratios['B/A']:8.4f} {ratios['C/A']:8.4f}")


if __name__ == "__main__":
    main()
