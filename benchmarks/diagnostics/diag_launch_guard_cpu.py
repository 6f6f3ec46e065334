"""Host cost of what the launch guard replaces, on any machine (no GPU needed).

    python benchmarks/diagnostics/diag_launch_guard_cpu.py [--out launch_guard_parts_cpu.json]

On a tuned launch the plugin's previous cache-hit path asked Triton's binder for the call's
specialisation and looked its tuple up; the guard path asks a ``launch_guard`` plan for its key and
the launch values instead. Both are timed here on real ``JITFunction``s, with Triton's own binder
built for a CUDA target (which needs no driver) and CPU tensors standing in for device ones (the
plan checks ``is_cpu`` in place of ``is_cuda``): ``add`` (three pointers and a length) and a kernel
of 20 arguments. Microseconds per call, median of 15 alternating rounds of 20,000 calls. The GPU
launch itself is not here: ``benchmarks/bench_launch_gpu.py`` measures the whole launch on a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

SRC = '''
import triton.language as tl

def add(x, y, out, n, BLOCK: tl.constexpr):
    pass

def args20(a, b, c, d, e, out, n, sa, sb, sc, sd, se, so, k0, k1, k2, alpha, beta, flag, BLOCK: tl.constexpr):
    pass
'''


def _kernels(folder: Path) -> dict:
    from triton.runtime.jit import JITFunction

    path = folder / "guard_parts_kernels.py"
    path.write_text(SRC)
    spec = importlib.util.spec_from_file_location("guard_parts_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"add": JITFunction(module.add), "args20": JITFunction(module.args20)}


def _per_call(f, iters: int = 20000) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="launch_guard_parts_cpu.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    import torch
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import create_function_from_signature

    from triton_dist_plugin.patched import launch_guard

    backend = backends["nvidia"].compiler(GPUTarget("cuda", 90, 32))
    x = torch.zeros(4096)
    calls = {"add": ((x, x, x, 4096), {"BLOCK": 1024, "num_warps": 4}),
             "args20": ((x, x, x, x, x, x, 4096, 1, 1, 1, 1, 1, 1, 1, 2, 3, 0.5, 0.25, True),
                        {"BLOCK": 1024, "num_warps": 4})}
    rows: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        kernels = _kernels(Path(folder))
        for name, fn in kernels.items():
            call, meta = calls[name]
            binder = create_function_from_signature(fn.signature, fn.params, backend)
            plan, why = launch_guard.build(fn, meta, call, device_attr="is_cpu")
            assert plan is not None, why
            table = {tuple(binder(*call, **meta)[1]): 1}
            guarded = {plan.guard(call)[0]: 1}
            rows[f"{name}: binder + specialisation lookup (previous path)"] = (
                lambda b=binder, c=call, m=meta, t=table: t.get(tuple(b(*c, **m)[1])))
            rows[f"{name}: guard + key lookup"] = lambda p=plan, c=call, t=guarded: t.get(p.guard(c)[0])
            rows[f"{name}: bound dict for a grid lambda (guard)"] = lambda p=plan, c=call: p.bound(c)
    times: dict = {k: [] for k in rows}
    for _ in range(15):
        for k, f in rows.items():
            times[k].append(_per_call(f))
    out = {k: statistics.median(v) for k, v in times.items()}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _common import save_results

    save_results(Path(args.out).name, {"triton": triton.__version__, "torch": torch.__version__,
                                       "python": sys.version.split()[0], "median_us": out})
    for k, v in out.items():
        print(f"{k:55s} {v:6.2f} us")


if __name__ == "__main__":
    main()
