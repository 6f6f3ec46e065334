"""Does a finished profiler session leave every later launch slower, and what does the package's
teardown (``kernel_time.release``) cost and cure? On one GPU, in one fresh process.

    python benchmarks/diagnostics/diag_cupti_after_gpu.py [--out cupti_after_h200.json]

Kineto finalizes CUPTI when a session stops only where ``TEARDOWN_CUPTI=1`` is set; otherwise CUPTI
stays subscribed for the life of the process. The plugin times short kernels with the profiler, so
its tunings would leave that behind. Rows (host us per direct launch of a one-block kernel, median of
9 rounds of 2,000 launches): before any session; after two of the package's sessions (200 launches
each); after ``release()`` (``TRITON_DIST_AUTOTUNE_CUPTI_TEARDOWN=1``); after two more sessions (the first
re-initialises CUPTI) and a second release. With the seconds each took, and how many of its 200
launches each session recorded (the profiler must still see every kernel after a teardown).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="cupti_after_h200.json")
    options = parser.parse_args()
    os.environ.pop("TEARDOWN_CUPTI", None)
    import torch
    import triton
    import triton.language as tl

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

    from triton_dist_plugin import kernel_time

    os.environ[kernel_time.RELEASE_ENV] = "1"
    records: dict = {}

    def session(label: str) -> float:
        """One of the package's own sessions (``kernel_time._cuda_session``) of 200 launches: its
        seconds, and how many of the launches it recorded (200 unless CUPTI lost them)."""
        t0 = time.perf_counter()
        with kernel_time._cuda_session() as prof:
            for _ in range(200):
                one[(1,)](x)
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        records[label] = len(kernel_time.kernel_times(prof, "one"))
        return seconds

    def release() -> float:
        t0 = time.perf_counter()
        kernel_time.release()
        one[(1,)](x)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(200):
        one[(1,)](x)
    rows = {"before any session": launches_us()}
    seconds = {"first session": session("first session"), "a later session": session("a later session")}
    rows["after sessions"] = launches_us()
    seconds["release (teardown)"] = release()
    rows["after the release"] = launches_us()
    seconds["the session after it (lazy re-init)"] = session("the session after it (lazy re-init)")
    seconds["the next session"] = session("the next session")
    rows["after sessions again"] = launches_us()
    seconds["release again"] = release()
    rows["after the second release"] = launches_us()
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "host_us_per_launch": rows, "session_s": seconds, "launches_recorded_of_200": records}
    text = json.dumps(out, indent=2)
    (Path(__file__).resolve().parents[1] / "results" / options.out).write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], options.out).write_text(text)
    for k, v in rows.items():
        print(f"{k:28s} {v:7.2f} us per launch")
    for k, v in seconds.items():
        print(f"{k:36s} {v:7.3f} s" + (f"  ({records[k]} of 200 launches recorded)" if k in records else ""))


if __name__ == "__main__":
    main()
