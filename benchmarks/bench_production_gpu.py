"""Production paths on a GPU: picks that persist across processes, tuning ahead of time, and the
tuned kernel inside ``torch.compile(fullgraph=True)``.

    python benchmarks/bench_production_gpu.py

Every step is a fresh process; one plugin cache directory and one Triton cache are shared by the
steps that need them, as on one machine across restarts:

1. ``tune``: the first call of the 48-config fp16 matmul at 4096^3 (empty caches): tuned, stored.
2. ``second`` and ``direct``, interleaved 3 times each: a new process's first call through the
   plugin (0 candidates may be timed), and a direct launch of the same kernel with the stored
   pick (both find the compiled kernel in Triton's disk cache). Target: at most 1.2x.
3. ``pretune``: ``pretune`` over 8 matmul shapes (wall time and picks), then a later process
   launches all 8 and must time nothing.
4. ``compile``: a function that launches the autotuned matmul, compiled with
   ``torch.compile(fullgraph=True)``, for a key tuned before and a key never tuned, with the
   plugin and without it (upstream): output against eager, and whether it compiled.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
from _common import save_results, timed_call  # noqa: E402
from _procs import call_child, fresh_env, serve  # noqa: E402

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (1024, 4096, 4096),
          (4096, 1024, 4096), (4096, 4096, 1024), (8192, 1024, 1024), (512, 8192, 2048)]


def _counting():
    import triton_dist_plugin as tdp

    class Count:
        timed = 0
        hits: list = []

        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            Count.timed += 1

        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            Count.hits.append(record.cache_hit)

    tdp.register(Count())
    return Count


def _matmul_kernel():
    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    return mm, triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)


def child_first_call() -> dict:
    """This process's first call of the matmul: it tunes (and stores), or finds the stored pick."""
    import torch

    count = _counting()
    mm, tuned = _matmul_kernel()
    a, b = mm.make_inputs("gpu", "cuda")
    out, seconds = timed_call(lambda: mm.launch(tuned, a, b))
    return {"seconds": seconds, "timed": count.timed, "cache_hit": count.hits, "pick": tuned.best_config.all_kwargs(),
            "correct": bool(torch.allclose(out.float(), a.float() @ b.float(), atol=1e-1, rtol=1e-2))}


def child_direct() -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    pick = json.loads(os.environ["TDP_PICK"])
    a, b = mm.make_inputs("gpu", "cuda")
    _, seconds = timed_call(lambda: mm.launch(mm.jit, a, b, **pick))
    return {"seconds": seconds}


def _step(M: int, N: int, K: int) -> None:
    import torch

    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    _STEP_KERNEL[0].launch(_STEP_KERNEL[1], a, b)


_STEP_KERNEL: list = []


def child_pretune() -> dict:
    from triton_dist_plugin.cli.pretune import pretune

    _STEP_KERNEL[:] = _matmul_kernel()
    t0 = time.perf_counter()
    done = pretune(_step, [dict(M=m, N=n, K=k) for m, n, k in SHAPES], progress=False)
    return {"seconds": time.perf_counter() - t0,
            "tuned": [{"key": list(map(str, t.key)), "pick": t.pick, "timed": t.timed, "s": t.seconds} for t in done]}


def child_after_pretune() -> dict:
    import torch

    count = _counting()
    _STEP_KERNEL[:] = _matmul_kernel()
    t0 = time.perf_counter()
    for m, n, k in SHAPES:
        _step(m, n, k)
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - t0, "timed": count.timed, "hits": count.hits}


def child_compile() -> dict:
    import torch

    mm, tuned = _matmul_kernel()
    out: dict = {}
    for label, size in (("tuned before", 1024), ("never tuned", 768)):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        if label == "tuned before":
            mm.launch(tuned, a, b)

        def f(a, b):
            return mm.launch(tuned, a, b) * 2

        try:
            torch._dynamo.reset()
            compiled = torch.compile(f, fullgraph=True)
            got = compiled(a, b)
            torch.cuda.synchronize()
            want = f(a, b)
            out[label] = {"compiled": True, "equal_to_eager": bool(torch.equal(got, want)),
                          "close_to_torch": bool(torch.allclose(got.float(), (a.float() @ b.float()) * 2, atol=0.5,
                                                                rtol=1e-2))}
        except Exception as exc:
            out[label] = {"compiled": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return out


def run(child: str, env: dict, timeout: int = 400) -> dict:
    data, proc = call_child(__file__, child, env, timeout, cwd=ROOT)
    return data if data is not None else {"error": (proc.stdout + proc.stderr)[-3000:]}


def main() -> None:
    if serve(globals()):
        return
    base = tempfile.mkdtemp(prefix="tdp-prod-")
    env = fresh_env(base)
    results: dict = {"tune": run("first_call", env)}
    pick = results["tune"].get("pick")
    results["second"], results["direct"] = [], []
    for _ in range(3):
        results["second"].append(run("first_call", env))
        results["direct"].append(run("direct", {**env, "TDP_PICK": json.dumps(pick)}))
    env2 = {**env, "TRITON_DIST_AUTOTUNE_DIR": os.path.join(base, "tdp-pretune")}
    results["pretune"] = run("pretune", env2, timeout=500)
    results["after_pretune"] = run("after_pretune", env2)
    env3 = {**env, "TRITON_DIST_AUTOTUNE_DIR": os.path.join(base, "tdp-compile"),
            "TRITON_CACHE_DIR": os.path.join(base, "triton-compile")}
    results["compile_plugin"] = run("compile", env3)
    results["compile_upstream"] = run("compile", {**env3, "TRITON_DIST_PLUGIN_DISABLE": "1",
                                                  "TRITON_CACHE_DIR": os.path.join(base, "triton-compile-up")})
    save_results("production_h200.json", results)
    print(json.dumps(results, indent=1, default=str)[-5000:])
    second = sorted(r["seconds"] for r in results["second"] if "seconds" in r)
    direct = sorted(r["seconds"] for r in results["direct"] if "seconds" in r)
    print("\nstep                     result")
    print(f"tune (first process)     {results['tune'].get('seconds', float('nan')):.2f}s, "
          f"{results['tune'].get('timed')} timing calls")
    if second and direct:
        print(f"second process           first call {second[len(second) // 2] * 1e3:.1f} ms (median of 3), "
              f"{[r.get('timed') for r in results['second']]} candidates timed")
        print(f"direct launch            first call {direct[len(direct) // 2] * 1e3:.1f} ms; ratio "
              f"{second[len(second) // 2] / direct[len(direct) // 2]:.2f}x")
    pre = results["pretune"]
    print(f"pretune 8 shapes         {pre.get('seconds', float('nan')):.1f}s, "
          f"{sum(1 for t in pre.get('tuned', []) if t['timed'])} keys tuned")
    after = results["after_pretune"]
    print(f"later process            {after.get('timed')} candidates timed over 8 shapes, hits {after.get('hits')}")
    for side in ("compile_plugin", "compile_upstream"):
        print(f"{side:24} {json.dumps(results[side])[:300]}")


if __name__ == "__main__":
    main()
