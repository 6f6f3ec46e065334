"""The FlagGems ops."""

from __future__ import annotations

from .cases import Case, Op, rand, randint, randn

GEMS = "flag_gems 5.0.2"


def _gems():
    import flag_gems

    return flag_gems


def build_gems_mm(torch) -> Case:
    a, b = randn(torch, 2048, 4096), randn(torch, 4096, 32001, scale=4096**-0.5)  # N % 8 != 0: no TMA path
    return Case(fwd=lambda: _gems().mm(a, b), outputs=lambda c: {"c": c})


def build_gems_mm_tma(torch) -> Case:
    a, b = randn(torch, 2048, 4096), randn(torch, 4096, 4096, scale=4096**-0.5)
    return Case(fwd=lambda: _gems().mm(a, b), outputs=lambda c: {"c": c})


def build_gems_addmm(torch) -> Case:
    bias, x, w = randn(torch, 4096), randn(torch, 2048, 4096), randn(torch, 4096, 4096, scale=4096**-0.5)
    return Case(fwd=lambda: _gems().addmm(bias, x, w.t()), outputs=lambda c: {"c": c})


def build_gems_bmm(torch) -> Case:
    q, k = randn(torch, 32, 1024, 128), randn(torch, 32, 128, 1024)
    return Case(fwd=lambda: _gems().bmm(q, k), outputs=lambda c: {"c": c})


def build_gems_sum_dims(torch) -> Case:
    x = randn(torch, 64, 256, 4096)
    return Case(fwd=lambda: _gems().sum_dim(x, [1, 2]), outputs=lambda s: {"s": s})


def build_gems_layer_norm(torch) -> Case:
    M, N = 4096, 8192  # N > 4096: the looped forward kernel (12 configs)
    x, dy = randn(torch, M, N), randn(torch, M, N)
    w, b = randn(torch, N, scale=0.1, shift=1.0), randn(torch, N, scale=0.1)
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
    x, dy = randn(torch, N, C, H, W, dtype=torch.float32), randn(torch, N, C, H, W, dtype=torch.float32)
    w, b = randn(torch, C, dtype=torch.float32, scale=0.1, shift=1.0), randn(torch, C, dtype=torch.float32)
    running_mean = randn(torch, C, dtype=torch.float32, scale=0.1)
    running_var = rand(torch, C, low=0.5, high=1.5)
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
    a, b = randn(torch, sum(sizes), K), randn(torch, len(sizes), K, N, scale=K**-0.5)
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
    a = randint(torch, -127, 128, (M, K), torch.int8)
    b = randint(torch, -127, 128, (N, K), torch.int8).t()  # column-major, as required
    a_scale, b_scale = rand(torch, M, 1, low=1e-4, high=1.1e-3), rand(torch, 1, N, low=1e-4, high=1.1e-3)
    return _gems_scaled_mm_case(torch, a, b, a_scale, b_scale)


def build_gems_scaled_mm_fp8_block(torch) -> Case:
    M, K, N = 4096, 4096, 4096
    a = randn(torch, M, K, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = randn(torch, N, K, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    a_scale = rand(torch, M, K // 128, low=1e-3, high=1.1e-2)
    b_scale = rand(torch, K // 128, N // 128, low=1e-3, high=1.1e-2)
    return _gems_scaled_mm_case(torch, a, b, a_scale, b_scale)


GEMS_OPS = [
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
]
