"""What GPU memory do the plugin's helper processes hold during and after tuning, and when is it
given back? (issue 36: helpers that cost nothing when idle)

One fresh process per setting of ``TRITON_DIST_AUTOTUNE_ISOLATE_IDLE`` (the default, 5 s, and
``0``: kept, as before there was a release), each with empty caches: it decorates ``configs=[]``
kernels (add, softmax; isolated by default), launches them once (the first call tunes, the
isolation worker runs every candidate), then reads ``nvidia-smi --query-compute-apps`` for every
process that descends from it (the isolation worker, compile workers) just after the first call,
and 3 s, 8 s and 20 s later; then tunes a new shape (the fresh worker's first job) and reads
again. Prints one table; results in ``results/isolation_idle_h200.json``.

    python benchmarks/bench_isolation_idle_gpu.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _procs import gpu_mib, helper_gpu_mib  # noqa: E402


def child() -> dict:
    import torch
    import triton

    import triton_dist_plugin  # noqa: F401
    from kernels import KERNELS

    kernels = {}
    for name in ("add", "softmax"):
        spec = KERNELS[name]
        kernels[name] = (spec, triton.autotune(configs=[], key=spec.key)(spec.jit))
    started = time.perf_counter()
    for spec, kernel in kernels.values():
        spec.launch(kernel, *spec.make_inputs("gpu", "cuda"))
    torch.cuda.synchronize()
    first = time.perf_counter() - started
    end = time.monotonic()
    samples = {"after first call": helper_gpu_mib()}
    for at in (3, 8, 20):
        time.sleep(max(0.0, end + at - time.monotonic()))
        samples[f"+{at}s"] = helper_gpu_mib()
    spec, kernel = kernels["add"]
    x, y = spec.make_inputs("gpu", "cuda")
    started = time.perf_counter()
    spec.launch(kernel, x[: x.numel() // 2], y[: y.numel() // 2])  # a new key: the worker's next job
    torch.cuda.synchronize()
    again = time.perf_counter() - started
    samples["after a new key"] = helper_gpu_mib()
    return {"first_call_s": first, "new_key_s": again, "own_mib": gpu_mib().get(os.getpid(), 0), "helpers_mib": samples}


def main() -> None:
    from _common import save_results

    if sys.argv[1:] == ["--child"]:
        print(json.dumps(child()), flush=True)
        return
    results = {}
    for idle in ("", "0"):
        env = {**os.environ, "TRITON_DIST_AUTOTUNE_ISOLATE_IDLE": idle}
        env.pop("TRITON_DIST_AUTOTUNE_DIR", None)
        with __import__("tempfile").TemporaryDirectory() as tmp:
            env.update(TRITON_CACHE_DIR=f"{tmp}/triton", TRITON_DIST_AUTOTUNE_DIR=f"{tmp}/tdp")
            done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                                  timeout=300)
        label = f"ISOLATE_IDLE={idle or 'unset (5 s)'}"
        results[label] = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
            "error": done.stderr[-2000:]}
    save_results("isolation_idle_h200.json", results)
    print(f"{'setting':26s} {'first call':>10s} {'new key':>8s}  helper GPU MiB: after first call, +3s, +8s, +20s, "
          "after a new key")
    for label, r in results.items():
        if "error" in r:
            print(label, "ERROR", r["error"][-300:])
            continue
        mib = [sum(v.values()) for v in r["helpers_mib"].values()]
        print(f"{label:26s} {r['first_call_s']:9.2f}s {r['new_key_s']:7.2f}s  {mib}")


if __name__ == "__main__":
    main()
