"""Upstream triton.autotune and the plugin side by side, on one GPU, in one run.

    python benchmarks/bench_foundation.py [--out results.json]

Importing the plugin patches Triton, so each side runs in its own process (same kernels, same
inputs); this script starts both and prints a table. Measured:

1. launch of an already-tuned kernel (tiny add, cache hit): host time per call against a direct
   launch of the same compiled kernel, in the same process, three rounds;
2. timing of a ~1 us kernel: event timing (do_bench), the plugin's ``profiler`` method, and the
   raw CUPTI kernel time from ``torch.profiler`` (the reference);
3. the 48-config fp16 matmul at 4096^3: first-call tuning time and the pick of each side, then
   both picks timed again carefully in one process (median of do_bench, alternating, 5 rounds);
4. (plugin) threads launching one autotuned kernel with different keys: results checked;
5. (plugin) ``cache_results``: a second process finds the pick in Triton's disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _procs import ROOT, emit, result_of


def child(side: str) -> dict:
    if side == "plugin":
        import triton_dist_plugin  # noqa: F401  (patches Triton)
    import threading

    import torch
    import triton

    from kernels import KERNELS

    out: dict = {"side": side, "triton": triton.__version__, "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name(0)}
    add = KERNELS["add"]
    n = 1 << 12
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    o = torch.empty_like(x)
    add_configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024) for w in (2, 4)]
    tuned = triton.autotune(configs=add_configs, key=["n"])(add.jit)
    grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
    tuned[grid](x, y, o, n)
    torch.cuda.synchronize()
    best = tuned.best_config
    direct_grid = (triton.cdiv(n, best.kwargs["BLOCK"]),)
    add.jit[direct_grid](x, y, o, n, BLOCK=best.kwargs["BLOCK"], num_warps=best.num_warps)
    torch.cuda.synchronize()

    from _common import config_dict, do_bench_rounds, interleaved, launch_meta, timed_call

    BL, NW = best.kwargs["BLOCK"], best.num_warps
    fns = {
        "tuned_us": lambda: tuned[grid](x, y, o, n),
        # ANCHORS' direct launch: the chosen config's constexpr and warps, a tuple grid.
        "direct_us": lambda: add.jit[(triton.cdiv(n, BL),)](x, y, o, n, BLOCK=BL, num_warps=NW),
        # The same compiled kernel launched directly with the autotuned launch's grid function.
        "direct_same_grid_us": lambda: add.jit[grid](x, y, o, n, BLOCK=BL, num_warps=NW),
    }
    if side == "plugin":
        from triton_dist_plugin.patched import direct

        os.environ[direct.DIRECT_ENV] = "0"  # read when a tuned key gets its launcher
        tuned_off = triton.autotune(configs=add_configs, key=["n"])(add.jit)
        tuned_off[grid](x, y, o, n)
        tuned_off[grid](x, y, o, n)
        del os.environ[direct.DIRECT_ENV]
        fns["tuned_direct_launch_off_us"] = lambda: tuned_off[grid](x, y, o, n)
    rounds = interleaved(fns)
    for r in rounds:
        r["ratio"] = r["tuned_us"] / r["direct_us"]
        r["ratio_same_grid"] = r["tuned_us"] / r["direct_same_grid_us"]
    out["dispatch"] = rounds
    out["dispatch_median_us"] = {k: statistics.median(r[k] for r in rounds) for k in fns}
    out["dispatch_median_ratio"] = statistics.median(r["ratio"] for r in rounds)
    out["dispatch_median_ratio_same_grid"] = statistics.median(r["ratio_same_grid"] for r in rounds)
    if os.environ.get("TDP_DISPATCH_ONLY"):
        return out

    # 2. a ~1 us kernel timed three ways
    call = lambda: add.jit[direct_grid](x, y, o, n, BLOCK=best.kwargs["BLOCK"], num_warps=best.num_warps)  # noqa
    ev = triton.testing.do_bench(call, return_mode="median")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(100):
            call()
        torch.cuda.synchronize()
    ks = [e.device_time for e in prof.events() if e.device_type.name == "CUDA" and "add_kernel" in e.name]
    out["short_kernel"] = {"event_ms": ev, "cupti_ms": statistics.median(ks) / 1e3 if ks else None}
    if side == "plugin":
        from triton_dist_plugin import timing

        out["short_kernel"]["plugin_profiler_ms"] = timing.bench_profiler(call, "cuda", "add_kernel", None, None,
                                                                          (0.5, 0.2, 0.8))[0]
        out["short_kernel"]["plugin_cudagraph_ms"] = timing.bench_cudagraph(call, "cuda", None, None, (0.5,))[0]

    # 3. the 48-config matmul
    mm = KERNELS["matmul"]
    tuned_mm = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    a, b = mm.make_inputs("gpu", "cuda")
    c, first_call = timed_call(lambda: mm.launch(tuned_mm, a, b))
    ref = a.float() @ b.float()
    pick = tuned_mm.best_config
    vals = sorted(v[0] for v in tuned_mm.configs_timings.values())
    out["matmul"] = {"first_call_s": first_call, "n_configs": len(mm.configs("cuda")),
                     "pick": config_dict(pick),
                     "rel_err": ((c.float() - ref).norm() / ref.norm()).item(), "tuning_min_ms": vals[0],
                     "n_failed": sum(v == float("inf") for v in vals)}
    other = json.loads(os.environ.get("TDP_OTHER_PICK", "null"))
    if other:
        picks = {"plugin": out["matmul"]["pick"], "upstream": other}
        meds = do_bench_rounds({k: lambda p=p: mm.launch(mm.jit, a, b, **launch_meta(p)) for k, p in picks.items()},
                               rounds=5, warmup=100, rep=500)
        out["matmul"]["remeasured_ms"] = {k: statistics.median(v) for k, v in meds.items()}

    # 4. threads, different keys, one kernel
    if side == "plugin":
        acc = triton.autotune(configs=add_configs, key=["n"])(add.jit)
        errors = []
        barrier = threading.Barrier(8)

        def worker(m):
            try:
                barrier.wait()
                for _ in range(20):
                    xs, ys = torch.randn(m, device="cuda"), torch.randn(m, device="cuda")
                    os_ = torch.empty_like(xs)
                    acc[lambda meta: (triton.cdiv(m, meta["BLOCK"]),)](xs, ys, os_, m)
                    torch.cuda.synchronize()
                    if not torch.equal(os_, xs + ys):
                        errors.append(m)
            except Exception as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(1000 + 977 * i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        out["threads"] = {"n_threads": 8, "keys_tuned": len(acc.cache), "errors": errors[:5]}
    return out


def run_child(side: str, env: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", side], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, timeout=900)
    if proc.returncode != 0:
        return {"side": side, "error": proc.stderr[-3000:]}
    return result_of(proc.stdout)


def cache_probe(cache_dir: str) -> dict:
    code = (
        "import triton_dist_plugin as t, torch, triton\nfrom kernels import KERNELS\n"
        "hits=[]\nclass P:\n    @t.hookimpl\n    def tdp_on_tuned(self, record): hits.append(record.cache_hit)\n"
        "t.register(P())\nadd=KERNELS['add']\n"
        "k=triton.autotune(configs=add.configs('cuda'), key=add.key, cache_results=True)(add.jit)\n"
        "x,y=add.make_inputs('gpu','cuda')\no=add.launch(k,x,y)\ntorch.cuda.synchronize()\n"
        "print(hits, torch.equal(o, x+y))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_CACHE_DIR": cache_dir,
           "TRITON_DIST_AUTOTUNE_DIR": os.path.join(cache_dir, "tdp")}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                           timeout=600) for _ in range(2)]
    return {"first": (runs[0].stdout or runs[0].stderr[-500:]).strip(),
            "second": (runs[1].stdout or runs[1].stderr[-500:]).strip()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--out", default="foundation_h200.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    if args.child:
        emit(child(args.child))
        return
    if os.environ.get("TDP_DISPATCH_ONLY"):
        from _common import save_results

        sides = {side: run_child(side, {}) for side in ("upstream", "plugin")}
        save_results("foundation_dispatch_h200.json", sides)
        for side, r in sides.items():
            print(side, r.get("error", ""))
            for k in ("dispatch_median_us", "dispatch_median_ratio", "dispatch_median_ratio_same_grid"):
                v = r.get(k)
                print(f"   {k}: {({a: round(b, 2) for a, b in v.items()} if isinstance(v, dict) else round(v, 3))}")
        return
    upstream = run_child("upstream", {})
    pick = (upstream.get("matmul") or {}).get("pick")
    plugin = run_child("plugin", {"TDP_OTHER_PICK": json.dumps(pick)})
    with tempfile.TemporaryDirectory() as d:
        disk = cache_probe(d)
    results = {"upstream": upstream, "plugin": plugin, "disk_cache": disk}
    from _common import save_results

    save_results(Path(args.out).name, results)
    for side in (upstream, plugin):
        if "error" in side:
            print(side["side"], "ERROR", side["error"])
    print(json.dumps(results, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
