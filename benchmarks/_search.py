"""The large matmul space the search benchmarks share (``bench_search_gpu.py``, ``search_truth_gpu.py``,
``replay_search.py``): its shapes, its 1,152 configs, the inputs, the careful time of one config, and
where the exhaustive ground truth is kept."""

from __future__ import annotations

import itertools

from _common import ROOT, launch_meta

TRUTH = ROOT / "benchmarks" / "results" / "search_truth_h200.json"  # search_truth_gpu.py
SHAPE, SECOND = (4096, 4096, 4096), (8192, 2048, 4096)


def large_space() -> list:
    import triton

    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=w, num_stages=s)
            for bm, bn, bk, g, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128),
                                                         (1, 8), (2, 4, 8), (2, 3, 4, 5))]


def inputs(shape):
    import torch

    m, n, k = shape
    torch.manual_seed(0)
    return (torch.randn(m, k, device="cuda", dtype=torch.float16),
            torch.randn(k, n, device="cuda", dtype=torch.float16))


def careful(mm, config, a, b, rep=200) -> float:
    """``do_bench`` ms of ``config`` launched directly (the compiled kernel is in memory)."""
    import triton

    meta = launch_meta(config)
    return triton.testing.do_bench(lambda: mm.launch(mm.jit, a, b, **meta), warmup=25, rep=rep)
