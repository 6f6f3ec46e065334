"""Failures that exist only on a GPU, seen by upstream's autotuner and through the plugin.

    python benchmarks/check_gpu_failures.py [--out results/gpu_failures_h200.json]
                                            [--sides upstream,plugin,after,give-up]
                                            [--scenarios hooks_own_bench,hooks_default_bench,all_oor,restore]

A block 4096 (or 2048) wide pipelined 100 deep takes long to compile (tens of seconds each on an
H200 host): the whole run takes several minutes; pick sides and scenarios to fit a lease.

Each side runs in a fresh process with empty Triton and plugin caches: ``upstream``
(``TRITON_DIST_PLUGIN_DISABLE=1``) and ``plugin`` (imported before the kernels are defined), and
the plugin again with ``after`` (imported once the kernels are decorated), and ``give-up``: the
plugin as it was before it stopped giving up slow compiles that the kernel's own hooks or timer
watch (``candidates.observed`` forced false), to show what that changed. Scenarios:

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
import subprocess
import sys
import tempfile
from pathlib import Path

from _procs import result_of, scrubbed_env

SIDES = ("upstream", "plugin", "after", "give-up")
SCENARIOS = ("hooks_own_bench", "hooks_default_bench", "all_oor", "restore")
CHILD = r'''
import json, os, sys, time
side, wanted = sys.argv[1], sys.argv[2].split(",")
if side != "after":
    import triton_dist_plugin  # noqa: F401  (inert under TRITON_DIST_PLUGIN_DISABLE=1)
if side == "give-up":
    from triton_dist_plugin.patched import candidates
    candidates.observed = lambda instance: False
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
    "all_oor": tuner([4096, 2048]),
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
# A first tuning readies Triton's per-device caches, as any earlier kernel of a program (or test
# of a suite) does: then every candidate below compiles in the forked workers.
warm = tuner([32, 64])
warm[(1,)](torch.zeros(N, device="cuda"), N)
for name in [n for n in ("hooks_own_bench", "hooks_default_bench") if n in wanted]:
    events.clear()
    src = torch.zeros(N, device="cuda")
    start = time.perf_counter()
    error = outcome(lambda: kernels[name][(1,)](src, N))
    torch.cuda.synchronize()
    out[name] = {"error": error, "has_exception": any(e[1] for e in events),
                 "exceptions": sorted({e[1] for e in events if e[1]}),
                 "balanced": events.count(("pre", None)) == sum(1 for e in events if e[0] == "post"),
                 "pick": str(kernels[name].best_config), "seconds": round(time.perf_counter() - start, 2)}
if "all_oor" in wanted:
    src = torch.zeros(N, device="cuda")
    k = kernels["all_oor"]
    first = outcome(lambda: k[(1,)](src, N))
    second = outcome(lambda: k[(1,)](src, N))
    out["all_oor"] = {"first": first, "second": second, "cached": [str(c) for c in k.cache.values()]}
if "restore" in wanted:
    src = torch.zeros(N, device="cuda")
    error = outcome(lambda: kernels["restore"][(1,)](src, N))
    torch.cuda.synchronize()
    out["restore"] = {"error": error, "all_one": bool((src == 1).all().item()),
                      "pick": str(kernels["restore"].best_config)}
print("RESULT " + json.dumps(out))
'''


def run(side: str, work: Path, scenarios: list) -> dict:
    cache = Path(tempfile.mkdtemp(prefix=f"cache-{side}-", dir=work))
    env = scrubbed_env(prefixes=("TRITON_DIST_", "TRITON_CACHE_DIR"))
    env.update(TRITON_CACHE_DIR=str(cache), TRITON_DIST_AUTOTUNE_DIR=str(cache / "plugin"), HOME=str(work))
    if side == "upstream":
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"
    else:
        env["TRITON_PRINT_AUTOTUNING"] = "1"
    script = work / "child.py"  # Triton reads a kernel's source from its file
    script.write_text(CHILD)
    try:
        proc = subprocess.run([sys.executable, str(script), side, ",".join(scenarios)], env=env, capture_output=True,
                              text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "did not finish within 600s"}
    result = result_of(proc.stdout)
    notes = [x.strip() for x in (proc.stdout + proc.stderr).splitlines() if "compiled" in x or "gave up" in x]
    if result is None:
        return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"}
    return {**result, "notes": notes[:12]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gpu_failures_h200.json")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    sides, scenarios = args.sides.split(","), args.scenarios.split(",")
    work = Path(tempfile.mkdtemp(prefix="tdp-gpu-failures-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    seen = {}
    for side in sides:  # each side saved as it ends: a lease may end first
        seen[side] = run(side, work, scenarios)
        args.out.write_text(json.dumps(seen, indent=1))
        print(f"{side}: {json.dumps({k: v for k, v in seen[side].items() if k != 'notes'})}", flush=True)
    print(json.dumps({s: v.get("notes") for s, v in seen.items()}, indent=1))
    width = 20
    print(f"{'scenario':{width}} {'field':14}" + "".join(f" {side:>22}" for side in sides))
    differ = 0
    for scenario in scenarios:
        fields = sorted({f for s in seen.values() for f in (s.get(scenario) or {}) if f not in ("seconds",)})
        for field in fields:
            values = [str((seen[s].get(scenario) or {}).get(field)) for s in sides]
            mark = "" if field == "pick" or len({v for s, v in zip(sides, values) if s != "give-up"}) == 1 \
                else "  <- differs"
            differ += bool(mark)
            print(f"{scenario:{width}} {field:14}" + "".join(f" {v[:22]:>22}" for v in values) + mark)
    for side, value in seen.items():
        if isinstance(value.get("error"), str):
            print(f"{side}: {value['error'][-500:]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
