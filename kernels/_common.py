"""Helpers shared by the kernel modules: the input-size presets and a seeded RNG."""

from __future__ import annotations

import torch

#: Size presets understood by every ``make_inputs``: "tiny" keeps the Triton
#: interpreter (about 0.5 ms per program instance) fast, "gpu" is benchmark-sized.
SIZES = ("tiny", "gpu")


def resolve_dtype(size: str, dtype: torch.dtype | None) -> torch.dtype:
    """Default dtype for a preset: float32 for "tiny" (exact checks), float16 for "gpu"."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}, expected one of {SIZES}")
    if dtype is not None:
        return dtype
    return torch.float32 if size == "tiny" else torch.float16


def generator(device: str) -> torch.Generator:
    """A fixed-seed generator so inputs (and hence benchmark results) are reproducible."""
    return torch.Generator(device=device).manual_seed(0)


def is_cpu(device: str) -> bool:
    """True for the Triton interpreter target, which only wants a few small configs."""
    return str(device).split(":")[0] == "cpu"
