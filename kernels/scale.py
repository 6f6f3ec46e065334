"""Scale: ``y = alpha * x`` over a flat tensor -- the simplest memory-bound kernel."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import generator, is_cpu, resolve_dtype


@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    # Each program handles one BLOCK-sized chunk; the mask makes any ``n`` correct.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x.to(tl.float32) * alpha
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def scale_configs(device: str) -> list[triton.Config]:
    """Candidate configs: a few small blocks on "cpu" (interpreter), a GPU sweep otherwise."""
    if is_cpu(device):
        return [triton.Config({"BLOCK": b}, num_warps=1) for b in (128, 256, 512)]
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096, 8192) for w in (4, 8)]


def scale(kernel, x: torch.Tensor, alpha: float, **meta) -> torch.Tensor:
    """Launch ``kernel`` (plain jit or autotuned) and return ``alpha * x``.

    ``meta`` carries the tiling (``BLOCK=...``, ``num_warps=...``) for a plain jit
    kernel and must be empty for an autotuned one; the grid reads ``BLOCK`` from
    the final meta so both cases work.
    """
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    kernel[grid](x, y, alpha, n, **meta)
    return y


def reference_scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """Torch reference, computed in float32 and cast back like the kernel."""
    return (x.float() * alpha).to(x.dtype)


def make_inputs(size: str, device: str, dtype: torch.dtype | None = None) -> tuple:
    """``(x, alpha)``; "tiny" uses n=1000 on purpose (not a multiple of any block)."""
    dtype = resolve_dtype(size, dtype)
    n = 1000 if size == "tiny" else 2**24
    x = torch.randn(n, device=device, dtype=dtype, generator=generator(device))
    return x, 0.5
