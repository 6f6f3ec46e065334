"""FlagGems, Liger-Kernel and flash-linear-attention (fla) ops with and without the plugin, on one GPU.

    python benchmarks/bench_real_libs.py [--ops core|liger|gems|fla|light|heavy|all|NAME,...] [--reps 3]
                                         [--modes disabled,before,after] [--results NAME] [--list]
    python benchmarks/bench_real_libs.py --merge A.json B.json ... [--results NAME]

Each op (``--list`` shows them) calls a library function that launches ``@triton.autotune`` kernels,
FlagGems' ``libtuner``/``libentry`` kernels included, and its backward where the backward is tuned
too. Every op runs in fresh child processes, interleaved: for each rep, one process per mode:

- ``disabled``: ``TRITON_DIST_PLUGIN_DISABLE=1``, ``import triton_dist_plugin`` (patches nothing),
  then the libraries: upstream Triton's autotuner;
- ``before``: ``import triton_dist_plugin``, then the libraries;
- ``after``: the libraries, then ``import triton_dist_plugin`` (kernels decorated before the patch).

Each child starts with empty caches of its own (Triton's ``TRITON_CACHE_DIR``, the plugin's
``TRITON_DIST_AUTOTUNE_DIR``, FlagGems' ``FLAGGEMS_CACHE_DIR`` with its sqlite tune database; fla's
config cache is off with ``FLA_CACHE_MODE=disabled``; ``GEMS_VENDOR=nvidia`` spares FlagGems its
probe of every vendor's tools), runs one small plain ``@triton.jit`` kernel and one matmul to absorb
start-up, then, per op, with inputs drawn from a generator seeded from the op's name:

1. the first call, synchronised and timed (it tunes), then the backward, timed the same way; the
   outputs, gradients and any state the op updates in place are kept (copies on the host);
2. the steady state: the op (forward, or forward and backward) replayed from a CUDA graph, or timed
   with ``triton.testing.do_bench`` (median) where it synchronises with the host or does not capture.

Tuning is measured by one wrapper, the same in every mode and installed before the plugin and the
libraries are imported: ``KernelInterface.__getitem__`` (what ``kernel[grid]`` calls on an
``Autotuner`` and on what wraps one: ``Heuristics``, FlagGems' ``LibEntry``, which call the tuner's
``run`` directly) synchronises and times each launch of a tuned kernel during the first call, and
counts a launch as tuning when the tuner's ``cache`` grows or its ``configs_timings`` is replaced
(FlagGems' ``LibTuner.cache`` is a sqlite table without a length). It records per kernel the wall
time of that launch, the number of configs, how many failed (infinite time) and the pick. Tuners
that tuned without passing through it are listed as ``unprobed``.

The driver compares the first outputs of ``before`` and ``after`` with ``disabled`` (bitwise, else
the largest difference against a tolerance), the ``disabled`` reps with each other (upstream's own
nondeterminism: its picks can differ run to run), and the picks; it reports per op the first-call
time per mode (median over reps), the tuning speedup of each kernel (upstream / plugin, medians) and
the steady-state time ratio (plugin / upstream). Results go to ``results/real_libs_h200.json``; a
compact table is printed last. An op that fails only under the plugin is listed first among the
findings.

Compilation dominates upstream's tuning (about 0.3 to 1.2 s per config on the H200, whatever the
sizes), and each child spends about 20 s starting (torch, the three libraries, CUDA). Measured with
one rep: the 18 ``light`` ops tune in 200 s upstream and 55 s under the plugin, so they take about
20 minutes at 3 reps. ``core`` (the default) is sized, from those numbers, to fit one 10-minute
command at 3 reps; so is each library's group. For every op, run one library per command and combine:

    python benchmarks/bench_real_libs.py --ops liger --results real_libs_h200_liger.json
    python benchmarks/bench_real_libs.py --ops fla --results real_libs_h200_fla.json
    python benchmarks/bench_real_libs.py --ops gems --results real_libs_h200_gems.json
    python benchmarks/bench_real_libs.py --merge real_libs_h200_{liger,fla,gems}.json

``--budget`` (default 550 s) bounds the children: a run that would not fit is skipped and listed.

The libraries are not dependencies of the project: install them (and SQLAlchemy and greenlet, which
FlagGems imports, and einops for fla) into a folder on ``PYTHONPATH``, e.g. from wheels:
``pip install --no-deps --target /tmp/site fla_core-0.6.0 flag_gems-5.0.2 liger_kernel-0.8.5
sqlalchemy greenlet einops``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from _common import ROOT, save_results

MODES = ("disabled", "before", "after")
RESULTS_NAME = "real_libs_h200.json"
# Relative tolerance (against the reference's largest magnitude) for outputs that are not bitwise equal.
TOLERANCE = {"torch.bfloat16": 2e-2, "torch.float16": 1e-2, "torch.float32": 1e-3}
# Environment that would make a child use a cache, a config space or a timing other than the defaults.
CLEARED_ENV = ("TRITON_DIST_PLUGIN_DISABLE", "FLAGGEMS_DB_URL", "USE_FLAGTUNE", "TRITON_PRINT_AUTOTUNING",
               "TRITON_CACHE_AUTOTUNING", "FLA_CONFIG_DIR", "FLA_GPU_NAME", "TRITON_INTERPRET")


# ---------------------------------------------------------------------------------------------
# The ops
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One op built on its inputs: ``fwd()`` returns what ``bwd`` and ``outputs`` take."""

    fwd: Callable[[], Any]
    outputs: Callable[[Any], dict]  # fwd's result -> named tensors (outputs and state updated in place)
    bwd: Optional[Callable[[Any], dict]] = None  # fwd's result -> named gradients
    step: Optional[Callable[[], Any]] = None  # one steady-state iteration; fwd (+ bwd) when None


@dataclass
class Op:
    name: str
    lib: str
    call: str
    shapes: str
    kernels: str  # the tuned kernels: tuner class, number of configs, hooks
    backward: bool  # whether the backward launches tuned kernels
    modules: tuple  # imported (in the mode's order) before any op runs
    build: Callable[[Any], Case]
    heavy: bool = False  # only in the groups heavy and all: too many configs to tune nine times in one run


# Inputs come from a generator of their own, seeded from the op's name: the default CUDA generator
# is left to the libraries (and is not disturbed by a CUDA graph capture that fails).
_GEN: dict = {}


def _randn(torch, *shape, dtype=None, scale=1.0, shift=0.0, grad=False):
    t = torch.randn(*shape, device="cuda", dtype=torch.float32, generator=_GEN["cuda"]) * scale + shift
    t = t.to(dtype or torch.bfloat16)
    return t.requires_grad_(grad)


def _rand(torch, *shape, low=0.0, high=1.0):
    return torch.rand(*shape, device="cuda", generator=_GEN["cuda"]) * (high - low) + low


def _randint(torch, low, high, shape, dtype):
    return torch.randint(low, high, shape, device="cuda", dtype=dtype, generator=_GEN["cuda"])


def _autograd(torch, fn: Callable, inputs: dict, dy) -> Case:
    """A Case for ``fn(*inputs)`` -> one tensor, with the gradients of ``inputs`` against ``dy``."""
    names, tensors = list(inputs), list(inputs.values())

    def bwd(y):
        return {f"d{n}": g for n, g in zip(names, torch.autograd.grad(y, tensors, dy))}

    def step():
        torch.autograd.grad(fn(*tensors), tensors, dy)

    return Case(fwd=lambda: fn(*tensors), outputs=lambda y: {"y": y}, bwd=bwd, step=step)


def build_liger_swiglu_mlp(torch) -> Case:
    from liger_kernel.ops.mlp import LigerMLPFunction

    B, S, D, H = 2, 2048, 2048, 5632
    inputs = {"x": _randn(torch, B, S, D, grad=True), "w_gate": _randn(torch, H, D, scale=D**-0.5, grad=True),
              "w_up": _randn(torch, H, D, scale=D**-0.5, grad=True),
              "w_down": _randn(torch, D, H, scale=H**-0.5, grad=True)}
    return _autograd(torch, LigerMLPFunction.apply, inputs, _randn(torch, B, S, D))


def build_liger_dyt(torch) -> Case:
    from liger_kernel.ops.dyt import LigerDyTFunction

    M, N = 8192, 4096
    inputs = {"x": _randn(torch, M, N, grad=True), "alpha": _randn(torch, 1, scale=0.1, shift=0.5, grad=True),
              "gamma": _randn(torch, N, scale=0.1, shift=1.0, grad=True),
              "beta": _randn(torch, N, scale=0.1, grad=True)}
    return _autograd(torch, LigerDyTFunction.apply, inputs, _randn(torch, M, N))


def build_liger_mm_int8int2(torch) -> Case:
    from liger_kernel.ops.experimental.mm_int8int2 import matmul, pack_weights

    M, K, N = 4096, 2304, 4096  # K % 512 != 0: the five BLOCK_SIZE_K=128 configs fail their static_assert
    a = _randint(torch, -127, 128, (M, K), torch.int8)
    w = _randint(torch, -1, 2, (K, N), torch.int8)
    b = pack_weights(w.clone(), 2)
    return Case(fwd=lambda: matmul(a, b), outputs=lambda c: {"c": c})


def build_liger_fused_moe(torch) -> Case:
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    T, H, inter, E, K = 2048, 1024, 512, 8, 2
    scores = _randn(torch, T, E, dtype=torch.float32).softmax(-1)
    weights, index = scores.topk(K, dim=-1)
    inputs = {"x": _randn(torch, T, H, grad=True),
              "w_gate_up": _randn(torch, E, 2 * inter, H, scale=H**-0.5, grad=True),
              "w_down": _randn(torch, E, H, inter, scale=inter**-0.5, grad=True)}
    index, weights = index.to(torch.int32), weights.to(torch.bfloat16)

    def fn(x, w1, w2):
        return LigerFusedMoEFunction.apply(x, w1, w2, index, weights)

    return _autograd(torch, fn, inputs, _randn(torch, T, H))


def _gems():
    import flag_gems

    return flag_gems


def build_gems_mm(torch) -> Case:
    a, b = _randn(torch, 2048, 4096), _randn(torch, 4096, 32001, scale=4096**-0.5)  # N % 8 != 0: no TMA path
    return Case(fwd=lambda: _gems().mm(a, b), outputs=lambda c: {"c": c})


def build_gems_mm_tma(torch) -> Case:
    a, b = _randn(torch, 2048, 4096), _randn(torch, 4096, 4096, scale=4096**-0.5)
    return Case(fwd=lambda: _gems().mm(a, b), outputs=lambda c: {"c": c})


def build_gems_addmm(torch) -> Case:
    bias, x, w = _randn(torch, 4096), _randn(torch, 2048, 4096), _randn(torch, 4096, 4096, scale=4096**-0.5)
    return Case(fwd=lambda: _gems().addmm(bias, x, w.t()), outputs=lambda c: {"c": c})


def build_gems_bmm(torch) -> Case:
    q, k = _randn(torch, 32, 1024, 128), _randn(torch, 32, 128, 1024)
    return Case(fwd=lambda: _gems().bmm(q, k), outputs=lambda c: {"c": c})


def build_gems_sum_dims(torch) -> Case:
    x = _randn(torch, 64, 256, 4096)
    return Case(fwd=lambda: _gems().sum_dim(x, [1, 2]), outputs=lambda s: {"s": s})


def build_gems_layer_norm(torch) -> Case:
    M, N = 4096, 8192  # N > 4096: the looped forward kernel (12 configs)
    x, dy = _randn(torch, M, N), _randn(torch, M, N)
    w, b = _randn(torch, N, scale=0.1, shift=1.0), _randn(torch, N, scale=0.1)
    g = _gems()

    def fwd():
        return g.layer_norm(x, [N], w, b, 1e-5)

    def bwd(res):
        _, mean, rstd = res
        dx, dw, db = g.layer_norm_backward(dy, x, [N], mean, rstd, w, b, [True, True, True])
        return {"dx": dx, "dw": dw, "db": db}

    return Case(fwd=fwd, outputs=lambda res: {"y": res[0], "mean": res[1], "rstd": res[2]}, bwd=bwd,
                step=lambda: bwd(fwd()))


def build_gems_batch_norm(torch) -> Case:
    N, C, H, W = 32, 256, 28, 28
    x, dy = _randn(torch, N, C, H, W, dtype=torch.float32), _randn(torch, N, C, H, W, dtype=torch.float32)
    w, b = _randn(torch, C, dtype=torch.float32, scale=0.1, shift=1.0), _randn(torch, C, dtype=torch.float32)
    running_mean = _randn(torch, C, dtype=torch.float32, scale=0.1)
    running_var = _rand(torch, C, low=0.5, high=1.5)
    g = _gems()

    def fwd():
        return g.batch_norm(x, w, b, running_mean, running_var, True, 0.1, 1e-5)

    def bwd(res):
        _, mean, invstd = res
        dx, dw, db = g.batch_norm_backward(dy, x, w, running_mean, running_var, mean, invstd, True, 1e-5,
                                           [True, True, True])
        return {"dx": dx, "dw": dw, "db": db}

    def outputs(res):  # the running statistics are updated in place, once per call (restore_value)
        return {"y": res[0], "mean": res[1], "invstd": res[2], "running_mean": running_mean,
                "running_var": running_var}

    return Case(fwd=fwd, outputs=outputs, bwd=bwd, step=lambda: bwd(fwd()))


def build_gems_group_mm(torch) -> Case:
    sizes = [512, 1536, 1024, 768, 1280, 1024, 896, 1152]
    K, N = 2048, 4096
    a, b = _randn(torch, sum(sizes), K), _randn(torch, len(sizes), K, N, scale=K**-0.5)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    return Case(fwd=lambda: _gems().group_mm(a, b, offs), outputs=lambda c: {"c": c})


def _gems_scaled_mm_case(torch, a, b, a_scale, b_scale) -> Case:
    """FlagGems' ``cutlass_scaled_mm`` into a bf16 output, for either input format."""
    c = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)

    def fwd():
        _gems().cutlass_scaled_mm(c, a, b, a_scale, b_scale, None)
        return c

    return Case(fwd=fwd, outputs=lambda c: {"c": c})


def build_gems_scaled_mm_int8(torch) -> Case:
    M, K, N = 4096, 4096, 4096
    a = _randint(torch, -127, 128, (M, K), torch.int8)
    b = _randint(torch, -127, 128, (N, K), torch.int8).t()  # column-major, as required
    a_scale, b_scale = _rand(torch, M, 1, low=1e-4, high=1.1e-3), _rand(torch, 1, N, low=1e-4, high=1.1e-3)
    return _gems_scaled_mm_case(torch, a, b, a_scale, b_scale)


def build_gems_scaled_mm_fp8_block(torch) -> Case:
    M, K, N = 4096, 4096, 4096
    a = _randn(torch, M, K, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = _randn(torch, N, K, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    a_scale = _rand(torch, M, K // 128, low=1e-3, high=1.1e-2)
    b_scale = _rand(torch, K // 128, N // 128, low=1e-3, high=1.1e-2)
    return _gems_scaled_mm_case(torch, a, b, a_scale, b_scale)


def build_fla_l2norm(torch) -> Case:
    from fla.modules.norm.l2norm import l2norm

    shape = (4, 2048, 16, 128)
    return _autograd(torch, l2norm, {"x": _randn(torch, *shape, grad=True)}, _randn(torch, *shape))


def build_fla_rms_norm(torch) -> Case:
    from fla.modules.norm.layernorm import rms_norm

    shape = (4, 2048, 16, 128)
    inputs = {"x": _randn(torch, *shape, grad=True), "w": _randn(torch, 128, scale=0.1, shift=1.0, grad=True)}
    return _autograd(torch, lambda x, w: rms_norm(x, w, None), inputs, _randn(torch, *shape))


def build_fla_token_shift(torch) -> Case:
    from fla.modules.token_shift import token_shift

    shape = (8, 2048, 2048)
    return _autograd(torch, token_shift, {"x": _randn(torch, *shape, grad=True)}, _randn(torch, *shape))


def build_fla_causal_conv1d(torch) -> Case:
    from fla.modules.causal_conv1d import causal_conv1d

    B, T, D, W = 4, 2048, 4096, 4
    inputs = {"x": _randn(torch, B, T, D, grad=True), "w": _randn(torch, D, W, scale=0.5, grad=True),
              "b": _randn(torch, D, scale=0.1, grad=True)}

    def fn(x, w, b):
        return causal_conv1d(x, w, b, activation="silu")[0]

    return _autograd(torch, fn, inputs, _randn(torch, B, T, D))


def build_fla_conv1d_update(torch) -> Case:
    from fla.modules.causal_conv1d import causal_conv1d_update

    N, D, W = 256, 8192, 4
    x, cache = _randn(torch, N, D), _randn(torch, N, D, W)
    w, b = _randn(torch, D, W, scale=0.5), _randn(torch, D, scale=0.1)

    def fwd():  # one decode step: shifts x into the cache in place (restore_value=['cache'] while tuning)
        return causal_conv1d_update(x, cache, None, w, b, activation="silu")[0]

    return Case(fwd=fwd, outputs=lambda y: {"y": y, "cache": cache})


def build_fla_cumsum(torch) -> Case:
    from fla.ops.utils.cumsum import chunk_local_cumsum

    g = torch.nn.functional.logsigmoid(_randn(torch, 2, 4096, 16, 128, dtype=torch.float32))
    return Case(fwd=lambda: chunk_local_cumsum(g, chunk_size=64), outputs=lambda s: {"s": s})


def build_fla_simple_gla(torch) -> Case:
    from fla.ops.simple_gla import chunk_simple_gla

    B, T, H, K = 2, 2048, 16, 128
    inputs = {n: _randn(torch, B, T, H, K, scale=K**-0.5 if n == "k" else 1.0, grad=True) for n in ("q", "k", "v")}
    g_gamma = -_rand(torch, H, low=0.01, high=0.11)  # per-head decay: no `g`, so no Hopper refusal

    def fn(q, k, v):
        return chunk_simple_gla(q, k, v, g_gamma=g_gamma)[0]

    return _autograd(torch, fn, inputs, _randn(torch, B, T, H, K))


LIGER, GEMS, FLA = "liger_kernel 0.8.5", "flag_gems 5.0.2", "fla-core 0.6.0"
OPS = [
    Op("liger_swiglu_mlp", LIGER, "liger_kernel.ops.mlp.LigerMLPFunction.apply(x, w_gate, w_up, w_down)",
       "x[2,2048,2048] bf16, w_gate/w_up[5632,2048], w_down[2048,5632]; fwd+bwd",
       "_swiglu_kernel_forward (Autotuner, 32 configs, TMA TensorDescriptor pre_hook each; 8 run out of "
       "shared memory), _swiglu_kernel_backward_dI (Autotuner, 32, pre_hook); the untuned dGU kernel is "
       "launched with the forward's best_config",
       True, ("liger_kernel.ops.mlp",), build_liger_swiglu_mlp),
    Op("liger_dyt", LIGER, "liger_kernel.ops.dyt.LigerDyTFunction.apply(x, alpha, gamma, beta)",
       "x[8192,4096] bf16; fwd+bwd", "_dyt_fwd_kernel (Autotuner, 18), _dyt_bwd_kernel (Autotuner, 18, "
       "reset_to_zero=['DA'])", True, ("liger_kernel.ops.dyt",), build_liger_dyt),
    Op("liger_mm_int8int2", LIGER, "liger_kernel.ops.experimental.mm_int8int2.matmul(a, pack_weights(w))",
       "a[4096,2304] int8, w[2304,4096] in {-1,0,1} packed 4 per uint8; int32 out",
       "matmul_kernel (Autotuner, 15; the 5 with BLOCK_SIZE_K=128 fail tl.static_assert at K=2304)", False,
       ("liger_kernel.ops.experimental.mm_int8int2",), build_liger_mm_int8int2),
    Op("liger_fused_moe", LIGER, "liger_kernel.ops.fused_moe.LigerFusedMoEFunction.apply(x, w13, w2, idx, wts)",
       "T=2048 H=1024 I=512 E=8 top-2, bf16; fwd+bwd",
       "_fused_up_proj_swiglu_kernel, _fused_down_proj_kernel, _moe_bwd_down_proj_kernel (reset_to_zero dS), "
       "_moe_bwd_dX_expanded_kernel (32 each; 2 of dX's fail), _moe_bwd_dW1/_dW2 (16 each, reset_to_zero), "
       "_token_gather_weighted_sum_kernel (40, tuned twice); all Autotuner; an .item() sync: no CUDA graph",
       True, ("liger_kernel.ops.fused_moe",), build_liger_fused_moe, heavy=True),
    Op("gems_mm", GEMS, "flag_gems.mm(a, b)", "a[2048,4096] bf16 @ b[4096,32001] (N % 8 != 0)",
       "hopper mm_kernel_general (LibEntry over LibTuner, 22 configs, warmup=5 rep=10)", False,
       ("flag_gems",), build_gems_mm),
    Op("gems_mm_tma", GEMS, "flag_gems.mm(a, b)", "a[2048,4096] bf16 @ b[4096,4096]",
       "hopper mm_kernel_general_host_tma (LibEntry over LibTuner, 162 configs after the shared-memory "
       "filter, TMA pre_hook each, warmup=5 rep=5)", False, ("flag_gems",), build_gems_mm_tma, heavy=True),
    Op("gems_addmm", GEMS, "flag_gems.addmm(bias, x, w.t())", "x[2048,4096] bf16, w[4096,4096], bias[4096]",
       "addmm_kernel (LibEntry over LibTuner, 8, align32 key strategy)", False, ("flag_gems",), build_gems_addmm),
    Op("gems_bmm", GEMS, "flag_gems.bmm(q, k)", "[32,1024,128] @ [32,128,1024] bf16",
       "bmm_kernel (LibEntry over LibTuner over Heuristics, 12, log key strategy, warmup=25 rep=100)", False,
       ("flag_gems",), build_gems_bmm),
    Op("gems_sum_dims", GEMS, "flag_gems.sum_dim(x, [1, 2])", "x[64,256,4096] bf16",
       "sum_dim_kernel (LibEntry over LibTuner, 4)", False, ("flag_gems",), build_gems_sum_dims),
    Op("gems_layer_norm", GEMS, "flag_gems.layer_norm(x, [N], w, b); flag_gems.layer_norm_backward(...)",
       "x[4096,8192] bf16; fwd+bwd", "layer_norm_loop_kernel, layer_norm_backward_kernel, "
       "weight_bias_backward_kernel (LibEntry over Autotuner, 12 each)", True, ("flag_gems",),
       build_gems_layer_norm),
    Op("gems_batch_norm", GEMS, "flag_gems.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5); batch_norm_backward",
       "x[32,256,28,28] fp32, training (running stats updated in place); fwd+bwd",
       "batch_norm_forward_kernel (LibEntry over Autotuner over Heuristics, 3, restore_value=[running_mean, "
       "running_var]), batch_norm_backward_kernel (3)", True, ("flag_gems",), build_gems_batch_norm),
    Op("gems_group_mm", GEMS, "flag_gems.group_mm(a, b, offs)", "a[8192,2048] bf16 in 8 uneven groups, "
       "b[8,2048,4096]", "grouped_mm_tma_kernel (LibEntry over LibTuner, 7, TMA pre_hook each, 2 run out of "
       "shared memory; persistent)", False, ("flag_gems",), build_gems_group_mm),
    Op("gems_scaled_mm_int8", GEMS, "flag_gems.cutlass_scaled_mm(c, a, b, a_scale, b_scale)",
       "a[4096,4096] int8 per-token scale, b[4096,4096] int8 column-major per-channel scale; bf16 out",
       "_pertensor_or_pertoken_smm_kernel (Autotuner, 3; int32 accumulation: exact for every pick)", False,
       ("flag_gems",), build_gems_scaled_mm_int8),
    Op("gems_scaled_mm_fp8_block", GEMS, "flag_gems.cutlass_scaled_mm(c, a, b, a_scale, b_scale)",
       "a[4096,4096] fp8 e4m3 with 1x128 scales, b[4096,4096] fp8 column-major with 128x128 scales",
       "_block_wise_smm_kernel (Autotuner, 10; TILE_K fixed at 128)", False, ("flag_gems",),
       build_gems_scaled_mm_fp8_block),
    Op("fla_l2norm", FLA, "fla.modules.norm.l2norm.l2norm(x)", "x[4,2048,16,128] bf16; fwd+bwd",
       "l2norm_fwd_kernel, l2norm_bwd_kernel (CachedAutotuner, 25 each, cache_results=True)", True,
       ("fla.modules.norm.l2norm",), build_fla_l2norm),
    Op("fla_rms_norm", FLA, "fla.modules.norm.layernorm.rms_norm(x, w, None)", "x[4,2048,16,128] bf16; fwd+bwd",
       "layer_norm_fwd_kernel (Autotuner, 9), layer_norm_bwd_kernel (Autotuner, 6); cache_results=True", True,
       ("fla.modules.norm.layernorm",), build_fla_rms_norm),
    Op("fla_token_shift", FLA, "fla.modules.token_shift.token_shift(x)", "x[8,2048,2048] bf16; fwd+bwd",
       "token_shift_fwd_kernel_short, token_shift_bwd_kernel_short (Autotuner, 15 each)", True,
       ("fla.modules.token_shift",), build_fla_token_shift),
    Op("fla_causal_conv1d", FLA, "fla.modules.causal_conv1d.causal_conv1d(x, w, b, activation='silu')",
       "x[4,2048,4096] bf16, w[4096,4]; fwd+bwd", "causal_conv1d_fwd_kernel, causal_conv1d_bwd_kernel "
       "(Heuristics over CachedAutotuner, 16 each; launched with keyword arguments)", True,
       ("fla.modules.causal_conv1d",), build_fla_causal_conv1d),
    Op("fla_conv1d_update", FLA, "fla.modules.causal_conv1d.causal_conv1d_update(x, cache, None, w, b, 'silu')",
       "x[256,8192] bf16, cache[256,8192,4] updated in place", "causal_conv1d_update_kernel (Heuristics over "
       "CachedAutotuner, 24, restore_value=['cache'])", False, ("fla.modules.causal_conv1d",),
       build_fla_conv1d_update),
    Op("fla_cumsum", FLA, "fla.ops.utils.cumsum.chunk_local_cumsum(g, chunk_size=64)", "g[2,4096,16,128] fp32",
       "chunk_local_cumsum_vector_kernel (Heuristics over CachedAutotuner, 6)", False, ("fla.ops.utils.cumsum",),
       build_fla_cumsum),
    Op("fla_simple_gla", FLA, "fla.ops.simple_gla.chunk_simple_gla(q, k, v, g_gamma=g_gamma)",
       "q/k/v[2,2048,16,128] bf16, per-head decay; fwd+bwd",
       "chunk_fwd_kernel_h (Autotuner, 48; tuned again in the backward), chunk_fwd_kernel_o (CachedAutotuner, "
       "3), chunk_bwd_kernel_dh (48), chunk_bwd_kernel_dv (6), chunk_bwd_kernel_dqkwg (CachedAutotuner, 6)",
       True, ("fla.ops.simple_gla",), build_fla_simple_gla, heavy=True),
]
OPS_BY_NAME = {op.name: op for op in OPS}


# The default set: every kind of tuner and hook the libraries use (TMA pre_hooks, reset_to_zero,
# restore_value, LibTuner, CachedAutotuner, failing configs, exact low-bit GEMMs), sized from a one-rep
# run to take about 9 minutes at 3 reps on an H200. The other ops run by name or group (one library per
# run fits too), then --merge.
CORE = ("liger_swiglu_mlp", "liger_dyt", "liger_mm_int8int2", "gems_addmm", "gems_group_mm", "gems_scaled_mm_int8",
        "fla_conv1d_update", "fla_cumsum")
GROUPS = {"core": lambda op: op.name in CORE, "all": lambda op: True, "heavy": lambda op: op.heavy,
          "light": lambda op: not op.heavy, "liger": lambda op: op.lib == LIGER and not op.heavy,
          "gems": lambda op: op.lib == GEMS and not op.heavy, "fla": lambda op: op.lib == FLA and not op.heavy}


def select_ops(spec: Optional[str]) -> list:
    """Op names and groups: core (the default), liger, gems, fla (a library's ops that are not heavy),
    light (every op that is not heavy), heavy, all."""
    chosen: list = []
    spec = spec or "core"
    for name in (n.strip() for n in spec.split(",")):
        if name in GROUPS:
            chosen += [op for op in OPS if GROUPS[name](op)]
        elif name in OPS_BY_NAME:
            chosen.append(OPS_BY_NAME[name])
        elif name:
            raise SystemExit(f"unknown op or group {name!r}; --list shows the ops, groups are {', '.join(GROUPS)}")
    return list({op.name: op for op in chosen}.values())


# ---------------------------------------------------------------------------------------------
# The child: one mode, one rep
# ---------------------------------------------------------------------------------------------


def _first_time(value: Any) -> float:
    try:
        return float(value[0] if isinstance(value, (list, tuple)) else value)
    except (TypeError, ValueError, IndexError):
        return math.nan


class Probe:
    """Times launches of tuned kernels while armed and records the ones that tuned."""

    def __init__(self, torch):
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        self.torch, self.Autotuner, self.JITFunction = torch, Autotuner, JITFunction
        self.armed, self.depth, self.phase = False, 0, ""
        self.records: list = []
        self.known: dict = {}  # id -> tuner, every Autotuner seen

    def install(self) -> None:
        from triton.runtime.jit import KernelInterface

        original, probe = KernelInterface.__getitem__, self

        def __getitem__(kernel, grid):
            launch = original(kernel, grid)
            if not probe.armed or isinstance(kernel, probe.JITFunction):
                return launch
            tuners = probe.tuners_in(kernel)
            if not tuners:
                return launch
            return lambda *args, **kwargs: probe.launch(tuners, launch, args, kwargs)

        KernelInterface.__getitem__ = __getitem__

    def tuners_in(self, kernel: Any) -> list:
        found = []
        for _ in range(8):  # LibEntry -> LibTuner -> Heuristics -> JITFunction at most, in practice
            if kernel is None or isinstance(kernel, self.JITFunction):
                break
            if isinstance(kernel, self.Autotuner):
                found.append(kernel)
                self.known.setdefault(id(kernel), kernel)
            kernel = getattr(kernel, "fn", None)
        return found

    def scan(self) -> None:
        """Find every Autotuner the imports created (kernels are decorated at import)."""
        import gc
        import warnings

        with warnings.catch_warnings():  # isinstance() on some of torch's deprecated objects warns
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                try:
                    if isinstance(obj, self.Autotuner):
                        self.known.setdefault(id(obj), obj)
                except Exception:
                    pass

    @staticmethod
    def state(tuner: Any) -> tuple:
        cache = tuner.__dict__.get("cache")
        try:
            size = len(cache)
        except TypeError:  # FlagGems' LibTuner.cache is a sqlite-backed ConfigCache
            size = None
        return size, tuner.__dict__.get("configs_timings")

    def tuned(self, tuner: Any, before: tuple) -> bool:
        size, timings = self.state(tuner)
        return (size is not None and before[0] is not None and size > before[0]) or timings is not before[1]

    def launch(self, tuners: list, launch: Callable, args: tuple, kwargs: dict):
        if self.depth:
            return launch(*args, **kwargs)
        before = [self.state(t) for t in tuners]
        self.torch.cuda.synchronize()
        start = time.perf_counter()
        self.depth += 1
        try:
            result = launch(*args, **kwargs)
        finally:
            self.depth -= 1
        self.torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        for tuner, state in zip(tuners, before):
            if self.tuned(tuner, state):
                self.records.append(self.describe(tuner, seconds, "probe"))
        return result

    def describe(self, tuner: Any, seconds: Optional[float], via: str) -> dict:
        timings = tuner.__dict__.get("configs_timings") or {}
        times = [_first_time(v) for v in timings.values()]
        finite = [t for t in times if math.isfinite(t)]
        configs = list(getattr(tuner, "configs", []) or [])
        name = getattr(getattr(tuner, "base_fn", None), "__name__", None) or type(tuner.fn).__name__
        return {
            "kernel": name, "phase": self.phase, "seconds": seconds, "via": via, "cls": type(tuner).__name__,
            "n_configs": len(configs), "n_timed": len(timings), "n_failed": len(times) - len(finite),
            "best_ms": min(finite) if finite else None, "pick": str(getattr(tuner, "best_config", None)),
            "timings": {str(c): _first_time(v) for c, v in timings.items()},
            "pre_hook": sum(1 for c in configs if getattr(c, "pre_hook", None)),
            "reset_to_zero": list(getattr(tuner, "reset_to_zero", []) or []),
            "restore_value": list(getattr(tuner, "restore_value", []) or []),
            "user_pre_hook": bool(getattr(tuner, "user_defined_pre_hook", False)),
            "own_do_bench": tuner.__dict__.get("_do_bench") is not None,
            "own_run": any("run" in k.__dict__ for k in type(tuner).__mro__ if k is not self.Autotuner
                           and issubclass(k, self.Autotuner)),
        }


def _warm_up(torch) -> float:
    """One plain kernel and one matmul: CUDA context, Triton's driver and compiler, cuBLAS."""
    import triton
    import triton.language as tl

    @triton.jit
    def _fill(out, value, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, value, mask=offs < n)

    start = time.perf_counter()
    out = torch.empty(1000, device="cuda")
    _fill[(1,)](out, 1.0, 1000, BLOCK=1024)
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _graph_ms(torch, step: Callable) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    n = max(5, min(200, int(20.0 / max(start.elapsed_time(end), 1e-3))))
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / n)
    del graph
    return statistics.median(samples)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _steady(torch, step: Callable) -> dict:
    """CUDA graph replay where the op captures, else do_bench. An op that synchronises with the host
    cannot be captured: one step under sync-debug "error" finds that without starting a capture."""
    import triton

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        note = None
    except Exception as exc:
        note = "host sync: " + _first_line(exc)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    if note is None:
        try:
            return {"ms": _graph_ms(torch, step), "method": "cuda_graph"}
        except Exception as exc:  # does not capture for another reason
            note = _first_line(exc)
            torch.cuda.synchronize()
    return {"ms": triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median"), "method": "do_bench",
            "graph_error": note}


def _last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip().splitlines()[-1][:500] if lines else repr(exc)


def run_op(torch, probe: Probe, op: Op, keep: Optional[dict]) -> dict:
    seed = zlib.crc32(op.name.encode())
    torch.manual_seed(seed)
    _GEN["cuda"] = torch.Generator(device="cuda").manual_seed(seed)
    row: dict = {"ok": False}
    case = result = grads = None
    probe.records = []
    try:
        case = op.build(torch)
        torch.cuda.synchronize()
        before = {id(t): Probe.state(t) for t in probe.known.values()}
        probe.armed, probe.phase = True, "fwd"
        start = time.perf_counter()
        result = case.fwd()
        torch.cuda.synchronize()
        row["fwd_s"] = time.perf_counter() - start
        if case.bwd is not None:
            probe.phase = "bwd"
            start = time.perf_counter()
            grads = case.bwd(result)
            torch.cuda.synchronize()
            row["bwd_s"] = time.perf_counter() - start
        probe.armed = False
        row["first_call_s"] = row["fwd_s"] + row.get("bwd_s", 0.0)
        tensors = {**case.outputs(result), **(grads or {})}
        if keep is not None:
            keep[op.name] = {k: v.detach().to("cpu", copy=True) for k, v in tensors.items() if v is not None}
        seen = {(r["kernel"], r["pick"]) for r in probe.records}
        probe.phase = "unknown"
        unprobed = [probe.describe(t, None, "unprobed") for i, t in list(probe.known.items())
                    if i in before and probe.tuned(t, before[i])]
        row["tuned"] = probe.records + [r for r in unprobed if (r["kernel"], r["pick"]) not in seen]
        del tensors, result, grads
        fwd, bwd = case.fwd, case.bwd
        step = case.step or ((lambda: bwd(fwd())) if bwd else fwd)
        row["steady"] = _steady(torch, step)
        row["ok"] = True
    except Exception as exc:
        probe.armed = False
        row["error"] = _last_line(exc)
        row["traceback"] = traceback.format_exc()[-3000:]
        row.setdefault("tuned", probe.records)
        try:
            torch.cuda.synchronize()
        except Exception as sync_exc:  # a sticky CUDA error: later ops will fail too
            row["sync_error"] = _last_line(sync_exc)
    finally:
        probe.armed = False
        del case
        torch.cuda.empty_cache()
    return row


def child(args: argparse.Namespace) -> None:
    ops = select_ops(args.ops)
    out: dict = {"mode": args.child, "rep": args.rep, "pid": os.getpid(), "ops": {}}
    started = time.perf_counter()
    import torch
    import triton

    probe = Probe(torch)
    probe.install()  # before the plugin and the libraries, in every mode
    out["warm_up_s"] = _warm_up(torch)
    modules = list(dict.fromkeys(m for op in ops for m in op.modules))
    import importlib
    import importlib.metadata

    def import_libs() -> None:
        t0 = time.perf_counter()
        for name in modules:
            t1 = time.perf_counter()
            try:
                importlib.import_module(name)
            except Exception as exc:
                out.setdefault("import_errors", {})[name] = _last_line(exc)
            out.setdefault("import_s", {})[name] = time.perf_counter() - t1
        out["import_libs_s"] = time.perf_counter() - t0

    def import_plugin() -> None:
        t0 = time.perf_counter()
        import triton_dist_plugin

        out["import_plugin_s"] = time.perf_counter() - t0
        out["plugin_active"] = triton_dist_plugin.is_active()
        if out["plugin_active"]:
            notes = out.setdefault("tuning_notes", [])

            class Notes:  # where each tuning's time went, as the plugin reports it
                @triton_dist_plugin.hookimpl
                def tdp_on_tuned(self, record):
                    notes.append({"kernel": record.kernel_name, "bench_s": record.bench_time,
                                  "n": len(record.timings), "failed": len(record.failures), "notes": record.notes,
                                  "pick": str(record.best_config),
                                  "timings": {str(c): list(t) for c, t in record.timings.items()}})

            triton_dist_plugin.register(Notes())

    if args.child == "after":
        import_libs()
        import_plugin()
    else:
        import_plugin()
        import_libs()
    probe.scan()
    out["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
                       "gpu": torch.cuda.get_device_name(), "tuners_at_start": len(probe.known)}
    for dist in ("flag_gems", "liger_kernel", "fla-core"):
        try:
            out["versions"][dist] = importlib.metadata.version(dist)
        except Exception:
            pass
    keep: Optional[dict] = {} if args.tensors else None
    for op in ops:
        failed_imports = [out["import_errors"][m] for m in op.modules if m in out.get("import_errors", {})]
        if failed_imports:
            out["ops"][op.name] = {"ok": False, "error": "import failed: " + "; ".join(failed_imports)}
            continue
        row = run_op(torch, probe, op, keep)
        out["ops"][op.name] = row
        status = "ok" if row["ok"] else f"FAILED: {row['error']}"
        tuned, steady = row.get("tuned", []), row.get("steady", {})
        print(f"  [{args.child} r{args.rep}] {op.name:26s} first {_fmt(row.get('first_call_s'), '.2f', 7)}s "
              f"tuned {len(tuned):2d}x ({sum(r['n_configs'] for r in tuned):3d} configs) "
              f"steady {_fmt(steady.get('ms'), '.3f', 8)}ms {steady.get('method', '-'):10s} {status}", flush=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # partial results survive a kill
    out["child_s"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    if keep is not None:
        torch.save(keep, args.tensors)


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


@dataclass
class ChildRun:
    mode: str
    rep: int
    data: dict = field(default_factory=dict)
    rc: Optional[int] = None
    wall_s: float = 0.0
    error: str = ""
    tensors: Optional[Path] = None


def child_env(mode: str, scratch: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    for name in ("TRITON_CACHE_DIR", "TRITON_DIST_AUTOTUNE_DIR", "FLAGGEMS_CACHE_DIR"):
        path = scratch / name.lower()
        path.mkdir(parents=True)
        env[name] = str(path)
    env.update(GEMS_VENDOR="nvidia", FLA_CACHE_MODE="disabled", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    if mode == "disabled":
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"
    return env


def run_child(run: ChildRun, ops: list, work: Path, timeout: float) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=f"{run.mode}-r{run.rep}-", dir=work))
    out = work / f"{run.mode}-r{run.rep}.json"
    keep = run.rep == 0 or run.mode == "disabled"  # disabled's other reps show upstream's own variation
    run.tensors = work / f"{run.mode}-r{run.rep}.pt" if keep else None
    log = work / f"{run.mode}-r{run.rep}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", run.mode, "--rep", str(run.rep), "--out",
           str(out), "--ops", ",".join(op.name for op in ops)]
    if run.tensors:
        cmd += ["--tensors", str(run.tensors)]
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(run.mode, scratch), stderr=err, start_new_session=True)
        try:
            run.rc = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and the compile workers it forked
            proc.wait()
            run.error = f"killed after {timeout:.0f}s"
    run.wall_s = time.perf_counter() - start
    if out.exists():
        run.data = json.loads(out.read_text())
    if run.rc not in (0, None) and not run.error:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        run.error = f"exit {run.rc}: " + " | ".join(tail)[-600:]
    if run.tensors and not run.tensors.exists():
        run.tensors = None
    shutil.rmtree(scratch, ignore_errors=True)


def _median(values: list) -> Optional[float]:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else None


def compare(ref: dict, got: dict) -> dict:
    """Bitwise first; else the largest absolute difference against TOLERANCE of the reference's scale."""
    import torch

    out: dict = {"equal": True, "close": True, "tensors": {}}
    for name in sorted(set(ref) | set(got)):
        a, b = ref.get(name), got.get(name)
        if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
            out["tensors"][name] = "missing or shape/dtype differs"
            out["equal"] = out["close"] = False
            continue
        if a.reshape(-1).contiguous().view(torch.uint8).equal(b.reshape(-1).contiguous().view(torch.uint8)):
            continue
        out["equal"] = False
        fa, fb = a.double(), b.double()
        diff = (fa - fb).abs()
        finite = torch.isfinite(fa) & torch.isfinite(fb)
        nan_mismatch = int((torch.isnan(fa) != torch.isnan(fb)).sum())
        scale = float(fa[finite].abs().max()) if bool(finite.any()) else 0.0
        max_abs = float(diff[finite].max()) if bool(finite.any()) else math.inf
        tol = TOLERANCE.get(str(a.dtype), 0.0) * max(scale, 1e-30)
        close = max_abs <= tol and nan_mismatch == 0
        out["close"] &= close
        out["tensors"][name] = {"max_abs": max_abs, "ref_absmax": scale, "rel": max_abs / scale if scale else None,
                                "differing": int((fa != fb).sum()), "numel": a.numel(), "nan_mismatch": nan_mismatch,
                                "close": close}
    return out


def _verdict(cmp: Optional[dict]) -> str:
    if cmp is None:
        return "-"
    return "=" if cmp["equal"] else ("~" if cmp["close"] else "X")


def analyse(runs: list, ops: list, modes: list) -> dict:
    import torch

    tensors: dict = {}
    for run in runs:
        if run.tensors:
            try:
                tensors[(run.mode, run.rep)] = torch.load(run.tensors, map_location="cpu")
            except Exception as exc:
                run.error = (run.error + "; " if run.error else "") + f"tensors unreadable: {_last_line(exc)}"
    report: dict = {}
    for op in ops:
        rows = {(r.mode, r.rep): r.data.get("ops", {}).get(op.name) for r in runs}
        entry: dict = {"library": op.lib, "call": op.call, "shapes": op.shapes, "kernels_expected": op.kernels,
                       "backward_tuned": op.backward, "modes": {}, "kernels": {}, "outputs": {}, "errors": {}}
        for mode in modes:
            mine = [rows.get((r.mode, r.rep)) for r in runs if r.mode == mode]
            done = [x for x in mine if x and x.get("ok")]
            errs = sorted({x["error"] for x in mine if x and not x.get("ok") and x.get("error")})
            missing = sum(1 for x in mine if x is None)
            if errs or missing:
                entry["errors"][mode] = errs + ([f"{missing} run(s) without a result"] if missing else [])
            steady = [x["steady"] for x in done if x.get("steady")]
            entry["modes"][mode] = {
                "runs_ok": len(done), "runs": len(mine),
                "first_call_s": _median([x.get("first_call_s") for x in done]),
                "fwd_s": _median([x.get("fwd_s") for x in done]), "bwd_s": _median([x.get("bwd_s") for x in done]),
                "steady_ms": _median([s.get("ms") for s in steady]),
                "steady_methods": sorted({s.get("method") for s in steady}),
                "graph_errors": sorted({s["graph_error"] for s in steady if s.get("graph_error")}),
            }
            for x in done:
                counts: dict = {}
                for rec in x.get("tuned", []):
                    counts[rec["kernel"]] = counts.get(rec["kernel"], 0) + 1
                    kname = rec["kernel"] if counts[rec["kernel"]] == 1 else f"{rec['kernel']}#{counts[rec['kernel']]}"
                    k = entry["kernels"].setdefault(kname, {"cls": rec["cls"], "n_configs": rec["n_configs"],
                                                            "pre_hook": rec["pre_hook"],
                                                            "reset_to_zero": rec["reset_to_zero"],
                                                            "restore_value": rec["restore_value"],
                                                            "own_run": rec.get("own_run"),
                                                            "own_do_bench": rec.get("own_do_bench"),
                                                            "phase": rec["phase"], "modes": {}})
                    m = k["modes"].setdefault(mode, {"seconds": [], "picks": [], "n_failed": [], "via": [],
                                                     "timings": []})
                    m["timings"].append(rec.get("timings"))
                    m["seconds"].append(rec["seconds"])
                    m["picks"].append(rec["pick"])
                    m["n_failed"].append(rec["n_failed"])
                    m["via"].append(rec["via"])
        for k in entry["kernels"].values():
            base = _median(k["modes"].get("disabled", {}).get("seconds", []))
            for mode, m in k["modes"].items():
                m["median_s"] = _median(m["seconds"])
                if mode != "disabled" and base and m["median_s"]:
                    m["speedup"] = base / m["median_s"]
            ref_picks = k["modes"].get("disabled", {}).get("picks", [])
            k["upstream_picks_vary"] = len(set(ref_picks)) > 1
            for mode in modes:
                if mode != "disabled" and mode in k["modes"] and ref_picks:
                    k["modes"][mode]["pick_rep0_equal"] = k["modes"][mode]["picks"][0] == ref_picks[0]
        ref = tensors.get(("disabled", 0), {}).get(op.name)
        base_steady = entry["modes"].get("disabled", {}).get("steady_ms")
        for mode in modes:
            got = tensors.get((mode, 0), {}).get(op.name)
            if mode != "disabled":
                entry["outputs"][mode] = compare(ref, got) if ref is not None and got is not None else None
                ms = entry["modes"][mode]["steady_ms"]
                entry["modes"][mode]["steady_ratio"] = ms / base_steady if ms and base_steady else None
                speedups = [k["modes"][mode].get("speedup") for k in entry["kernels"].values() if mode in k["modes"]]
                speedups = [s for s in speedups if s]
                entry["modes"][mode]["min_tuning_speedup"] = min(speedups) if speedups else None
        upstream_reps = {}
        for (mode, rep), saved in tensors.items():
            if mode == "disabled" and rep > 0 and ref is not None and op.name in saved:
                upstream_reps[rep] = compare(ref, saved[op.name])
        entry["upstream_reps"] = upstream_reps
        entry["upstream_deterministic"] = all(c["equal"] for c in upstream_reps.values()) if upstream_reps else None
        report[op.name] = entry
    return report


def findings(report: dict, modes: list) -> list:
    out = []
    for name, e in report.items():
        plugin_modes = [m for m in modes if m != "disabled"]
        failed = [m for m in plugin_modes if e["errors"].get(m)]
        if failed and "disabled" in modes and not e["errors"].get("disabled"):
            out.append(f"FAILS ONLY UNDER THE PLUGIN: {name} in {failed}: {e['errors'][failed[0]][0]}")
        elif e["errors"].get("disabled") and not failed and plugin_modes:
            out.append(f"fails only upstream (disabled): {name}: {e['errors']['disabled'][0]}")
        elif e["errors"]:
            out.append(f"fails in every mode run: {name}: {next(iter(e['errors'].values()))[0]}")
        for m in plugin_modes:
            cmp = e["outputs"].get(m)
            if cmp and not cmp["close"]:
                bad = {k: v for k, v in cmp["tensors"].items() if not isinstance(v, dict) or not v["close"]}
                out.append(f"OUTPUTS DIFFER BEYOND TOLERANCE: {name} ({m}): {json.dumps(bad, default=str)[:400]}")
            elif cmp and not cmp["equal"]:
                same_picks = all(k["modes"].get(m, {}).get("pick_rep0_equal", False) for k in e["kernels"].values())
                if same_picks and e["upstream_deterministic"] is not False:
                    out.append(f"not bitwise equal although every pick is the same: {name} ({m})")
            methods = e["modes"].get(m, {}).get("steady_methods", [])
            upstream_methods = e["modes"].get("disabled", {}).get("steady_methods")
            if methods and upstream_methods and methods != upstream_methods:
                out.append(f"steady-state method differs: {name} ({m}: {methods}, graph errors "
                           f"{e['modes'][m]['graph_errors']})")
            slow = e["modes"].get(m, {}).get("min_tuning_speedup")
            if slow is not None and slow < 0.8:
                out.append(f"tuning slower under the plugin: {name} ({m}): min speedup {slow:.2f}x")
            ratio = e["modes"].get(m, {}).get("steady_ratio")
            if ratio is not None and ratio > 1.05:
                out.append(f"steady state slower under the plugin: {name} ({m}): {ratio:.3f}x")
        if e["upstream_deterministic"] is False:
            out.append(f"upstream itself differs between runs: {name}")
        unprobed = [k for k, v in e["kernels"].items() if any("unprobed" in m["via"] for m in v["modes"].values())]
        if unprobed:
            out.append(f"tuned without passing through kernel[grid] (no timing): {name}: {unprobed}")
    return out


def _fmt(value: Optional[float], spec: str, width: int) -> str:
    return f"{value:{spec}}".rjust(width) if value is not None else "-".rjust(width)


def table(report: dict, modes: list) -> str:
    plugin_modes = [m for m in modes if m != "disabled"]
    short = {"disabled": "dis", "before": "bef", "after": "aft"}
    head = (f"{'op':26s} {'eq ' + '/'.join(short[m] for m in plugin_modes):>9s} "
            + " ".join(f"{'1st ' + short[m]:>8s}" for m in modes) + " "
            + " ".join(f"{'tune ' + short[m]:>9s}" for m in plugin_modes) + " "
            + " ".join(f"{'steady ' + short[m]:>10s}" for m in plugin_modes))
    lines = [head, "-" * len(head)]
    for name, e in report.items():
        eq = "/".join("E" if e["errors"].get(m) else _verdict(e["outputs"].get(m)) for m in plugin_modes)
        first = " ".join(_fmt(e["modes"][m]["first_call_s"], ".2f", 8) for m in modes)
        tune = " ".join(_fmt(e["modes"][m].get("min_tuning_speedup"), ".2f", 9) for m in plugin_modes)
        steady = " ".join(_fmt(e["modes"][m].get("steady_ratio"), ".3f", 10) for m in plugin_modes)
        lines.append(f"{name:26s} {eq:>9s} {first} {tune} {steady}")
    lines.append("eq: = bitwise, ~ within tolerance, X beyond, E error, - missing. 1st: first call (fwd+bwd) "
                 "s, median over reps. tune: slowest kernel's tuning speedup, upstream/plugin. steady: "
                 "plugin/upstream time of the tuned op.")
    return "\n".join(lines)


def list_ops() -> None:
    for op in OPS:
        groups = [g for g, member in GROUPS.items() if member(op) and g not in ("all", "light")]
        print(f"{op.name}  [{', '.join(groups)}]\n"
              f"    library:  {op.lib}\n    call:     {op.call}\n    inputs:   {op.shapes}\n"
              f"    kernels:  {op.kernels}\n    backward tuned: {'yes' if op.backward else 'no'}")


def driver(args: argparse.Namespace) -> None:
    ops = select_ops(args.ops)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SystemExit(f"--modes takes {', '.join(MODES)}; got {bad or 'none'}")
    work = Path(tempfile.mkdtemp(prefix="tdp-real-libs-"))
    deadline = time.perf_counter() + args.budget
    print(f"{len(ops)} ops x {args.reps} reps x {len(modes)} modes; work dir {work}; budget {args.budget:.0f}s",
          flush=True)
    runs: list = []
    skipped: list = []
    longest: dict = {}  # mode -> longest wall time of its children so far
    for rep in range(args.reps):
        for mode in modes:
            left = deadline - time.perf_counter()
            if left < longest.get(mode, 0.0) * 1.05 + 5 or left < 20:
                skipped.append(f"{mode} r{rep}")
                continue
            run = ChildRun(mode, rep)
            print(f"[{mode} r{rep}] starting ({left:.0f}s of the budget left)", flush=True)
            run_child(run, ops, work, min(args.child_timeout, left))
            longest[mode] = max(longest.get(mode, 0.0), run.wall_s)
            ok = sum(1 for r in run.data.get("ops", {}).values() if r.get("ok"))
            print(f"[{mode} r{rep}] {ok}/{len(ops)} ops ok in {run.wall_s:.1f}s"
                  f"{' - ' + run.error if run.error else ''}", flush=True)
            runs.append(run)
    if skipped:
        print(f"skipped for the budget: {', '.join(skipped)}", flush=True)
    report = analyse(runs, ops, modes)
    notes = findings(report, modes)
    children = [{"mode": r.mode, "rep": r.rep, "rc": r.rc, "wall_s": r.wall_s, "error": r.error,
                 **{k: r.data.get(k) for k in ("warm_up_s", "import_plugin_s", "import_libs_s", "plugin_active",
                                               "import_errors", "versions", "child_s", "tuning_notes")}}
                for r in runs]
    wrong_state = [f"{c['mode']} r{c['rep']}" for c in children
                   if c["plugin_active"] is not None and c["plugin_active"] != (c["mode"] != "disabled")]
    if wrong_state:
        notes.insert(0, f"plugin active/inactive not as the mode says in: {wrong_state}")
    results = {"what": WHAT, "argv": sys.argv[1:], "reps": args.reps, "modes": modes,
               "ops": [op.name for op in ops], "skipped_runs": skipped, "children": children, "findings": notes,
               "per_op": report, "env": {k: v for k, v in os.environ.items() if k.startswith(("TRITON_", "TDP_"))}}
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    publish(args.results, results)


WHAT = ("FlagGems, Liger-Kernel and fla ops: upstream autotuner (disabled) against the plugin imported before and "
        "after the libraries; fresh processes and caches per run")


def publish(name: str, results: dict) -> None:
    path = save_results(name, results)
    print(f"\nwrote {path}", flush=True)
    notes = results["findings"]
    print("\nfindings:" if notes else "\nfindings: none", flush=True)
    for line in notes:
        print(f"  - {line}", flush=True)
    print("\n" + table(results["per_op"], results["modes"]), flush=True)


def merge(names: list, out_name: str) -> None:
    """Combine results files of separate runs (e.g. one per library) into one."""
    parts = []
    for name in names:
        path = Path(name) if Path(name).exists() else ROOT / "benchmarks" / "results" / name
        parts.append((path.name, json.loads(path.read_text())))
    modes = parts[0][1]["modes"]
    if any(p["modes"] != modes for _, p in parts):
        raise SystemExit("--merge: the runs used different --modes")
    merged = {"what": WHAT, "merged_from": [n for n, _ in parts], "reps": sorted({p["reps"] for _, p in parts}),
              "modes": modes, "ops": [], "skipped_runs": [], "children": [], "findings": [], "per_op": {}, "env": {}}
    for source, part in parts:
        merged["ops"] += part["ops"]
        merged["skipped_runs"] += [f"{source}: {s}" for s in part["skipped_runs"]]
        merged["children"] += [{**c, "source": source} for c in part["children"]]
        merged["findings"] += part["findings"]
        merged["per_op"].update(part["per_op"])
        merged["env"][source] = part.get("env", {})
    publish(out_name, merged)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="core", help="comma-separated op names and groups: core (default), liger, "
                        "gems, fla, light (all but heavy), heavy, all")
    parser.add_argument("--reps", type=int, default=3, help="processes per mode (default 3)")
    parser.add_argument("--modes", default=",".join(MODES), help="default: disabled,before,after")
    parser.add_argument("--list", action="store_true", help="list the ops and exit")
    parser.add_argument("--child-timeout", type=float, default=300.0, help="seconds before a child is killed")
    parser.add_argument("--budget", type=float, default=550.0,
                        help="seconds for all children; runs that would not fit are skipped (default 550)")
    parser.add_argument("--results", default=RESULTS_NAME, help=f"file name under results/ (default {RESULTS_NAME})")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (child logs, JSON, tensors)")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="results files (names under results/, or paths) to combine into --results, then exit")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--tensors", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list:
        list_ops()
    elif args.merge:
        merge(args.merge, args.results)
    elif args.child:
        child(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
