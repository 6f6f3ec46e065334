"""What does isolation cost a ``configs=[]`` kernel's first call, and what GPU memory do the
plugin's helpers hold during tuning, just after and once idle? (issue 36)

Cases: add, softmax, layernorm and the matmul at two shapes (512x4096x4096 and 4096^3, fp16) on a
GPU; the same kernels at their "tiny" sizes under the interpreter on a CPU (``--cpu``). Sides, each
a fresh process with empty caches, interleaved over the repetitions:

- ``isolated``: the plugin, ``configs=[]``, isolation at its default (on for generated spaces), the
  worker forked where that is safe (the default);
- ``fresh``: the same with ``TRITON_DIST_AUTOTUNE_ISOLATE_FORK=0``: the worker a fresh interpreter
  (how every worker started before the fork);
- ``unisolated``: ``TRITON_DIST_AUTOTUNE_ISOLATE=0``;
- ``upstream``: Triton's own autotuner (the plugin disabled) over the kernel's hand-written space
  (GPU only: it cannot tune under the interpreter);
- ``late``: isolated, but the kernel is decorated only after its inputs are on the GPU (the
  driver is then initialised: no fork, a fresh interpreter);
- ``memory``: isolated, with ``nvidia-smi --query-compute-apps`` read every 0.25 s for every
  process below it: the most during the first call, just after it, and
  ``TRITON_DIST_AUTOTUNE_ISOLATE_IDLE`` (5 s) + 3 s later. Its first call is not compared: the
  probe holds the driver, which the other sides do not pay for (an earlier version sampled on the
  ``isolated`` side itself, and its first calls carried that probe).

The ``configs=[]`` softmax is launched without its launcher's ``BLOCK_N``, so that the block is
generated (before 2026-12-05's last runs it was passed, and nothing was tuned). Except for
``late``, the kernel is decorated first (as a module of kernels is imported at the top
of a program), then its inputs are made, then it is called; the time is from the decoration to
the device's synchronisation after the first call. Prints one table (medians); results in
``results/isolation_first_call_<device>.json`` (``--out`` names another).

    python benchmarks/bench_isolation_first_call.py [--reps 2] [--cases add,matmul] [--sides isolated,upstream] [--cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _procs import helper_gpu_mib, run_fresh, serve  # noqa: E402

CASES = ("add", "softmax", "layernorm", "matmul", "matmul4k")
SIDES = {"isolated": (True, {}), "fresh": (True, {"TRITON_DIST_AUTOTUNE_ISOLATE_FORK": "0"}),
         "unisolated": (True, {"TRITON_DIST_AUTOTUNE_ISOLATE": "0"}), "upstream": (False, {}), "late": (True, {}),
         "memory": (True, {})}
IDLE_S = 5.0  # TRITON_DIST_AUTOTUNE_ISOLATE_IDLE's default


def _inputs(name: str, gpu: bool) -> tuple:
    import torch

    from kernels import KERNELS

    if not gpu:
        return KERNELS[name.removesuffix("4k")].make_inputs("tiny", "cpu")
    if name == "add":  # where isolation cost most (2^26 fp16)
        return tuple(torch.randn(1 << 26, device="cuda", dtype=torch.float16) for _ in range(2))
    if name == "matmul":  # 512 x 4096 x 4096
        return (torch.randn(512, 4096, device="cuda", dtype=torch.float16),
                torch.randn(4096, 4096, device="cuda", dtype=torch.float16))
    return KERNELS[name.removesuffix("4k")].make_inputs("gpu", "cuda")


_NOTES: list = []


def _softmax_generated(kernel, x):
    """The softmax without its launcher's ``BLOCK_N``, so that ``configs=[]`` generates it (a whole
    row, with its ``num_warps`` variants): the launcher's own launch leaves nothing to tune (its
    hand space, upstream's side, varies ``num_warps`` over the same block)."""
    import torch

    out = torch.empty_like(x)
    kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1])
    return out


def child_first() -> dict:
    import torch
    import triton

    if os.environ.get("TDP_SIDE") != "upstream":
        import triton_dist_plugin as tdp

        class Notes:
            @tdp.hookimpl
            def tdp_on_tuned(self, record):
                _NOTES.extend(record.notes)

        tdp.register(Notes())

    from kernels import KERNELS

    name, side = os.environ["TDP_CASE"], os.environ["TDP_SIDE"]
    gpu = os.environ.get("TRITON_INTERPRET") != "1"
    spec = KERNELS[name.removesuffix("4k")]
    configs = spec.configs("cuda" if gpu else "cpu") if side == "upstream" else []
    args = _inputs(name, gpu) if side == "late" else None  # the driver initialised before the decoration
    started = time.perf_counter()
    hints = {"hints": {"GROUP_M": [8]}} if spec.name == "matmul" and not configs else {}  # not a tiling parameter
    kernel = triton.autotune(configs=configs, key=spec.key, **hints)(spec.jit)
    if args is None:
        args = _inputs(name, gpu)
    peak: dict[int, int] = {}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.25):
            for pid, mib in helper_gpu_mib().items():
                peak[pid] = max(peak.get(pid, 0), mib)

    watch = threading.Thread(target=sample, daemon=True) if gpu and side == "memory" else None
    if watch is not None:
        watch.start()
    (_softmax_generated if spec.name == "softmax" and not configs else spec.launch)(kernel, *args)
    if gpu:
        torch.cuda.synchronize()
    first = time.perf_counter() - started
    result = {"first_call_s": first, "candidates": len(getattr(kernel, "configs_timings", {}) or {}),
              "pick": str(kernel.best_config)}
    shared = sys.modules.get("triton_dist_plugin.isolation.isolate")
    if shared is not None and shared._shared is not None:
        result["worker"] = shared._shared.began
    result["isolation"] = [n for n in _NOTES if "isolat" in n]  # how it ran there, or why it was not
    if watch is not None:
        sampling.set()
        watch.join()
        after = helper_gpu_mib()
        time.sleep(IDLE_S + 3)
        result["helpers_mib"] = {"during": sum(peak.values()), "after": sum(after.values()),
                                 "idle": sum(helper_gpu_mib().values())}
    return result


def main() -> None:
    if serve(globals()):
        return
    from _common import gpu_model, save_results

    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--cpu", action="store_true", help="the tiny sizes under the interpreter")
    parser.add_argument("--out", default="", help="results file name (default: by device)")
    options = parser.parse_args()
    sides = {s: SIDES[s] for s in options.sides.split(",") if s}
    cases = [c for c in options.cases.split(",") if c and not (options.cpu and c == "matmul4k")]
    results: dict = {case: {side: [] for side in SIDES} for case in cases}
    name = options.out or f"isolation_first_call_{'cpu' if options.cpu else gpu_model()}.json"
    for _ in range(options.reps):
        for case in cases:
            for side, (plugin, extra) in sides.items():
                if options.cpu and side == "upstream":  # Triton alone cannot tune under the interpreter
                    continue
                env = {**extra, "TDP_CASE": case, "TDP_SIDE": side, "TRITON_INTERPRET": "1" if options.cpu else "0"}
                results[case][side].append(run_fresh(__file__, "first", plugin, env, timeout=300))
        save_results(name, results)  # after each repetition: a run cut short keeps what it measured
    _table(results)


def _table(results: dict) -> None:
    print(f"{'case':9s} " + " ".join(f"{s:>10s}" for s in SIDES)
          + "  isolated/unisolated isolated/upstream  helper MiB during/after/idle")
    for case, sides in results.items():
        med = {}
        for side, runs in sides.items():
            times = [r["first_call_s"] for r in runs if "first_call_s" in r]  # (none: nan)
            med[side] = statistics.median(times) if times else float("nan")
        mib = [r["helpers_mib"] for r in sides["memory"] if "helpers_mib" in r]
        memory = " ".join("/".join(str(m[k]) for k in ("during", "after", "idle")) for m in mib) or "-"
        print(f"{case:9s} " + " ".join(f"{med[s]:9.2f}s" for s in SIDES)
              + f"  {med['isolated'] / med['unisolated']:18.2f}x {med['isolated'] / med['upstream']:16.2f}x  {memory}")
        for side, runs in sides.items():
            for r in runs:
                if "error" in r:
                    print(f"   {case} {side}: {r['error'][:200]}")
    workers = {s: sorted({r.get("worker", "-")[:60] for runs in (v[s] for v in results.values()) for r in runs})
               for s in ("isolated", "fresh", "late")}
    print("how the worker began:", workers)
    unisolated = sorted({n for v in results.values() for s in ("isolated", "fresh", "late") for r in v[s]
                         for n in r.get("isolation", []) if n.startswith("not isolated")})
    print("not isolated:", unisolated or "none")


if __name__ == "__main__":
    main()
