"""Row-wise LayerNorm forward with weight and bias (Triton tutorial 05, forward only).

Tiling choice: the kernel *loops* over each row in ``BLOCK_N`` chunks, so any
``BLOCK_N`` is correct for any row length and ``BLOCK_N`` is a real tuning knob
carried by the configs (unlike softmax, whose whole-row block is fixed).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import generator, is_cpu, resolve_dtype


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, N, eps, BLOCK_N: tl.constexpr):
    # One program per row, three passes over it: mean, variance, normalize.
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)  # padding must not add (0 - mean)^2
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_ptr + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm_configs(device: str) -> list[triton.Config]:
    """Candidate configs over the chunk size ``BLOCK_N`` (and ``num_warps`` on GPU)."""
    if is_cpu(device):
        return [triton.Config({"BLOCK_N": b}, num_warps=1) for b in (32, 64, 128)]
    return [triton.Config({"BLOCK_N": b}, num_warps=w) for b in (512, 1024, 2048, 4096) for w in (4, 8)]


def layernorm(kernel, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              eps: float = 1e-5, **meta) -> torch.Tensor:
    """Launch ``kernel`` (plain jit or autotuned) and return LayerNorm of 2-D ``x`` over its last dim.

    ``meta`` carries ``BLOCK_N``/``num_warps`` for a plain jit kernel and is
    empty for an autotuned one.
    """
    assert x.ndim == 2 and weight.shape == bias.shape == x.shape[-1:], "layernorm expects (M, N), (N,), (N,)"
    x = x.contiguous()
    y = torch.empty_like(x)
    M, N = x.shape
    grid = lambda meta: (M,)
    kernel[grid](x, y, weight, bias, x.stride(0), N, eps, **meta)
    return y


def reference_layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float = 1e-5) -> torch.Tensor:
    """Torch reference, computed in float32 and cast back like the kernel."""
    y = torch.nn.functional.layer_norm(x.float(), x.shape[-1:], weight.float(), bias.float(), eps)
    return y.to(x.dtype)


def make_inputs(size: str, device: str, dtype: torch.dtype | None = None) -> tuple:
    """``(x, weight, bias)``; "tiny" is 8x100 so no chunk size divides the row."""
    dtype = resolve_dtype(size, dtype)
    M, N = (8, 100) if size == "tiny" else (4096, 4096)
    g = generator(device)
    x = torch.randn((M, N), device=device, dtype=dtype, generator=g)
    weight = torch.rand(N, device=device, dtype=dtype, generator=g)
    bias = torch.rand(N, device=device, dtype=dtype, generator=g)
    return x, weight, bias
