"""Add: ``o = x + y`` over flat tensors (Triton tutorial 01)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import generator, is_cpu, resolve_dtype


@triton.jit
def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    # Each program handles one BLOCK-sized chunk; the mask makes any ``n`` correct.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(o_ptr + offs, x + y, mask=mask)


def add_configs(device: str) -> list[triton.Config]:
    """Candidate configs: a few small blocks on "cpu" (interpreter), a GPU sweep otherwise."""
    if is_cpu(device):
        return [triton.Config({"BLOCK": b}, num_warps=1) for b in (128, 256, 512)]
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096, 8192) for w in (4, 8)]


def add(kernel, x: torch.Tensor, y: torch.Tensor, **meta) -> torch.Tensor:
    """Launch ``kernel`` (plain jit or autotuned) and return ``x + y``.

    ``meta`` carries ``BLOCK``/``num_warps`` for a plain jit kernel and is empty
    for an autotuned one; the grid reads ``BLOCK`` from the final meta.
    """
    assert x.shape == y.shape, "add expects same-shape inputs"
    x, y = x.contiguous(), y.contiguous()
    o = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    kernel[grid](x, y, o, n, **meta)
    return o


def reference_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Torch reference, computed in float32 and cast back like the kernel."""
    return (x.float() + y.float()).to(x.dtype)


def make_inputs(size: str, device: str, dtype: torch.dtype | None = None) -> tuple:
    """``(x, y)``; "tiny" uses n=1000 on purpose (not a multiple of any block)."""
    dtype = resolve_dtype(size, dtype)
    n = 1000 if size == "tiny" else 2**24
    g = generator(device)
    x = torch.randn(n, device=device, dtype=dtype, generator=g)
    y = torch.randn(n, device=device, dtype=dtype, generator=g)
    return x, y
