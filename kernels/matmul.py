"""Matmul ``C = A @ B`` with grouped tile ordering (Triton tutorial 03).

fp32 accumulation, a loop over K in ``BLOCK_K`` steps, and masks on every edge
so any (M, N, K) is correct, not only multiples of the block sizes.
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl

from ._common import generator, is_cpu, resolve_dtype


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped ordering: consecutive programs walk GROUP_M rows of C tiles
    # together, so the A and B tiles they load stay hot in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K  # the last K step may be partial: zero-fill it
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_configs(device: str) -> list[triton.Config]:
    """Candidate configs: 3 small tilings on "cpu" (interpreter), else the usual 48-config GPU space."""
    if is_cpu(device):
        tiles = [(16, 16, 16, 2), (32, 16, 32, 1), (32, 32, 16, 4)]  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
        return [
            triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=1, num_stages=1)
            for bm, bn, bk, g in tiles
        ]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in itertools.product((64, 128), (64, 128, 256), (32, 64), (4, 8), (3, 4))
    ]


def matmul(kernel, a: torch.Tensor, b: torch.Tensor, **meta) -> torch.Tensor:
    """Launch ``kernel`` (plain jit or autotuned) and return ``a @ b`` in ``a.dtype``.

    ``meta`` carries ``BLOCK_M/BLOCK_N/BLOCK_K/GROUP_M`` (+ ``num_warps``,
    ``num_stages``) for a plain jit kernel and is empty for an autotuned one.
    Strides are passed through, so transposed views need no copy.
    """
    assert a.ndim == b.ndim == 2 and a.shape[1] == b.shape[0], "matmul expects (M, K) @ (K, N)"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    kernel[grid](a, b, c, M, N, K,
                 a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **meta)
    return c


def reference_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Torch reference, computed in float32 and cast back like the kernel."""
    return (a.float() @ b.float()).to(a.dtype)


def make_inputs(size: str, device: str, dtype: torch.dtype | None = None) -> tuple:
    """``(a, b)``; "tiny" is M, N, K = 48, 40, 72 -- on purpose not multiples of the blocks."""
    dtype = resolve_dtype(size, dtype)
    M, N, K = (48, 40, 72) if size == "tiny" else (4096, 4096, 4096)
    g = generator(device)
    a = torch.randn((M, K), device=device, dtype=dtype, generator=g)
    b = torch.randn((K, N), device=device, dtype=dtype, generator=g)
    return a, b
