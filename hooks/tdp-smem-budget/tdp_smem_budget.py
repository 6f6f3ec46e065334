"""A triton-dist-plugin plugin: drop candidates that would not fit in shared memory.

For a config whose ``kwargs`` name ``BLOCK_M``, ``BLOCK_N`` and ``BLOCK_K`` (a matmul-style
tiling), the shared memory it needs is estimated as::

    num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * element_size

with ``element_size`` taken from the first tensor argument of the launch (2 bytes if there is
none). Configs without those keys are kept: this plugin has no opinion about them.

The budget, in bytes, is ``TDP_SMEM_BUDGET_KB`` * 1024 when that variable is set; otherwise, on
CUDA, the device's opt-in shared memory per block (48 KB when torch cannot tell). Under the
Triton interpreter (``request.device == "cpu"``) and on other devices, without the variable,
the plugin has no opinion.

The module itself is the plugin object; it is registered through the ``triton_dist_plugin``
entry-point group (see ``pyproject.toml``), so installing the distribution is enough.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

from triton_dist_plugin import hookimpl

BUDGET_ENV = "TDP_SMEM_BUDGET_KB"
DEFAULT_ELEMENT_SIZE = 2
CUDA_FALLBACK_BYTES = 48 * 1024
_TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K")


def element_size(nargs: dict) -> int:
    """Bytes per element of the first argument that has ``.element_size()`` (default 2)."""
    for value in nargs.values():
        size = getattr(value, "element_size", None)
        if callable(size):
            return int(size())
    return DEFAULT_ELEMENT_SIZE


def estimate(config: Any, elem_size: int) -> Optional[int]:
    """Estimated shared memory of ``config`` in bytes, or None when it has no BLOCK_M/N/K."""
    kwargs = getattr(config, "kwargs", None) or {}
    if not all(key in kwargs for key in _TILE_KEYS):
        return None
    bm, bn, bk = (int(kwargs[key]) for key in _TILE_KEYS)
    stages = getattr(config, "num_stages", None) or 1
    return int(stages) * (bm * bk + bk * bn) * elem_size


def budget_bytes(device: str) -> Optional[int]:
    """The budget in bytes for ``device``, or None for no opinion."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if text:
        try:
            kb = float(text)
        except ValueError:
            raise ValueError(f"{BUDGET_ENV}={text!r} is not a number of kilobytes") from None
        if not kb > 0:
            raise ValueError(f"{BUDGET_ENV}={text!r} must be a positive number of kilobytes")
        return int(kb * 1024)
    if device != "cuda":
        return None  # the interpreter ("cpu") and other backends: no opinion without the variable
    try:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        optin = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    except Exception:
        optin = 0
    return optin or CUDA_FALLBACK_BYTES


@hookimpl
def tdp_prune_configs(request, configs):
    """Keep the candidates whose estimate fits the budget (and every one without an estimate)."""
    budget = budget_bytes(request.device)
    if budget is None:
        return None
    size = element_size(request.nargs)
    estimates = [estimate(config, size) for config in configs]
    kept = [config for config, need in zip(configs, estimates) if need is None or need <= budget]
    if len(kept) == len(configs):
        return None
    if not kept:
        smallest = min(range(len(configs)), key=lambda i: estimates[i])
        warnings.warn(
            f"tdp-smem-budget: every candidate of {request.kernel_name} (key {request.key}) needs more than "
            f"{budget} bytes of shared memory; keeping the smallest ({configs[smallest]}, "
            f"~{estimates[smallest]} bytes)",
            RuntimeWarning,
            stacklevel=2,
        )
        return [configs[smallest]]
    return kept
