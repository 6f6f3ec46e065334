"""Why can an op run slower under the plugin when the plugin picked the same config as upstream?

For each op, fresh processes alternate between upstream (plugin disabled) and the plugin
(imported before the libraries; once more with forked compile workers off). Each process tunes
the op on its first call, then records: the pick, an MD5 of every compiled binary of the tuned
kernels (so a different binary shows), the steady-state time on the tuning's own inputs, and on
freshly allocated inputs of the same shapes (so an effect of where the inputs sit in memory shows).

    python benchmarks/diagnostics/diag_same_pick.py --ops gems_group_mm,gems_addmm --reps 4
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin

from _common import save_results  # noqa: E402
from _procs import emit, result_of  # noqa: E402
from real_libs.cases import GEN  # noqa: E402
from real_libs.child import graph_ms, warm_up  # noqa: E402
from real_libs.ops import OPS  # noqa: E402
from real_libs.runner import child_env  # noqa: E402

VARIANTS = {
    "upstream": ("disabled", {}),
    "plugin": ("before", {}),
    "plugin-no-fork": ("before", {"TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES": "0"}),
}


def binaries(names: set) -> dict:
    """``{kernel name: sorted MD5s of its compiled binaries}`` from every live JITFunction."""
    from triton.runtime.jit import JITFunction

    found: dict = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, JITFunction) or obj.__name__ not in names:
                continue
        except Exception:
            continue
        for caches in getattr(obj, "device_caches", {}).values():
            for kernel in caches[0].values():
                asm = getattr(kernel, "asm", {}) or {}
                blob = asm.get("cubin") or asm.get("ptx") or b""
                blob = blob.encode() if isinstance(blob, str) else blob
                meta = getattr(kernel, "metadata", None)
                found.setdefault(obj.__name__, []).append(
                    f"{hashlib.md5(blob).hexdigest()[:10]} warps={getattr(meta, 'num_warps', '?')} "
                    f"shared={getattr(meta, 'shared', '?')}")
    return {k: sorted(v) for k, v in found.items()}


def child(op_name: str, mode: str) -> None:
    import torch

    if mode == "before":
        import triton_dist_plugin  # noqa: F401
    import flag_gems  # noqa: F401

    warm_up(torch)
    op = next(o for o in OPS if o.name == op_name)
    torch.manual_seed(0)
    GEN["cuda"] = torch.Generator(device="cuda").manual_seed(0)
    case = op.build(torch)
    step = case.step or (lambda: case.fwd())
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    own = [graph_ms(torch, step) for _ in range(3)]
    case2 = op.build(torch)  # new tensors, same shapes: the tuned key again
    step2 = case2.step or (lambda: case2.fwd())
    fresh = [graph_ms(torch, step2) for _ in range(3)]
    from triton.runtime.autotuner import Autotuner

    picks = {}
    names = set()
    for obj in gc.get_objects():
        try:
            if isinstance(obj, Autotuner) and obj.__dict__.get("best_config") is not None:
                name = getattr(getattr(obj, "base_fn", None), "__name__", "?")
                picks[name] = str(obj.best_config)
                names.add(name)
        except Exception:
            pass
    emit({"first_s": first, "own_ms": own, "fresh_ms": fresh, "picks": picks, "binaries": binaries(names)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="gems_group_mm,gems_addmm")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--child", nargs=2, metavar=("OP", "MODE"))
    parser.add_argument("--budget", type=float, default=300)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    deadline = time.perf_counter() + args.budget
    rows = []
    work = Path(tempfile.mkdtemp(prefix="same-pick-"))
    for rep in range(args.reps):
        for op in args.ops.split(","):
            for variant, (mode, extra) in VARIANTS.items():
                if time.perf_counter() > deadline:
                    continue
                scratch = Path(tempfile.mkdtemp(dir=work))
                env = {**child_env(mode, scratch), **extra}
                proc = subprocess.run([sys.executable, __file__, "--child", op, mode], env=env,
                                      capture_output=True, text=True, timeout=240)
                data = result_of(proc.stdout) if proc.stdout.strip() else {}
                if data is None:
                    data = {"error": proc.stderr[-800:]}
                rows.append({"op": op, "variant": variant, "rep": rep, **data})
                print(op, variant, rep, {k: data.get(k) for k in ("own_ms", "fresh_ms", "binaries", "error")},
                      flush=True)
    save_results("same_pick_h200.json", {"what": __doc__.splitlines()[0], "rows": rows})
    print(f"\n{'op':16} {'variant':15} {'own ms (median of reps)':>24} {'fresh ms':>9} binaries")
    for op in args.ops.split(","):
        for variant in VARIANTS:
            mine = [r for r in rows if r["op"] == op and r["variant"] == variant and "own_ms" in r]
            if not mine:
                continue
            own = statistics.median(statistics.median(r["own_ms"]) for r in mine)
            fresh = statistics.median(statistics.median(r["fresh_ms"]) for r in mine)
            bins = sorted({b for r in mine for v in r["binaries"].values() for b in v})
            print(f"{op:16} {variant:15} {own:24.4f} {fresh:9.4f} {len(bins)} distinct: {bins}")


if __name__ == "__main__":
    main()
