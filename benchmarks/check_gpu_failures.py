"""Failures that exist only on a GPU, seen by upstream's autotuner and through the plugin.

    python benchmarks/check_gpu_failures.py [--out results/gpu_failures_h200.json]

Each side runs in a fresh process with empty Triton and plugin caches: ``upstream``
(``TRITON_DIST_PLUGIN_DISABLE=1``) and ``plugin`` (imported before the kernels are defined), and
the plugin again with ``after`` (imported once the kernels are decorated). Scenarios:

- ``hooks``: upstream's ``test_hooks``: a 4096-wide block pipelined 100 deep needs far more shared
  memory than the GPU has, so its launch raises ``OutOfResources`` at load, and the tuner's
  ``post_hook`` must receive it; with the kernel's own ``do_bench``, and with the default timer;
- ``all_oor``: every candidate out of resources: the exception the caller gets (upstream: the
  first config's ``OutOfResources`` at its launch), the same at a second call, what is cached;
- ``restore``: one candidate out of resources, ``restore_value`` on the output: the result, and
  no exception reaching the caller.

Prints a table of what differs, and the plugin's tuning notes (how long each compile took).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import json, os, sys, time
side = sys.argv[1]
if side != "after":
    import triton_dist_plugin  # noqa: F401  (inert under TRITON_DIST_PLUGIN_DISABLE=1)
import torch, triton, triton.language as tl

def bench(fn, quantiles):
    return triton.testing.do_bench(fn, quantiles=quantiles, warmup=1, rep=1)

@triton.jit
def staged(src, N, N_STAGES: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    for _ in tl.range(tl.cdiv(N, BLOCK_SIZE), num_stages=N_STAGES):
        x = tl.load(src + offsets, mask=offsets < N)
        tl.store(src + offsets, x + 1, mask=offsets < N)
        offsets += BLOCK_SIZE

def tuner(blocks, **options):
    configs = [triton.Config({"BLOCK_SIZE": b}) for b in blocks]
    return triton.autotune(configs=configs, key=["N"], **options)(
        triton.heuristics({"N_STAGES": lambda nargs: 100})(staged))

events = []
def pre(*args, **kwargs):
    events.append(("pre", None))
def post(*args, exception):
    events.append(("post", type(exception).__name__ if exception is not None else None))

kernels = {
    "hooks_own_bench": tuner([4096, 32], do_bench=bench, pre_hook=pre, post_hook=post),
    "hooks_default_bench": tuner([4096, 32], pre_hook=pre, post_hook=post),
    "all_oor": tuner([4096, 8192]),
    "restore": tuner([4096, 32], restore_value=["src"]),
}
if side == "after":
    import triton_dist_plugin  # noqa: F401
    assert triton_dist_plugin.is_active()

def outcome(fn):
    try:
        fn()
        return None
    except Exception as exc:
        return type(exc).__name__

out = {}
N = 4096
for name in ("hooks_own_bench", "hooks_default_bench"):
    events.clear()
    src = torch.zeros(N, device="cuda")
    start = time.perf_counter()
    error = outcome(lambda: kernels[name][(1,)](src, N))
    torch.cuda.synchronize()
    out[name] = {"error": error, "has_exception": any(e[1] for e in events),
                 "exceptions": sorted({e[1] for e in events if e[1]}),
                 "balanced": events.count(("pre", None)) == sum(1 for e in events if e[0] == "post"),
                 "pick": str(kernels[name].best_config), "seconds": round(time.perf_counter() - start, 2)}
src = torch.zeros(N, device="cuda")
k = kernels["all_oor"]
first = outcome(lambda: k[(1,)](src, N))
second = outcome(lambda: k[(1,)](src, N))
out["all_oor"] = {"first": first, "second": second, "cached": [str(c) for c in k.cache.values()]}
src = torch.zeros(N, device="cuda")
error = outcome(lambda: kernels["restore"][(1,)](src, N))
torch.cuda.synchronize()
out["restore"] = {"error": error, "all_one": bool((src == 1).all().item()),
                  "pick": str(kernels["restore"].best_config)}
print("RESULT " + json.dumps(out))
'''


def run(side: str, work: Path) -> dict:
    cache = Path(tempfile.mkdtemp(prefix=f"cache-{side}-", dir=work))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_DIST_", "TRITON_CACHE_DIR"))}
    env.update(TRITON_CACHE_DIR=str(cache), TRITON_DIST_AUTOTUNE_DIR=str(cache / "plugin"), HOME=str(work))
    if side == "upstream":
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"
    else:
        env["TRITON_PRINT_AUTOTUNING"] = "1"
    proc = subprocess.run([sys.executable, "-c", CHILD, side], env=env, capture_output=True, text=True, timeout=400)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    notes = [x.strip() for x in (proc.stdout + proc.stderr).splitlines() if "compiled" in x or "gave up" in x]
    if line is None:
        return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"}
    return {**json.loads(line[len("RESULT "):]), "notes": notes[:12]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gpu_failures_h200.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tdp-gpu-failures-"))
    seen = {side: run(side, work) for side in ("upstream", "plugin", "after")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(seen, indent=1))
    print(json.dumps({s: v.get("notes") for s, v in seen.items()}, indent=1))
    width = 20
    print(f"{'scenario':{width}} {'field':14} {'upstream':>22} {'plugin':>22} {'after':>22}")
    differ = 0
    for scenario in ("hooks_own_bench", "hooks_default_bench", "all_oor", "restore"):
        fields = sorted({f for s in seen.values() for f in (s.get(scenario) or {}) if f not in ("seconds",)})
        for field in fields:
            values = [str((seen[s].get(scenario) or {}).get(field)) for s in ("upstream", "plugin", "after")]
            mark = "" if field == "pick" or len(set(values)) == 1 else "  <- differs"
            differ += bool(mark)
            print(f"{scenario:{width}} {field:14} {values[0][:22]:>22} {values[1][:22]:>22} {values[2][:22]:>22}{mark}")
    for side, value in seen.items():
        if "error" in value and isinstance(value["error"], str):
            print(f"{side}: {value['error'][-500:]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
