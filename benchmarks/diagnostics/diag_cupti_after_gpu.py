"""Does a finished profiler session leave every later launch slower, and what does tearing CUPTI
down cost? On one GPU, in one fresh process.

    python benchmarks/diagnostics/diag_cupti_after_gpu.py [--out cupti_after_h200.json]

Kineto finalizes CUPTI when a session stops only where ``TEARDOWN_CUPTI=1`` is set; otherwise CUPTI
stays subscribed for the life of the process. The plugin times short kernels with the profiler, so
its tunings would leave that behind. Rows (host us per direct launch of a one-block kernel, median of
9 rounds of 2,000 launches): before any session; after a session like the plugin's (CUDA activity,
200 launches); after one more session stopped with ``TEARDOWN_CUPTI=1``; and the seconds each kind
of session took from start to stop (the first, a later one, one that tears down, one after a teardown).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="cupti_after_h200.json")
    options = parser.parse_args()
    os.environ.pop("TEARDOWN_CUPTI", None)
    import torch
    import triton
    import triton.language as tl
    from torch.profiler import ProfilerActivity, profile

    @triton.jit
    def one(x):
        tl.store(x + tl.arange(0, 32), tl.arange(0, 32).to(tl.float32))

    x = torch.empty(32, device="cuda")

    def launches_us(n: int = 2000) -> float:
        rounds = []
        for _ in range(9):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                one[(1,)](x)
            rounds.append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
        return statistics.median(rounds)

    def session(teardown: bool) -> float:
        if teardown:
            os.environ["TEARDOWN_CUPTI"] = "1"
        t0 = time.perf_counter()
        try:
            with profile(activities=[ProfilerActivity.CUDA]):
                for _ in range(200):
                    one[(1,)](x)
                torch.cuda.synchronize()
        finally:
            os.environ.pop("TEARDOWN_CUPTI", None)
        one[(1,)](x)  # a CUDA call after the stop: where kineto's teardown completes
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(200):
        one[(1,)](x)
    rows = {"before any session": launches_us()}
    seconds = {"first session": session(False), "a later session": session(False)}
    rows["after sessions"] = launches_us()
    seconds["a session that tears down"] = session(True)
    rows["after a teardown"] = launches_us()
    seconds["a session after a teardown"] = session(False)
    rows["after a session again"] = launches_us()
    seconds["tearing down again"] = session(True)
    rows["after tearing down again"] = launches_us()
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "host_us_per_launch": rows, "session_s": seconds}
    text = json.dumps(out, indent=2)
    (Path(__file__).resolve().parents[1] / "results" / options.out).write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], options.out).write_text(text)
    for k, v in rows.items():
        print(f"{k:28s} {v:7.2f} us per launch")
    for k, v in seconds.items():
        print(f"{k:28s} {v:7.3f} s")


if __name__ == "__main__":
    main()
