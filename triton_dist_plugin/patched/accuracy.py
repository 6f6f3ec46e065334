"""The accuracy check: every candidate run once on the same inputs, compared with the first.

Enabled per kernel with ``check_accuracy=True`` or for all with
``TRITON_DIST_AUTOTUNE_CHECK_ACCURACY=1``; a candidate whose results differ is dropped before
any timing, with the argument and the difference as its reason.
"""

from __future__ import annotations

from typing import Any, Optional

from .. import failures, settings

ACCURACY_ENV = "TRITON_DIST_AUTOTUNE_CHECK_ACCURACY"


def accuracy_check_enabled(instance: Any) -> bool:
    flag = instance.__dict__.get("tdp_check_accuracy")
    return bool(flag) if flag is not None else settings.value(ACCURACY_ENV)


def _tolerance(tensor: Any) -> tuple[float, float]:
    name = str(tensor.dtype)
    if "float16" in name or "bfloat16" in name or "float8" in name:
        return 2e-2, 2e-2
    if "float" in name:
        return 1e-3, 1e-3
    return 0.0, 0.0


def check_accuracy(configs: list, make_call, named: dict, failed: dict, memo: Optional[dict] = None) -> dict:
    """Run every candidate once on the same inputs and compare every tensor argument (outputs and
    anything mutated; ``named`` holds them, positional and keyword) with the first working
    candidate's; returns the ones that disagree. A search checks its candidates step by step:
    ``memo`` keeps that first working candidate's results from one call to the next."""
    import torch

    tensors = {n: v for n, v in named.items() if isinstance(v, torch.Tensor)}
    original = {n: v.clone() for n, v in tensors.items()}
    memo = {} if memo is None else memo
    reference, ref_config, wrong = memo.get("reference"), memo.get("config"), {}
    try:
        for config in configs:
            if config in failed:
                continue
            for n, v in tensors.items():
                v.copy_(original[n])
            try:
                make_call(config)()
            except Exception as exc:
                wrong[config] = failures.describe(exc)
                continue
            result = {n: v.clone() for n, v in tensors.items()}
            if reference is None:
                reference, ref_config = result, config
                memo.update(reference=result, config=config)
                continue
            for n, value in result.items():
                rtol, atol = _tolerance(value)
                if not torch.allclose(value.float(), reference[n].float(), rtol=rtol, atol=atol, equal_nan=True):
                    diff = (value.float() - reference[n].float()).abs().max().item()
                    wrong[config] = (f"wrong result: argument {n!r} differs from {ref_config}'s "
                                     f"(max abs diff {diff:.3g})")
                    break
    finally:
        for n, v in tensors.items():
            v.copy_(original[n])
    return wrong
