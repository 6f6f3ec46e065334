"""What identifies a stored pick, as text and digests that are the same in every process and on
every host: config-space values (``describe``, how a pick is found again among the candidates),
a tuned function's source with the kernels it launches (``source_digest``), the software and
hardware the timings depend on (``versions``, ``hardware``), and an entry's id (``entry_digest``).

Apart from ``cache`` (where entries live and how they are read and written): the kernel-level
picks (``persist``) and manifests key on the same descriptions.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import platform
import re
from pathlib import Path
from typing import Any, Callable, Optional

from .. import settings


def describe(value: Any, _seen: frozenset = frozenset()) -> str:
    """A text for a config-space value that is the same in every process, so a stored pick is
    found again: ``repr`` where it holds no address; a ``triton.Config`` by its fields; functions,
    classes and methods by qualified name (a lambda or nested function with a digest of its code,
    defaults and closure, so two of them differ); ``functools.partial`` by its parts; torch dtypes
    and devices by ``str``; any other object whose ``repr`` holds an address by its type and a
    digest of its ``__dict__``. ``_seen`` stops at objects reached again through themselves."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v, _seen)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v, _seen) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if hasattr(value, "all_kwargs"):
        hook = getattr(value, "pre_hook", None)
        extra = f", pre_hook={describe(hook, _seen)}" if hook is not None else ""  # a partial's repr holds an address
        return f"Config({', '.join(f'{k}={v!r}' for k, v in value.all_kwargs().items())}{extra})"
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ in ("dtype", "device"):
        return str(value)
    if id(value) in _seen:
        return f"<cycle: {kind.__module__}.{kind.__qualname__}>"
    seen = _seen | {id(value)}
    if inspect.ismethod(value):
        return f"{describe(value.__func__, seen)} of {describe(value.__self__, seen)}"
    if isinstance(value, functools.partial):
        parts = [describe(value.func, seen), *(describe(a, seen) for a in value.args),
                 *(f"{k}={describe(v, seen)}" for k, v in value.keywords.items())]
        return f"functools.partial({', '.join(parts)})"
    if isinstance(value, type) or inspect.isroutine(value):
        return _routine(value, kind, seen)
    text = repr(value)
    if " at 0x" not in text:
        return text
    state = getattr(value, "__dict__", None)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}#{_digest([describe(state, seen)])}" if isinstance(state, dict) else name


def _routine(value: Any, kind: type, seen: frozenset) -> str:
    """A function, class or method by qualified name; a lambda or nested function with a digest of
    its code, defaults and closure; a built-in method with the object it is bound to."""
    owner = getattr(value, "__self__", None)  # a built-in method's object (a module for functions)
    module = getattr(value, "__module__", None) or getattr(getattr(value, "__objclass__", type(owner)),
                                                           "__module__", "builtins")
    name = f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', kind.__qualname__))}"
    code = getattr(value, "__code__", None)
    if code is not None and "<" in name:  # <lambda>, <locals>: the name alone is not unique
        name += "#" + _digest([_code_text(code, seen), describe(getattr(value, "__defaults__", None), seen),
                               describe(getattr(value, "__kwdefaults__", None), seen),
                               *(_cell(c, seen) for c in getattr(value, "__closure__", None) or ())])
    if owner is not None and not inspect.ismodule(owner) and not isinstance(owner, type):
        name += f" of {describe(owner, seen)}"
    return name


def _digest(parts: list) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def _const_text(c: Any, seen: frozenset) -> str:
    if inspect.iscode(c):
        return _code_text(c, seen)
    if isinstance(c, frozenset):  # ``x in {...}``: its order follows the hash seed
        return "{" + ", ".join(sorted(describe(v, seen) for v in c)) + "}"
    return describe(c, seen)


def _code_text(code: Any, seen: frozenset) -> str:  # bytecode, constants and names: no address, no line numbers
    return _digest([code.co_code.hex(), *(_const_text(c, seen) for c in code.co_consts), *code.co_names,
                    *code.co_varnames, *code.co_freevars])


def _cell(c: Any, seen: frozenset) -> str:
    try:
        return describe(c.cell_contents, seen)
    except ValueError:  # a cell not yet assigned
        return "<empty>"


def source_of(obj: Any) -> str:
    """The source of ``obj``; its bytecode, or its ``repr``, where the source cannot be read."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        return repr(code.co_code) if code is not None else repr(obj)


def _kernels_used(fn: Callable) -> list[Any]:
    """Triton kernels (jit, autotuned, heuristics) the function names as globals, in name order."""
    names: set = set()
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if inspect.iscode(c))
    found = []
    for name in sorted(names):
        obj = fn.__globals__.get(name)
        if obj is not None and hasattr(obj, "run") and hasattr(obj, "fn") and hasattr(obj, "arg_names"):
            found.append(obj)
    return found


def source_digest(fn: Callable) -> str:
    """Changes when the function's source, or the source of a Triton kernel it launches, changes."""
    from .. import _compat

    h = hashlib.sha256(source_of(fn).encode())
    for kernel in _kernels_used(fn):
        h.update(source_of(_compat.base_function(kernel)).encode())
    return h.hexdigest()


def versions() -> dict:
    """Software the timings depend on (checked with ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``)."""
    return dict(_versions())


VERSION_CHECK_ENV = "TRITON_DIST_AUTOTUNE_VERSION_CHECK"


def versions_checked() -> bool:
    """Whether a stored pick must have been made under these versions (``VERSION_CHECK_ENV``)."""
    return bool(settings.value(VERSION_CHECK_ENV))


def versions_refused(recorded: Any) -> bool:
    """Whether a pick recorded under ``recorded`` versions is refused here: the setting asks for
    these versions, and they differ."""
    return versions_checked() and recorded != versions()


@functools.lru_cache(maxsize=1)
def _versions() -> tuple:
    """Looked up once per process: every stored and every checked entry needs it, and what a
    running process has loaded does not change."""
    return tuple(_installed().items())


def _installed() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "triton-ascend", "torch-npu", "triton-dist-plugin"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:  # the same answer whether or not the caller imported torch yet
        import torch
    except ImportError:
        return out
    cuda = getattr(torch.version, "cuda", None)
    if cuda is not None:
        out["cuda"] = cuda
    return out


def hardware(device: str, world_size: int) -> dict:
    """What the timings were measured on: device kind, name and count, toolkit, world size."""
    info: dict = {"device": device, "world_size": world_size, "machine": platform.machine()}
    if device in ("cuda", "npu"):
        import torch

        mod = getattr(torch, device)
        info["name"] = mod.get_device_name(mod.current_device())
        info["count"] = mod.device_count()
        info["toolkit"] = getattr(torch.version, "cuda" if device == "cuda" else "cann", None)
        info["driver"] = _driver_version()
    else:
        info["name"] = platform.processor() or platform.machine()
        info["interpreter"] = os.environ.get("TRITON_INTERPRET") == "1"
    return info


def _driver_version() -> Optional[str]:
    """The NVIDIA kernel driver's version where Linux exposes it (timings change with drivers)."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    found = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
    return found.group(1) if found else first.strip()


def entry_digest(source: str, hw: dict, key_text: str, context: Optional[dict] = None) -> str:
    """The stable id of an entry: one per (source, hardware, key as stored (its ``repr``), and
    ``context``: what else the pick depends on), the same on every host; a manifest's entries are
    checked against it."""
    parts = [source, hw, key_text] + ([context] if context is not None else [])
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def safe_name(name: str) -> str:
    """A directory name for ``name``: unsafe characters replaced, a digest added if anything changed."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "function"
    if safe != name or len(safe) > 100:
        safe = f"{safe[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return safe
