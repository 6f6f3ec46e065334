"""What a cache-hit launch's host path spends its time on, part by part, on any machine.

    python benchmarks/diagnostics/diag_launch_hit_parts_cpu.py [--out launch_hit_parts_cpu.json]

The stand-in driver and kernels of ``diag_launch_path_cpu.py`` (device 0, a launch that does
nothing, CPU tensors for the device's), the add kernel tuned and launched until the launch guard
serves it, with a grid of plain arithmetic (no ``triton.cdiv``). Then the whole launch and each
part the plugin's path does on every call, timed alone: microseconds per call, the best of 5
rounds of 100,000 calls.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="launch_hit_parts_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    import diag_launch_path_cpu as path
    import torch
    import triton
    from _common import save_host_us

    import triton_dist_plugin  # noqa: F401
    from kernels import KERNELS
    from triton_dist_plugin.patched import kernel_state

    add = KERNELS["add"].jit
    path._stand_in(add)
    n = 4096
    x, y, o = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (512, 1024)]
    tuned = triton.autotune(configs=configs, key=["n"])(add)
    tuned.cache[(n, "torch.float32", "torch.float32", "torch.float32")] = configs[1]
    grid = lambda m: ((n + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731
    for _ in range(6):
        tuned[grid](x, y, o, n)
    state = kernel_state.state_of(tuned)
    launcher = next(h for h in state.launchers.values() if h is not None)
    plan = launcher.plans[0]
    assert plan.entries, "the launch guard does not serve the launch"
    entry = next(iter(plan.entries.values()))
    args, launch = (x, y, o, n), {"grid": grid, "warmup": False}
    values = plan.guard(args, launch)[1]
    rows = {
        "the whole launch, tuned[grid](...)": lambda: tuned[grid](x, y, o, n),
        "Autotuner.run's cache-hit closure, from run(...)": lambda: tuned.run(x, y, o, n, grid=grid, warmup=False),
        "the config's direct launcher": lambda: launcher(args, launch),
        "the autotuner's key (raw)": lambda: state.key_get(args),
        "the launch guard": lambda: plan.guard(args, launch),
        "the knobs the kernel-cache key reads": lambda: launcher._read(launcher._compilation),
        "the grid's parameter dict": lambda: plan.bound(args, launch),
        "the grid itself": lambda: grid({"BLOCK": 1024}),
        "the launch (a stand-in that does nothing)": lambda: entry[1](1, 1, 1, 0, values),
    }
    save_host_us(options.out, "us", {name: min(timeit.repeat(f, number=100_000, repeat=5)) / 100_000 * 1e6
                                     for name, f in rows.items()})


if __name__ == "__main__":
    main()
