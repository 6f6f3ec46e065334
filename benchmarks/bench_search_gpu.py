"""Search on a GPU: the first call against upstream, a 1,152-config space, and warm starts.

    python benchmarks/bench_search_gpu.py [quick]

Every step is a fresh process with empty Triton and plugin caches unless it says otherwise.

1. ``first``: the first call of the 48-config fp16 matmul at 4096^3, the plugin (default search)
   and upstream, alternating.
2. ``truth``: the exhaustive ground truth of the large space (block sizes 32-256, ``BLOCK_K``
   32-128, ``GROUP_M`` 1/8, 2-8 warps, 2-5 stages: 1,152 configs) at 4096^3: every config
   compiled and screened (device events, 5 runs each), the best 25 again by
   ``triton.testing.do_bench`` (rep 200 ms).
   Kept in ``results/search_truth_h200.json`` and reused when present.
3. ``large``: the first call over that space with ``halving`` and with ``optuna``: seconds, how
   many candidates were compiled and screened, and the pick's time (rep 200 ms) against the
   truth's best.
4. ``warm``: a second shape (8192 x 2048 x 4096) of the 48-config matmul, cold (empty caches)
   and warm (the plugin cache of a process that tuned 4096^3; Triton's cache still empty, so
   every compile it skips is one it saves), with each pick's time against the 48 configs' best
   at that shape (rep 200 ms, measured in the cold process).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from _common import ROOT, save_results

TRUTH = ROOT / "benchmarks" / "results" / "search_truth_h200.json"
SHAPE, SECOND = (4096, 4096, 4096), (8192, 2048, 4096)


def large_space() -> list:
    import triton

    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=w, num_stages=s)
            for bm, bn, bk, g, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128),
                                                         (1, 8), (2, 4, 8), (2, 3, 4, 5))]


def inputs(shape):
    import torch

    m, n, k = shape
    torch.manual_seed(0)
    return (torch.randn(m, k, device="cuda", dtype=torch.float16),
            torch.randn(k, n, device="cuda", dtype=torch.float16))


def careful(mm, config, a, b, rep=200) -> float:
    """``do_bench`` ms of ``config`` launched directly (the compiled kernel is in memory)."""
    import triton

    meta = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return triton.testing.do_bench(lambda: mm.launch(mm.jit, a, b, **meta), warmup=25, rep=rep)


def tuned_call(configs, shape, notes: list):
    """Decorate, make inputs, time the first call; ``(seconds, tuner, a, b)``."""
    import torch
    import triton

    from kernels import KERNELS

    if os.environ.get("TDP_PLUGIN") == "1":
        from triton_dist_plugin import hookimpl, register

        class Notes:
            @hookimpl
            def tdp_on_tuned(self, record):
                notes.extend(record.notes)

        register(Notes())
    mm = KERNELS["matmul"]
    tuned = triton.autotune(configs=configs, key=mm.key)(mm.jit)
    a, b = inputs(shape)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    mm.launch(tuned, a, b)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, tuned, a, b


def counts(notes: list) -> dict:
    compiled = sum(int(n) for note in notes for n in re.findall(r"compiled (\d+) candidates", note))
    screened = [int(n) for note in notes for n in re.findall(r"screened (\d+) of", note)]
    return {"compiled": compiled, "screened": screened[-1] if screened else None}


def child_first() -> dict:
    from kernels import KERNELS

    notes: list = []
    seconds, tuned, _, _ = tuned_call(KERNELS["matmul"].configs("cuda"), SHAPE, notes)
    return {"first_call_s": seconds, "pick": str(tuned.best_config), **counts(notes)}


def child_truth() -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    space = large_space()
    seconds, tuned, a, b = tuned_call(space, SHAPE, [])  # compiles every config (screened whole)
    # The quick pass: every config's screening time from that tuning (device events, 5 runs);
    # failed ones (out of resources) are None and never launched here.
    quick = {}
    for config, timing in tuned.configs_timings.items():
        value = timing[0] if isinstance(timing, (list, tuple)) else timing
        quick[str(config)] = value if value < float("inf") else None
    by_name = {str(c): c for c in space}
    valid = sorted((t, n) for n, t in quick.items() if t is not None)
    final = {n: careful(mm, by_name[n], a, b) for _, n in valid[:25]}
    best = min(final, key=final.get)
    small = {str(c) for c in mm.configs("cuda")}
    in_48 = {n: t for n, t in final.items() if n in small}
    small_best = min(in_48, key=in_48.get) if in_48 else None
    return {"shape": SHAPE, "configs": len(space), "valid": len(valid), "quick_ms": quick, "final_ms": final,
            "best": best, "best_ms": final[best], "best_of_48": small_best, "tuning_s": seconds}


def child_large() -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(large_space(), SHAPE, notes)
    import triton

    known = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4)
    return {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_ms": careful(mm, tuned.best_config, a, b),
            "best_of_48_ms": careful(mm, known, a, b),  # the 48-config space's pick at 4096^3 (a subset)
            "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}


def child_warm() -> dict:
    """Tune ``SECOND`` (cold or warm, by the caches given); then the pick's time and, when cold,
    every candidate's (rep 200 ms), for the best of the 48 at that shape."""
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(mm.configs("cuda"), SECOND, notes)
    out = {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_ms": careful(mm, tuned.best_config, a, b),
           "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}
    if os.environ.get("TDP_ALL") == "1":
        every = {str(c): careful(mm, c, a, b) for c in mm.configs("cuda")}
        out["best_of_48"] = min(every, key=every.get)
        out["best_of_48_ms"] = min(every.values())
    return out


def child_tune_first_shape() -> dict:
    from kernels import KERNELS

    seconds, tuned, _, _ = tuned_call(KERNELS["matmul"].configs("cuda"), SHAPE, [])
    return {"first_call_s": seconds, "pick": str(tuned.best_config)}


def run_child(name: str, env: dict | None = None, plugin: bool = True, plugin_dir: str | None = None,
              triton_dir: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cache:
        path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])
        full = {**os.environ, "TRITON_CACHE_DIR": triton_dir or os.path.join(cache, "triton"),
                "TRITON_DIST_AUTOTUNE_DIR": plugin_dir or os.path.join(cache, "tdp"), "PYTHONPATH": path,
                "TDP_PLUGIN": "1" if plugin else "0", **(env or {})}
        if not plugin:
            full["TRITON_DIST_PLUGIN_DISABLE"] = "1"
        try:
            proc = subprocess.run([sys.executable, __file__, "child", name], env=full, capture_output=True,
                                  text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return {"error": "did not finish within 300s"}
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        if os.environ.get("TDP_PLUGIN") == "1":
            import triton_dist_plugin  # noqa: F401
        print(json.dumps(globals()[f"child_{sys.argv[2]}"](), default=str))
        return
    results: dict = {}
    quick = sys.argv[1:] == ["quick"]  # the warm starts and the large space with halving only
    saved = "search_quick_h200.json" if quick else "search_h200.json"

    def step(name: str, *args, **kwargs) -> dict:
        """One child; printed and saved at once, so a run cut short keeps what it measured."""
        results[name] = run_child(*args, **kwargs)
        print(name, json.dumps({k: v for k, v in results[name].items() if k not in ("quick_ms", "final_ms")})[:600],
              flush=True)
        save_results(saved, results)
        return results[name]

    if not quick:
        step("first_plugin", "first")
        step("first_upstream", "first", plugin=False)
    step("warm_cold", "warm", {} if quick else {"TDP_ALL": "1"})
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tuned_dir, \
            tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as triton_dir:
        # Plugin cache from a process that tuned the first shape; Triton's cache empty, then kept.
        step("warm_first_shape", "tune_first_shape", plugin_dir=tuned_dir, triton_dir=triton_dir)
        kept = tempfile.mkdtemp()
        shutil.copytree(tuned_dir, kept, dirs_exist_ok=True)
        step("warm_warm", "warm", plugin_dir=tuned_dir)
        step("warm_warm_triton_cache", "warm", plugin_dir=kept, triton_dir=triton_dir)
    step("large_halving", "large")
    if quick:
        return
    step("large_optuna", "large", {"TRITON_DIST_AUTOTUNE_SEARCH": "optuna"})
    if TRUTH.exists():
        truth = json.loads(TRUTH.read_text())
    else:
        truth = step("truth", "truth", {"TRITON_DIST_AUTOTUNE_SEARCH_WHOLE": "100000"})
        save_results(TRUTH.name, truth)
    results["first_plugin"], results["first_upstream"] = [results["first_plugin"]], [results["first_upstream"]]
    plugin = [r["first_call_s"] for r in results["first_plugin"] if "first_call_s" in r]
    upstream = [r["first_call_s"] for r in results["first_upstream"] if "first_call_s" in r]
    rows = []
    if plugin and upstream:
        rows.append(("48-config first call", f"plugin {min(plugin):.2f}s (of {plugin}), upstream {upstream[0]:.2f}s: "
                     f"{upstream[0] / min(plugin):.1f}x; picks {[r.get('pick') for r in results['first_plugin']]} "
                     f"vs upstream {results['first_upstream'][0].get('pick')}; best of the 48 at this shape: "
                     f"{truth.get('best_of_48')}"))
    for name in ("large_halving", "large_optuna"):
        r = results[name]
        if "pick_ms" in r:
            rows.append((name, f"{r['first_call_s']:.1f}s, compiled {r['compiled']}, screened {r['screened']} of "
                         f"{truth.get('configs')}; pick {r['pick_ms']:.4f} ms vs truth {truth['best_ms']:.4f} ms "
                         f"({r['pick_ms'] / truth['best_ms'] - 1:+.1%})"))
        else:
            rows.append((name, str(r)))
    cold, warm = results["warm_cold"], results["warm_warm"]
    if "first_call_s" in cold and "first_call_s" in warm:
        best_cold = cold["first_call_s"]
        rows.append(("warm start", f"cold {best_cold:.2f}s (compiled {cold['compiled']}), warm "
                     f"{warm['first_call_s']:.2f}s (compiled {warm['compiled']}, screened {warm['screened']}): "
                     f"{best_cold / warm['first_call_s']:.1f}x; picks {cold['pick_ms']:.4f} / {warm['pick_ms']:.4f} ms "
                     f"vs best of 48 {cold.get('best_of_48_ms', float('nan')):.4f} ms"))
    print(f"truth: {truth.get('valid')} of {truth.get('configs')} configs run; best {truth.get('best')} "
          f"{truth.get('best_ms', float('nan')):.4f} ms")
    for name, text in rows:
        print(f"{name:22} {text}")


if __name__ == "__main__":
    main()
