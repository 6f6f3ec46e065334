"""The Liger-Kernel ops."""

from __future__ import annotations

from .cases import Case, Op, autograd_case, randint, randn

LIGER = "liger_kernel 0.8.5"


def build_liger_swiglu_mlp(torch) -> Case:
    from liger_kernel.ops.mlp import LigerMLPFunction

    B, S, D, H = 2, 2048, 2048, 5632
    inputs = {"x": randn(torch, B, S, D, grad=True), "w_gate": randn(torch, H, D, scale=D**-0.5, grad=True),
              "w_up": randn(torch, H, D, scale=D**-0.5, grad=True),
              "w_down": randn(torch, D, H, scale=H**-0.5, grad=True)}
    return autograd_case(torch, LigerMLPFunction.apply, inputs, randn(torch, B, S, D))


def build_liger_dyt(torch) -> Case:
    from liger_kernel.ops.dyt import LigerDyTFunction

    M, N = 8192, 4096
    inputs = {"x": randn(torch, M, N, grad=True), "alpha": randn(torch, 1, scale=0.1, shift=0.5, grad=True),
              "gamma": randn(torch, N, scale=0.1, shift=1.0, grad=True),
              "beta": randn(torch, N, scale=0.1, grad=True)}
    return autograd_case(torch, LigerDyTFunction.apply, inputs, randn(torch, M, N))


def build_liger_mm_int8int2(torch) -> Case:
    from liger_kernel.ops.experimental.mm_int8int2 import matmul, pack_weights

    M, K, N = 4096, 2304, 4096  # K % 512 != 0: the five BLOCK_SIZE_K=128 configs fail their static_assert
    a = randint(torch, -127, 128, (M, K), torch.int8)
    w = randint(torch, -1, 2, (K, N), torch.int8)
    b = pack_weights(w.clone(), 2)
    return Case(fwd=lambda: matmul(a, b), outputs=lambda c: {"c": c})


def build_liger_fused_moe(torch) -> Case:
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    T, H, inter, E, K = 2048, 1024, 512, 8, 2
    scores = randn(torch, T, E, dtype=torch.float32).softmax(-1)
    weights, index = scores.topk(K, dim=-1)
    inputs = {"x": randn(torch, T, H, grad=True),
              "w_gate_up": randn(torch, E, 2 * inter, H, scale=H**-0.5, grad=True),
              "w_down": randn(torch, E, H, inter, scale=inter**-0.5, grad=True)}
    index, weights = index.to(torch.int32), weights.to(torch.bfloat16)

    def fn(x, w1, w2):
        return LigerFusedMoEFunction.apply(x, w1, w2, index, weights)

    return autograd_case(torch, fn, inputs, randn(torch, T, H))


LIGER_OPS = [
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
]
