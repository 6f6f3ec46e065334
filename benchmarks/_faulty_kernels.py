"""Kernels with planted faults for ``bench_faults_gpu.py`` (at module level, so an isolation
worker can import them)."""

import triton
import triton.language as tl


@triton.jit
def planted(x, out, stop, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if FAULT == 1:  # an out-of-bounds write: "illegal memory access"
        tl.store(out + offs + (1 << 40), tl.load(x + offs, mask=offs < n), mask=offs < n)
    if FAULT == 2:  # never finishes: ``stop`` stays 0
        while tl.load(stop, volatile=True) == 0:
            pass
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 256, "FAULT": 0}), triton.Config({"BLOCK": 256, "FAULT": 1}),
           triton.Config({"BLOCK": 256, "FAULT": 2}), triton.Config({"BLOCK": 1024, "FAULT": 0})]
