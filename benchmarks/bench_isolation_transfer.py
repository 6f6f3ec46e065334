"""Host time from handing the isolation worker a job to its "ready", with two fp16 tensors of 16
and 32 MB (a matmul's input and output at 4096 x 2048 and 4096 x 4096): what a second key pays
to copy its arguments to the worker. Runs on the CPU (interpreter) or a GPU.

    python benchmarks/bench_isolation_transfer.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from _common import ROOT, save_results

os.environ.setdefault("TRITON_INTERPRET", "0" if os.environ.get("CUDA_VISIBLE_DEVICES") else "1")
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    import torch
    from test_isolate import planted

    from triton_dist_plugin.isolation import isolate

    device = "cuda" if torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] != "1" else "cpu"
    worker = isolate.worker()  # started, torch imported, a first small job done: only the transfer is left
    small = torch.zeros(16, device=device)
    worker.prepare(planted, type(planted).__name__, (small, small, 16), {})
    worker.submit(0, {"BLOCK": 16, "FAULT": 0}, (1,))
    assert worker.finish({}) == {}
    a = torch.randn(4096, 2048, dtype=torch.float16, device=device)
    c = torch.randn(4096, 4096, dtype=torch.float16, device=device)
    times = []
    for _ in range(5):
        worker = isolate.worker()
        t0 = time.perf_counter()
        worker.prepare(planted, type(planted).__name__, (a, c, 16), {})
        worker.submit(0, {"BLOCK": 16, "FAULT": 0}, (1,))
        assert worker.finish({}) == {}
        times.append(time.perf_counter() - t0)
    result = {"device": device, "job_mb": (a.numel() + c.numel()) * 2 / 2**20, "ms": [t * 1e3 for t in times],
              "median_ms": statistics.median(times) * 1e3}
    save_results(f"isolation_transfer_{device}.json", result)
    print(f"job of {result['job_mb']:.0f} MB to ready and one run ({device}): median {result['median_ms']:.0f} ms")


if __name__ == "__main__":
    main()
