"""The flash-linear-attention (fla) ops."""

from __future__ import annotations

from .cases import Case, Op, autograd_case, rand, randn

FLA = "fla-core 0.6.0"


def build_fla_l2norm(torch) -> Case:
    from fla.modules.norm.l2norm import l2norm

    shape = (4, 2048, 16, 128)
    return autograd_case(torch, l2norm, {"x": randn(torch, *shape, grad=True)}, randn(torch, *shape))


def build_fla_rms_norm(torch) -> Case:
    from fla.modules.norm.layernorm import rms_norm

    shape = (4, 2048, 16, 128)
    inputs = {"x": randn(torch, *shape, grad=True), "w": randn(torch, 128, scale=0.1, shift=1.0, grad=True)}
    return autograd_case(torch, lambda x, w: rms_norm(x, w, None), inputs, randn(torch, *shape))


def build_fla_token_shift(torch) -> Case:
    from fla.modules.token_shift import token_shift

    shape = (8, 2048, 2048)
    return autograd_case(torch, token_shift, {"x": randn(torch, *shape, grad=True)}, randn(torch, *shape))


def build_fla_causal_conv1d(torch) -> Case:
    from fla.modules.causal_conv1d import causal_conv1d

    B, T, D, W = 4, 2048, 4096, 4
    inputs = {"x": randn(torch, B, T, D, grad=True), "w": randn(torch, D, W, scale=0.5, grad=True),
              "b": randn(torch, D, scale=0.1, grad=True)}

    def fn(x, w, b):
        return causal_conv1d(x, w, b, activation="silu")[0]

    return autograd_case(torch, fn, inputs, randn(torch, B, T, D))


def build_fla_conv1d_update(torch) -> Case:
    from fla.modules.causal_conv1d import causal_conv1d_update

    N, D, W = 256, 8192, 4
    x, cache = randn(torch, N, D), randn(torch, N, D, W)
    w, b = randn(torch, D, W, scale=0.5), randn(torch, D, scale=0.1)

    def fwd():  # one decode step: shifts x into the cache in place (restore_value=['cache'] while tuning)
        return causal_conv1d_update(x, cache, None, w, b, activation="silu")[0]

    return Case(fwd=fwd, outputs=lambda y: {"y": y, "cache": cache})


def build_fla_cumsum(torch) -> Case:
    from fla.ops.utils.cumsum import chunk_local_cumsum

    g = torch.nn.functional.logsigmoid(randn(torch, 2, 4096, 16, 128, dtype=torch.float32))
    return Case(fwd=lambda: chunk_local_cumsum(g, chunk_size=64), outputs=lambda s: {"s": s})


def build_fla_simple_gla(torch) -> Case:
    from fla.ops.simple_gla import chunk_simple_gla

    B, T, H, K = 2, 2048, 16, 128
    inputs = {n: randn(torch, B, T, H, K, scale=K**-0.5 if n == "k" else 1.0, grad=True) for n in ("q", "k", "v")}
    g_gamma = -rand(torch, H, low=0.01, high=0.11)  # per-head decay: no `g`, so no Hopper refusal

    def fn(q, k, v):
        return chunk_simple_gla(q, k, v, g_gamma=g_gamma)[0]

    return autograd_case(torch, fn, inputs, randn(torch, B, T, H, K))


FLA_OPS = [
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
