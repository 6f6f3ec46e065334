"""Host cost of a cache-hit launch's Python path, on any machine: everything but the driver's launch.

    python benchmarks/diagnostics/diag_launch_path_cpu.py [--out launch_path_cpu.json]

Without a GPU, Triton cannot compile or launch; everything a launch does on the host before the
driver can still run. Here Triton's driver answers device 0 and stream 0, compiling makes a stand-in
kernel whose launch does nothing, CPU tensors stand in for the device's, and the rest is the
installed Triton's and the plugin's own code:
``JITFunction.run`` (binder, cache key, kernel cache, launch metadata), upstream's ``Autotuner.run``
(the plugin deactivated) and the plugin's cache-hit path (its key, the direct launcher, the launch
guard). Rows, for the add kernel (three pointers and a length) with a grid lambda as users write it:

- ``direct``: ``add_kernel[(blocks,)](x, y, o, n, BLOCK=..., num_warps=...)``, ANCHORS' direct launch;
- ``direct, grid lambda``: the same with the tuned launch's grid lambda;
- ``upstream autotuned``: ``tuned[grid](x, y, o, n)`` through upstream's ``Autotuner.run``;
- ``plugin``: the same through the plugin (the guard's path), positional and by keyword;
- ``plugin, binder path``: the plugin's launcher with no guard plan (Triton's binder on every call);
- ``plugin, Python path``: the plugin's cache-hit path in Python (the compiled one off), positional and
  by keyword (the ``plugin`` rows are the compiled path where it builds);
- ``triton.cdiv`` alone, and the same division written out: what a grid lambda's division costs.

Microseconds per call, median of 15 alternating rounds of 20,000 calls. The driver's launch (Triton's
C launcher and the CUDA driver, about 9 us of a 25 us launch on the H200 host) is not in any row:
``benchmarks/bench_launch_gpu.py`` measures the whole launch on a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # the compiled path (JITFunction), which kernels/ would not pick here

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from _common import host_loop  # noqa: E402


class _Launched:
    """A compiled kernel's stand-in: its launch does nothing; its launch metadata is what Triton's is
    when an enter hook may listen (a lazy dict)."""

    function, packed_metadata = 1, (4, 1, 0)

    def __init__(self, key: str):
        self.key = key

    def run(self, *launch) -> None:
        pass

    def launch_metadata(self, grid, stream, *args):
        from triton import knobs
        from triton.compiler.compiler import LazyDict

        if knobs.runtime.launch_enter_hook is None:
            return None
        return LazyDict({"name": "add_kernel", "function": self.function, "stream": stream})


class _Device0:
    """Triton's active driver as it answers on a one-GPU host, without one."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0


def _stand_in(fn) -> None:
    """``fn`` on device 0 of a CUDA target: Triton's binder and caches; compiling makes a ``_Launched``.
    CPU tensors stand in for the device's (the launch guard checks ``is_cpu`` in place of ``is_cuda``)."""
    import triton.runtime.jit as jit
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget

    from triton_dist_plugin.patched import launch_guard

    launch_guard.DEVICE_ATTR = "is_cpu"
    driver = type("Driver", (), {"active": _Device0()})()
    jit.driver = sys.modules["triton.runtime.driver"].driver = driver
    backend = backends["nvidia"].compiler(GPUTarget("cuda", 90, 32))
    caches = ({}, {}, backend.target, backend, jit.create_function_from_signature(fn.signature, fn.params, backend))
    fn.device_caches[0] = caches

    def compile_(key, signature, device, constexprs, options, attrs, warmup):
        return caches[0].setdefault(key, _Launched(key))

    fn._do_compile = compile_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="launch_path_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    import torch
    import triton

    import triton_dist_plugin
    from kernels import KERNELS
    from triton_dist_plugin.patched import direct, kernel_state

    add = KERNELS["add"].jit
    _stand_in(add)
    n = 4096
    x, y, o = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (512, 1024)]
    key = (n, "torch.float32", "torch.float32", "torch.float32")
    grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
    block = triton.cdiv(n, 1024)

    def tuner(on_binder: bool = False):
        tuned = triton.autotune(configs=configs, key=["n"])(add)
        tuned.cache[key] = configs[1]  # tuned already: every launch below is a cache hit
        for _ in range(4):  # the full path, then the binder's, then the guard learns the kernel
            tuned[grid](x, y, o, n)
            tuned[grid](x_ptr=x, y_ptr=y, o_ptr=o, n=n)
        for launcher in kernel_state.state_of(tuned).launchers.values():
            assert launcher is not None, "no direct launcher: the stand-in driver is not in place"
            if on_binder:
                launcher.plans, launcher.attempts = (), direct._MOST_ATTEMPTS
        return tuned

    plugin, binder, python = tuner(), tuner(on_binder=True), tuner()
    served = [bool(p.entries) for h in kernel_state.state_of(plugin).launchers.values() for p in h.plans]
    assert served and all(served), "the launch guard does not serve the plugin's rows"
    triton_dist_plugin.deactivate()
    upstream = triton.autotune(configs=configs, key=["n"])(add)
    upstream.cache[key] = configs[1]
    triton_dist_plugin.activate()
    for tuned in (plugin, binder, python):  # activation starts each afresh: its fast path comes back at once
        tuned[grid](x, y, o, n)
    run = python.__dict__.get("run")
    slow = getattr(run, "slow", run)  # the Python path the compiled one hands calls to (kept over re-activations)
    python.__dict__["run"] = slow
    rows = {
        "direct": lambda: add[(block,)](x, y, o, n, BLOCK=1024, num_warps=4),
        "direct, grid lambda": lambda: add[grid](x, y, o, n, BLOCK=1024, num_warps=4),
        "upstream autotuned": lambda: upstream[grid](x, y, o, n),
        "plugin": lambda: plugin[grid](x, y, o, n),
        "plugin, by keyword": lambda: plugin[grid](x_ptr=x, y_ptr=y, o_ptr=o, n=n),
        "plugin, binder path": lambda: binder[grid](x, y, o, n),
        "plugin, Python path": lambda: python[grid](x, y, o, n),
        "plugin, Python path, by keyword": lambda: python[grid](x_ptr=x, y_ptr=y, o_ptr=o, n=n),
        "triton.cdiv(n, 1024) alone": lambda: triton.cdiv(n, 1024),
        "(n + 1023) // 1024 alone": lambda: (n + 1023) // 1024,
    }
    times: dict = {k: [] for k in rows}
    for _ in range(15):
        for name, f in rows.items():
            if name == "upstream autotuned":
                triton_dist_plugin.deactivate()  # upstream's Autotuner.run for this row alone
                try:
                    times[name].append(host_loop(f, device=False))
                finally:
                    triton_dist_plugin.activate()
                    python.__dict__["run"] = slow
            else:
                times[name].append(host_loop(f, device=False))
    out = {k: statistics.median(v) for k, v in times.items()}
    from _common import save_results

    save_results(Path(options.out).name, {"triton": triton.__version__, "torch": torch.__version__,
                                          "python": sys.version.split()[0], "median_us": out})
    base = out["direct"]
    for name, us in out.items():
        print(f"{name:32s} {us:6.2f} us  {us / base:5.2f}x direct")


if __name__ == "__main__":
    main()
