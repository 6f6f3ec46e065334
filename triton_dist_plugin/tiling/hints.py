"""``hints=``: extra search dimensions crossed with the candidates.

A hint names a kernel parameter (``GROUP_SIZE_M``) or a compile option of the active backend
(``num_warps``, ``num_stages``, Ascend's ``multibuffer``, ...); each name maps to the values to
try. Anything else is an error that names it, before any compiler sees it.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from .. import _compat


def validate(hints: Any, kernel_params: list, name: str) -> dict:
    if hints is None:
        return {}
    if not isinstance(hints, dict) or not all(isinstance(v, (list, tuple)) and v for v in hints.values()):
        raise ValueError(f"hints for {name} must be a dict of name -> non-empty list of values, got {hints!r}")
    from .hardware import compile_options

    options = compile_options()
    unknown = [k for k in hints if k not in kernel_params and k not in options]
    if unknown:
        backend = "the interpreter" if _compat.interpret() else _compat.active_device()
        raise ValueError(f"hints for {name}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} neither a "
                         f"parameter of the kernel nor a compile option of {backend}; kernel parameters: "
                         f"{', '.join(kernel_params)}; options: {', '.join(sorted(options))}")
    return {k: list(v) for k, v in hints.items()}


def cross(configs: list, hints: dict) -> list:
    """Every config combined with every combination of hint values."""
    if not hints:
        return list(configs)
    Config = _compat.Config
    fields = {p for p in inspect.signature(Config.__init__).parameters if p not in ("self", "kwargs")}
    out = []
    for base in configs:
        for values in itertools.product(*hints.values()):
            chosen = dict(zip(hints, values))
            opts = {k: getattr(base, k) for k in fields if hasattr(base, k) and k != "pre_hook"}
            opts.update({k: v for k, v in chosen.items() if k in fields})
            kwargs = {**base.kwargs, **{k: v for k, v in chosen.items() if k not in fields}}
            bishengir = {k: v for k, v in opts.items() if k not in inspect.signature(Config.__init__).parameters}
            opts = {k: v for k, v in opts.items() if k not in bishengir}
            cfg = Config(kwargs, pre_hook=base.pre_hook, **opts, **bishengir)
            out.append(cfg)
    return out
