"""Outputs compared: bitwise first, else the largest difference against a tolerance."""

from __future__ import annotations

import math
import statistics
from typing import Optional

# Relative tolerance (against the reference's largest magnitude) for outputs that are not bitwise equal.
TOLERANCE = {"torch.bfloat16": 2e-2, "torch.float16": 1e-2, "torch.float32": 1e-3}


def median_of(values: list) -> Optional[float]:
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


def verdict(cmp: Optional[dict]) -> str:
    if cmp is None:
        return "-"
    return "=" if cmp["equal"] else ("~" if cmp["close"] else "X")
