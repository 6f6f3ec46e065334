"""Host cost of what the launch guard replaces, on any machine (no GPU needed).

    python benchmarks/diagnostics/diag_launch_guard_cpu.py [--out launch_guard_parts_cpu.json]

On a tuned launch the plugin's previous cache-hit path asked Triton's binder for the call's
specialisation and looked its tuple up; the guard path asks a ``launch_guard`` plan for its key and
the launch values instead. Both are timed here on real ``JITFunction``s, with Triton's own binder
built for a CUDA target (which needs no driver) and CPU tensors standing in for device ones (the
plan checks ``is_cpu`` in place of ``is_cuda``): ``add`` (three pointers and a length) and a kernel
of 20 arguments, each with its arguments positional and by keyword. Microseconds per call, median
of 15 alternating rounds of 20,000 calls. The GPU launch itself is not here:
``benchmarks/bench_launch_gpu.py`` measures the whole launch on a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import host_loop  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="launch_guard_parts_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    import torch
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
            names = [p.name for p in fn.params][:len(call)]
            shapes = {"": (call, {"grid": (1,), "warmup": False}),
                      ", by keyword": ((), {"grid": (1,), "warmup": False, **dict(zip(names, call))})}
            for how, (args, kwargs) in shapes.items():
                named = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
                plan, why = launch_guard.build(fn, meta, args, backend, kwargs, device_attr="is_cpu")
                assert plan is not None, why
                table = {tuple(binder(*args, **named, **meta)[1]): 1}
                guarded = {plan.guard(args, kwargs)[0]: 1}
                rows[f"{name}{how}: binder + specialisation lookup (previous path)"] = (
                    lambda b=binder, a=args, k=named, m=meta, t=table: t.get(tuple(b(*a, **k, **m)[1])))
                rows[f"{name}{how}: guard + key lookup"] = (
                    lambda p=plan, a=args, k=kwargs, t=guarded: t.get(p.guard(a, k)[0]))
                rows[f"{name}{how}: bound dict for a grid lambda (guard)"] = (
                    lambda p=plan, a=args, k=kwargs: p.bound(a, k))
    times: dict = {k: [] for k in rows}
    for _ in range(15):
        for k, f in rows.items():
            times[k].append(host_loop(f, device=False))
    from _common import save_host_us

    save_host_us(options.out, "median_us", {k: statistics.median(v) for k, v in times.items()})


if __name__ == "__main__":
    main()
