"""The floor under any first call of the 48-config matmul at 4096^3: the pick alone, compiled and run.

    python benchmarks/diagnostics/diag_compile_floor_gpu.py [--reps 3] [--out compile_floor_h200.json]

A tuner that starts from an empty cache must at least compile the config it picks. Each rep is a fresh
process with an empty Triton cache that launches the exhaustive best (BLOCK 128x256x64, 8 warps, 4 stages)
directly, once, between two synchronisations, after CUDA and the inputs are ready: that is the compile of
that one config on an idle host, plus loading and one run. A second launch gives the run alone. The
plugin is not imported. Upstream's first call of the same 48 configs (``bench_model_gpu.py first``) over
this floor bounds how far any autotuner's first call can beat it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from _common import launch_meta, timed_call  # noqa: E402
from _procs import run_fresh, serve  # noqa: E402

BEST = {"kwargs": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, "num_warps": 8, "num_stages": 4}


def child_pick() -> dict:
    from _search import SHAPE, inputs

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    a, b = inputs(SHAPE)
    _, first = timed_call(lambda: mm.launch(mm.jit, a, b, **launch_meta(BEST)))
    _, second = timed_call(lambda: mm.launch(mm.jit, a, b, **launch_meta(BEST)))
    return {"first_launch_s": first, "second_launch_s": second, "cpus": os.cpu_count()}


def main() -> None:
    if serve(globals()):
        return
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "compile_floor_h200.json"
    runs = [run_fresh(__file__, "pick", False) for _ in range(reps)]
    for r in runs:
        print(json.dumps(r))
    firsts = [r["first_launch_s"] for r in runs if "first_launch_s" in r]
    summary = {"runs": runs, "median_first_launch_s": statistics.median(firsts) if firsts else None}
    text = json.dumps(summary, indent=2)
    (Path(__file__).resolve().parents[1] / "results" / out).write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], out).write_text(text)
    if firsts:
        print(f"the pick alone, compiled and run once: median {statistics.median(firsts):.3f} s "
              f"(each: {' '.join(f'{s:.3f}' for s in firsts)})")


if __name__ == "__main__":
    main()
