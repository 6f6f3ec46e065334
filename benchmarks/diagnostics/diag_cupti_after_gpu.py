"""Does a finished profiler session leave every later launch slower, and does kineto's own teardown
(``TEARDOWN_CUPTI=1``) cure it, at what cost per session? On one GPU, two fresh processes.

    python benchmarks/diagnostics/diag_cupti_after_gpu.py [--out cupti_after_h200.json]

Kineto keeps CUPTI subscribed after a session stops unless ``TEARDOWN_CUPTI=1`` is set; the plugin
times short kernels with the profiler. Each process (``as torch leaves it``: the switch unset;
``TEARDOWN_CUPTI=1``: set for the whole process, as a user would set it) times host us per direct
launch of a one-block kernel (median of 9 rounds of 2,000 launches) before any session, after two of
the package's own sessions (``kernel_time._cuda_session``, 200 launches each), and after two more;
with the seconds each session took and how many of its 200 launches it recorded (a session after a
teardown must still see every kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

from _procs import run_fresh, serve  # noqa: E402

MODES = {"as torch leaves it": None, "TEARDOWN_CUPTI=1": {"TEARDOWN_CUPTI": "1"}}


def child_one() -> dict:
    import torch
    import triton
    import triton.language as tl

    from triton_dist_plugin import kernel_time

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

    seconds, recorded = [], []

    def session() -> None:
        t0 = time.perf_counter()
        with kernel_time._cuda_session() as prof:
            for _ in range(200):
                one[(1,)](x)
            torch.cuda.synchronize()
        one[(1,)](x)  # a CUDA call after the stop: where kineto finishes a teardown
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        recorded.append(len(kernel_time.kernel_times(prof, "one")))

    for _ in range(200):
        one[(1,)](x)
    rows = {"before any session": launches_us()}
    session(), session()
    rows["after two sessions"] = launches_us()
    session(), session()
    rows["after four"] = launches_us()
    return {"us_per_launch": rows, "session_s": seconds, "recorded_of_200": recorded,
            "teardown_env": os.environ.get("TEARDOWN_CUPTI"), "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name()}


def main() -> None:
    if serve(globals()):
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="cupti_after_h200.json")
    options = parser.parse_args()
    os.environ.pop("TEARDOWN_CUPTI", None)  # each child's switch is its mode's
    out = {mode: run_fresh(__file__, "one", None, extra) for mode, extra in MODES.items()}
    text = json.dumps(out, indent=2)
    (HERE.parents[1] / "results" / options.out).write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], options.out).write_text(text)
    for mode, got in out.items():
        if "us_per_launch" not in got:
            print(f"{mode}: {got.get('error')}")
            continue
        launches = "  ".join(f"{k} {v:.2f}" for k, v in got["us_per_launch"].items())
        sessions = " ".join(f"{s:.3f}" for s in got["session_s"])
        print(f"{mode:20s} us/launch: {launches} | sessions s: {sessions} | recorded {got['recorded_of_200']}")


if __name__ == "__main__":
    main()
