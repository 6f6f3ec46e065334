"""Host cost of a cache hit of a tuner whose class has its own ``run`` calling ``Autotuner.run``
(fla's ``CachedAutotuner``), with the plugin and upstream, on any machine.

    python benchmarks/diagnostics/diag_subclass_hit_cpu.py [--out subclass_hit_cpu.json]

The stand-in driver and kernel of ``diag_launch_path_cpu.py`` (device 0, a launch that does
nothing, CPU tensors for the device's). The add kernel, tuned already (its key in ``cache``), under
a subclass whose ``run`` calls ``super().run``, launched as fla launches (every kernel argument by
keyword, a grid function): microseconds per call, the median over 7 alternating rounds of 5,000
calls, the plugin active and deactivated (upstream's ``Autotuner.run``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="subclass_hit_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    import torch
    import triton
    from _common import save_results
    from diag_launch_path_cpu import _stand_in
    from triton.runtime.autotuner import Autotuner

    import triton_dist_plugin
    from kernels import KERNELS

    class Cached(Autotuner):
        def run(self, *args, **kwargs):
            return super().run(*args, **kwargs)

    add = KERNELS["add"].jit
    _stand_in(add)
    n = 4096
    x, y, o = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (512, 1024)]
    grid = lambda m: ((n + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731

    def tuner():
        tuned = Cached(add, add.arg_names, configs, ["n"], None, None)
        tuned.cache[(n, "torch.float32", "torch.float32", "torch.float32")] = configs[1]
        for _ in range(6):
            tuned[grid](x_ptr=x, y_ptr=y, o_ptr=o, n=n)
        return tuned

    plugin = tuner()
    triton_dist_plugin.deactivate()
    upstream = tuner()
    rows: dict = {"plugin": [], "upstream": []}
    for _ in range(7):
        for side, tuned in (("plugin", plugin), ("upstream", upstream)):
            if side == "plugin":
                triton_dist_plugin.activate()
            call = lambda t=tuned: t[grid](x_ptr=x, y_ptr=y, o_ptr=o, n=n)  # noqa: E731
            rows[side].append(timeit.timeit(call, number=5000) / 5000 * 1e6)
            if side == "plugin":
                triton_dist_plugin.deactivate()
    triton_dist_plugin.activate()
    medians = {side: statistics.median(times) for side, times in rows.items()}
    save_results(options.out, {"what": __doc__.split("\n\n")[0], "us_per_call": medians, "rounds": rows})
    for side, us in medians.items():
        print(f"{side:10s} {us:6.2f} us")


if __name__ == "__main__":
    main()
