"""Row-wise softmax with the whole row in one block (Triton tutorial 02).

Tiling choice: ``BLOCK_N`` is *not* tuned. The row must fit in a single block,
so the launcher always passes ``BLOCK_N = triton.next_power_of_2(n_cols)`` and
the configs vary ``num_warps`` only (their kwargs are empty). This keeps a
config valid for every row length, which is what an autotuner keyed on
``n_cols`` needs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import generator, is_cpu, resolve_dtype


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_N: tl.constexpr):
    # One program per row; padding lanes load -inf so they vanish in max and exp.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)  # subtract the max for numerical stability
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax_configs(device: str) -> list[triton.Config]:
    """Candidate configs: ``num_warps`` only, since ``BLOCK_N`` is fixed by the launcher."""
    warps = (1, 2) if is_cpu(device) else (2, 4, 8, 16)
    return [triton.Config({}, num_warps=w) for w in warps]


def softmax(kernel, x: torch.Tensor, **meta) -> torch.Tensor:
    """Launch ``kernel`` (plain jit or autotuned) and return ``softmax(x, dim=-1)`` for 2-D ``x``.

    The launcher supplies ``BLOCK_N`` itself, so ``meta`` only ever holds launch
    options such as ``num_warps`` (plain jit) or nothing (autotuned).
    """
    assert x.ndim == 2, "softmax expects a 2-D tensor"
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    grid = lambda meta: (n_rows,)
    kernel[grid](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_N=triton.next_power_of_2(n_cols), **meta)
    return y


def reference_softmax(x: torch.Tensor) -> torch.Tensor:
    """Torch reference, computed in float32 and cast back like the kernel."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(size: str, device: str, dtype: torch.dtype | None = None) -> tuple:
    """``(x,)``; "tiny" is 8x100 so the row does not fill its power-of-two block."""
    dtype = resolve_dtype(size, dtype)
    shape = (8, 100) if size == "tiny" else (4096, 4096)
    return (torch.randn(shape, device=device, dtype=dtype, generator=generator(device)),)
