"""Faults on a GPU: planted crashing and hanging candidates, a CUDA-graph capture of an untuned key,
and what candidate isolation costs. Each scenario runs in its own process, so one that kills or
hangs its process is observed from outside, and each reports whether its process is still usable.

    python benchmarks/bench_faults_gpu.py [cost | isolate]

1. ``isolate``: a kernel with an out-of-bounds-write config and a never-ending config among good
   ones, tuned with ``TRITON_DIST_AUTOTUNE_ISOLATE=1``, then without isolation (``=0``), and with
   the plugin off (upstream).
2. ``capture``: a key never tuned, launched inside ``torch.cuda.graph``: default (raise), with
   ``TRITON_DIST_AUTOTUNE_ON_CAPTURE=fallback``, and upstream.
3. ``cost``: first call of the 48-config matmul with isolation off and on (fresh processes, empty
   caches), to give isolation's cost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings

from _common import collect_notes, gpu_model, save_results, timed_call
from _procs import call_child, fresh_env, last_stderr_line, serve

CHILD_TIMEOUT = 180


def _usable() -> str:
    """Does this process still compute correctly on the GPU after what happened?"""
    import torch

    try:
        a = torch.randn(256, 256, device="cuda")
        ok = torch.allclose(a @ torch.eye(256, device="cuda"), a)
        torch.cuda.synchronize()
        return "usable" if ok else "wrong results"
    except Exception as exc:
        return f"unusable: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}"


def child_isolate() -> dict:
    import torch
    import triton
    from _faulty_kernels import CONFIGS, planted

    kernel = triton.autotune(configs=CONFIGS, key=["n"])(planted)
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    stop = torch.zeros(1, device="cuda", dtype=torch.int32)
    t0 = time.perf_counter()
    try:
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, stop, n)
        torch.cuda.synchronize()
        result = {"tuning": "finished", "pick": str(kernel.best_config), "correct": bool(torch.equal(out, x))}
    except Exception as exc:
        result = {"tuning": f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    result["seconds"] = time.perf_counter() - t0
    result["failures"] = {str(c): r for c, r in (getattr(kernel, "tdp_failures", None) or {}).items()}
    timings = getattr(kernel, "configs_timings", None) or {}
    result["timings"] = {str(c): (t[0] if isinstance(t, (list, tuple)) else t) for c, t in timings.items()}
    result["process"] = _usable()
    return result


def child_capture() -> dict:
    import torch
    import triton

    from kernels import KERNELS

    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs("cuda"), key=add.key)(add.jit)
    x, y = add.make_inputs("gpu", "cuda")
    add.launch(kernel, x, y)  # key of this size tuned before the capture
    small_x, small_y = x[: x.numel() // 2 + 1], y[: y.numel() // 2 + 1]  # a size never tuned
    out: dict = {}
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.cuda.graph(graph):
                got = add.launch(kernel, small_x, small_y)
            graph.replay()
            torch.cuda.synchronize()
            out["capture"] = "captured"
            out["correct"] = bool(torch.allclose(got, small_x + small_y))
        except Exception as exc:
            out["capture"] = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    out["warnings"] = [str(w.message)[:200] for w in caught if issubclass(w.category, RuntimeWarning)]
    out["process"] = _usable()
    return out


def child_cost() -> dict:
    """The first call of the 48-config matmul, then of a second key (4096 x 4096 x 2048) of the
    same kernel in the same process: what isolation costs the first tuning of a process (the
    worker starts) and each one after (the worker is there). As in a program, the kernel is
    decorated first (its module's import), then the inputs are made, then it is called:
    ``program_s`` is decoration to result, what the whole program waits."""
    import torch
    import triton

    from kernels import KERNELS

    notes = collect_notes(keep=lambda n: "isolat" in n) if os.environ.get("TDP_PLUGIN") == "1" else []
    mm = KERNELS["matmul"]
    t_decorated = time.perf_counter()
    tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    a, b = mm.make_inputs("gpu", "cuda")
    _, first = timed_call(lambda: mm.launch(tuned, a, b))
    program = time.perf_counter() - t_decorated
    a = torch.randn(4096, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 4096, device="cuda", dtype=torch.float16)
    _, second = timed_call(lambda: mm.launch(tuned, a, b))
    return {"first_call_s": first, "program_s": program, "second_key_s": second, "notes": notes}


def run_child(name: str, env: dict, plugin: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        try:
            data, proc = call_child(__file__, name, fresh_env(cache, plugin, env), timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            return {"process": f"hung: killed after {CHILD_TIMEOUT}s"}
        if data is None:
            data = {"process": f"died (exit code {proc.returncode}): {last_stderr_line(proc)[:200]}"}
        data["wall_s"] = time.perf_counter() - t0
        return data


def main() -> None:
    if serve(globals()):
        return
    only_cost = sys.argv[1:] == ["cost"]  # ``cost``: isolation's cost alone, into its own results file
    only_isolate = sys.argv[1:] == ["isolate"]  # ``isolate``: scenario 1 alone (``faults_isolate_<gpu>.json``)
    results = {} if only_cost else {
        "isolate_on": run_child("isolate", {"TRITON_DIST_AUTOTUNE_ISOLATE": "1",
                                            "TRITON_DIST_AUTOTUNE_ISOLATE_TIMEOUT": "10"}),
        "isolate_off": run_child("isolate", {"TRITON_DIST_AUTOTUNE_ISOLATE": "0"}),
        "isolate_upstream": run_child("isolate", {}, plugin=False),
    }
    if not (only_cost or only_isolate):
        results.update({
            "capture_default": run_child("capture", {}),
            "capture_fallback": run_child("capture", {"TRITON_DIST_AUTOTUNE_ON_CAPTURE": "fallback"}),
            "capture_upstream": run_child("capture", {}, plugin=False),
        })
    for _ in range(0 if only_isolate else 3 if only_cost else 2):
        for mode in ("0", "1"):
            cost = run_child("cost", {"TRITON_DIST_AUTOTUNE_ISOLATE": mode})
            results.setdefault(f"cost_isolate_{mode}", []).append(cost.get("first_call_s"))
            results.setdefault(f"cost_isolate_{mode}_second_key", []).append(cost.get("second_key_s"))
            results.setdefault(f"cost_isolate_{mode}_program", []).append(cost.get("program_s"))
            results.setdefault(f"cost_isolate_{mode}_process", []).append(cost.get("wall_s"))
            results.setdefault(f"cost_isolate_{mode}_notes", []).append(cost.get("notes"))
    what = "isolation_cost" if only_cost else "faults_isolate" if only_isolate else "faults"
    save_results(f"{what}_{gpu_model()}.json", results)  # (on an H200: the names the docs cite)
    for name, r in results.items():
        if isinstance(r, list):
            print(f"{name:20} {r}")
            continue
        what = r.get("tuning") or r.get("capture") or ""
        print(f"{name:20} {what[:90]:90} | {r.get('process')}")
        for config, reason in (r.get("failures") or {}).items():
            print(f"{'':22}failed {config[:50]}: {reason[:90]}")
    for suffix, what in (("", "the 48-config matmul's first call"),
                         ("_program", "the program (decoration to first result)"),
                         ("_process", "the whole process (start to exit, both keys)"),
                         ("_second_key", "a second key's first call in the same process")):
        off, on = results.get(f"cost_isolate_0{suffix}"), results.get(f"cost_isolate_1{suffix}")
        if off and on and all(off) and all(on):
            print(f"isolation cost on {what}: {min(on) / min(off):.2f}x "
                  f"({min(off):.2f}s -> {min(on):.2f}s, best of {len(on)})")


if __name__ == "__main__":
    main()
