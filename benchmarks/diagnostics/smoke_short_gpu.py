"""Smoke check on a GPU: tune a few short suite cases with the plugin and print each tuning's notes
(whether the later rounds were timed by the profiler, in how long) and its pick.

    python benchmarks/diagnostics/smoke_short_gpu.py [--cases add/2^20,rowsum/16384x4096]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import collect_notes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="add/2^20,rowsum/16384x4096,matmul/4096x4096x4096")
    args = parser.parse_args()
    import _suite
    import torch

    notes = collect_notes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in args.cases.split(","):
            built = _suite.select(name)[0].build()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            built.run()
            torch.cuda.synchronize()
            print(f"{name}: {time.perf_counter() - t0:.2f}s, pick #{built.pick()} {built.tuner.best_config}")
            for note in notes:
                print("   ", note)
            notes.clear()
    for w in caught:
        print("warning:", w.message)


if __name__ == "__main__":
    main()
