"""Kernels tuned in context against kernels tuned alone, on one GPU.

    python benchmarks/bench_contextual_gpu.py

A fused step: fp16 matmul (48 candidates) then layernorm over its output (8 candidates). "Alone":
each kernel tuned by the patched ``@triton.autotune`` in isolation. "In context": the same
kernels tuned by ``contextual_autotune`` inside the step. Then both pairs of picks run the whole
step, timed carefully (do_bench median, alternating, 5 rounds).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
import triton
from _common import do_bench_rounds, save_results, timed_call

from kernels import KERNELS
from triton_dist_plugin.autotuner import contextual_autotune

ROOT = Path(__file__).resolve().parents[1]
MM, LN = KERNELS["matmul"], KERNELS["layernorm"]


def fresh():
    return (triton.autotune(configs=MM.configs("cuda"), key=MM.key)(MM.jit),
            triton.autotune(configs=LN.configs("cuda"), key=LN.key)(LN.jit))


def step(mm, ln, a, b, w, bias, mm_meta=None, ln_meta=None):
    c = MM.launch(mm, a, b, **(mm_meta or {}))
    return LN.launch(ln, c, w, bias, **(ln_meta or {}))


def main() -> None:
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    w = torch.randn(N, device="cuda", dtype=torch.float16)
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    # compile every candidate once so neither side pays for compilation
    mm, ln = fresh()
    for cfg in MM.configs("cuda"):
        MM.launch(MM.jit, a, b, **cfg.all_kwargs())
    c = MM.launch(MM.jit, a, b, **MM.configs("cuda")[0].all_kwargs())
    for cfg in LN.configs("cuda"):
        LN.launch(LN.jit, c, w, bias, **cfg.all_kwargs())
    torch.cuda.synchronize()

    out_alone, alone_s = timed_call(lambda: step(mm, ln, a, b, w, bias))
    alone = (mm.best_config, ln.best_config)

    mm2, ln2 = fresh()
    tuned = contextual_autotune(n_repeat=5, n_warmup=3)(lambda: step(mm2, ln2, a, b, w, bias))
    out_ctx, ctx_s = timed_call(tuned)
    ctx = (mm2.best_config, ln2.best_config)
    assert torch.allclose(out_alone.float(), out_ctx.float(), atol=2e-2, rtol=2e-2)

    def run_with(picks):
        return lambda: step(MM.jit, LN.jit, a, b, w, bias, mm_meta=picks[0].all_kwargs(),
                               ln_meta=picks[1].all_kwargs())

    times = do_bench_rounds({"alone": run_with(alone), "context": run_with(ctx)}, rounds=5, warmup=100, rep=500)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"alone_picks": [str(p) for p in alone], "context_picks": [str(p) for p in ctx],
              "same_picks": [str(x) == str(y) for x, y in zip(alone, ctx)], "step_ms": med,
              "context_speedup_pct": (med["alone"] / med["context"] - 1) * 100,
              "tuning_s": {"alone": alone_s, "context": ctx_s}, "rounds_ms": times}
    save_results("contextual_h200.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
