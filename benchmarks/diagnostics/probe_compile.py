"""Compiling the 48 matmul candidates up front, three ways, each into an empty Triton cache (GPU).

Serial compiles of a few configs, then ``precompile.warm_all`` with 8 and 16 forked workers and
with threads only, each on a fresh JITFunction so nothing is found in memory.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
sys.path.insert(0, ".")
from kernels import KERNELS  # noqa: E402
from triton_dist_plugin.compiling import (
    forked_compile,  # noqa: E402
    precompile,  # noqa: E402
)

mm = KERNELS["matmul"]
a, b = mm.make_inputs("gpu", "cuda")
M, K = a.shape
N = b.shape[1]
c = torch.empty((M, N), device="cuda", dtype=a.dtype)
configs = mm.configs("cuda")
args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
grid = lambda m: (1,)  # noqa: E731
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
for i in range(3):
    t0 = time.perf_counter()
    mm.jit.warmup(*args, grid=grid, **configs[i].all_kwargs())
    print("serial compile", i, round(time.perf_counter() - t0, 3), flush=True)
for workers in ("8", "16", "0"):
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    os.environ[forked_compile.COMPILE_PROCESSES_ENV] = workers
    jit = triton.jit(mm.jit.fn)
    t0 = time.perf_counter()
    failed = precompile.warm_all(jit.warmup, args, {"grid": grid}, [c.all_kwargs() for c in configs], device=0)
    print(f"{workers} workers: {time.perf_counter() - t0:.2f}s", precompile.last, failed, flush=True)
