"""What does isolation cost a ``configs=[]`` kernel's first call, decorated just before it, as
scripts and tests do? (issue 36)

For each case (add 2^24 fp32, softmax and layernorm 4096x4096, matmul fp16 512x4096x4096), three
sides, each a fresh process with empty caches, interleaved over the repetitions:

- ``isolated``: the plugin, ``configs=[]``, isolation at its default (on for generated spaces);
- ``unisolated``: the same with ``TRITON_DIST_AUTOTUNE_ISOLATE=0``;
- ``upstream``: Triton's own autotuner (the plugin disabled) over the kernel's hand-written space.

The kernel is decorated and launched at once in the same process; the first call is timed from the
decoration to the device's synchronisation. Prints one table (medians); results in
``results/isolation_first_call_h200.json``.

    python benchmarks/bench_isolation_first_call_gpu.py [--reps 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _procs import run_fresh, serve  # noqa: E402

CASES = ("add", "softmax", "layernorm", "matmul")
SIDES = {"isolated": (True, {}), "unisolated": (True, {"TRITON_DIST_AUTOTUNE_ISOLATE": "0"}),
         "upstream": (False, {})}


def _inputs(name: str) -> tuple:
    import torch

    from kernels import KERNELS

    if name == "matmul":  # the shape where isolation cost most (512 x 4096 x 4096)
        return (torch.randn(512, 4096, device="cuda", dtype=torch.float16),
                torch.randn(4096, 4096, device="cuda", dtype=torch.float16))
    return KERNELS[name].make_inputs("gpu", "cuda")


def child_first() -> dict:
    import torch
    import triton

    from kernels import KERNELS

    name, generated = os.environ["TDP_CASE"], os.environ["TDP_GENERATED"] == "1"
    spec = KERNELS[name]
    args = _inputs(name)
    torch.cuda.synchronize()
    started = time.perf_counter()
    kernel = triton.autotune(configs=[] if generated else spec.configs("cuda"), key=spec.key)(spec.jit)
    spec.launch(kernel, *args)
    torch.cuda.synchronize()
    return {"first_call_s": time.perf_counter() - started, "candidates": len(getattr(kernel, "configs_timings", {})),
            "pick": str(kernel.best_config)}


def main() -> None:
    if serve(globals()):
        return
    from _common import save_results

    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    reps = parser.parse_args().reps
    results: dict = {case: {side: [] for side in SIDES} for case in CASES}
    for _ in range(reps):
        for case in CASES:
            for side, (plugin, extra) in SIDES.items():
                env = {**extra, "TDP_CASE": case, "TDP_GENERATED": "0" if side == "upstream" else "1"}
                results[case][side].append(run_fresh(__file__, "first", plugin, env, timeout=240))
    save_results("isolation_first_call_h200.json", results)
    print(f"{'case':10s} " + " ".join(f"{s:>12s}" for s in SIDES) + "   isolated/unisolated  isolated/upstream")
    for case, sides in results.items():
        med = {s: statistics.median(r["first_call_s"] for r in runs if "first_call_s" in r) if any(
            "first_call_s" in r for r in runs) else float("nan") for s, runs in sides.items()}
        print(f"{case:10s} " + " ".join(f"{med[s]:11.2f}s" for s in SIDES)
              + f"   {med['isolated'] / med['unisolated']:19.2f}x  {med['isolated'] / med['upstream']:16.2f}x")
        for s, runs in sides.items():
            for r in runs:
                if "error" in r:
                    print(f"   {case} {s}: {r['error'][:200]}")


if __name__ == "__main__":
    main()
