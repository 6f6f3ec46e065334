"""Pieces every benchmark here shares: host-side launch timing and saving results."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


# Picks persist on disk by default: a benchmark starts from an empty plugin cache of its own
# (scripts that compare first calls give each child process its own, too).
os.environ.setdefault("TRITON_DIST_AUTOTUNE_DIR", tempfile.mkdtemp(prefix="tdp-bench-"))


def host_loop(f: Callable[[], Any], iters: int = 20000) -> float:
    """Host microseconds per call of ``f`` (warmed up, device synchronised at both ends)."""
    import torch

    for _ in range(500):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int = 31, iters: int = 2000) -> list[dict]:
    """Host microseconds per call of each of ``fns``, measured in short alternating rounds.

    Host timings drift by tens of percent over seconds on a shared machine; ratios taken within
    one short round, then the median over rounds, are what stays comparable.
    """
    return [{name: host_loop(f, iters) for name, f in fns.items()} for _ in range(rounds)]


def save_results(name: str, data: Any) -> Path:
    """Write ``benchmarks/results/<name>`` (and a copy under ``$OUT`` when a device run sets it)."""
    text = json.dumps(data, indent=2, default=str)
    out = ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], name).write_text(text)
    return out


def first_call_matmul() -> tuple[float, Any]:
    """Seconds of the first call of the 48-config fp16 matmul at 4096^3 (compile and time every
    config), and its tuner; run in a fresh process with an empty Triton cache."""
    import torch
    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    a, b = mm.make_inputs("gpu", "cuda")
    tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    mm.launch(tuned, a, b)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, tuned
