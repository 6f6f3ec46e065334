"""The function-level disk cache: one JSON file per (function source, hardware, business key).

Layout: ``<root>/<function name>/<digest>.json`` with a ``.log`` beside it from the tuning that
wrote it. The root is ``$HOME/.triton_dist/autotune`` unless ``TRITON_DIST_AUTOTUNE_DIR`` moves it.
Entries are read and written through the store hooks (``tdp_cache_get``/``tdp_cache_put``);
the built-in store (:mod:`.filestore`) keeps them as those files, written atomically under a
lock. Data is JSON, never pickle.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import inspect
import json
import os
import platform
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from . import bus, filestore, settings
from .requests import CacheEntry

ROOT_ENV = "TRITON_DIST_AUTOTUNE_DIR"
ALWAYS_TUNE_ENV = "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"
VERSION_CHECK_ENV = "TRITON_DIST_AUTOTUNE_VERSION_CHECK"
FORMAT = 1


def cache_root() -> Path:
    if settings.value(ROOT_ENV):
        return Path(settings.value(ROOT_ENV))
    return Path(os.environ.get("HOME") or os.path.expanduser("~")) / ".triton_dist" / "autotune"


def safe_name(name: str) -> str:
    """A directory name for ``name``: unsafe characters replaced, a digest added if anything changed."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "function"
    if safe != name or len(safe) > 100:
        safe = f"{safe[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return safe


def describe(value: Any) -> str:
    """A stable text for a config-space value (``repr`` of a ``triton.Config`` holds an address)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if hasattr(value, "all_kwargs"):
        hook = getattr(value, "pre_hook", None)
        extra = f", pre_hook={getattr(hook, '__qualname__', hook)}" if hook is not None else ""
        return f"Config({', '.join(f'{k}={v!r}' for k, v in value.all_kwargs().items())}{extra})"
    return repr(value)


def _source_of(obj: Any) -> str:
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
    from . import _compat

    h = hashlib.sha256(_source_of(fn).encode())
    for kernel in _kernels_used(fn):
        h.update(_source_of(_compat.base_function(kernel)).encode())
    return h.hexdigest()


def versions() -> dict:
    """Software the timings depend on (checked with ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``)."""
    return dict(_versions())


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


def entry_digest(source: str, hw: dict, key: Any) -> str:
    """The stable id of an entry: one per (source, hardware, key), the same on every host."""
    digest = hashlib.sha256(json.dumps([source, hw, repr(key)], sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def cache_entry(kind: str, name: str, directory: Path, source: str, hw: dict, key: Any) -> CacheEntry:
    """What the store hooks get for ``key``: its id, and its file under ``directory`` (one file
    per source, hardware and key)."""
    digest = entry_digest(source, hw, key)
    return CacheEntry(kind, name, digest, directory / f"{digest}.json")


def where(entry: CacheEntry, store: str) -> str:
    """The entry as a warning names it: its file, or its id in the store that answered."""
    if store == filestore.NAME:
        return str(entry.path)
    return f"{entry.kind}:{entry.name}:{entry.digest} (from the store {store!r})"


def entry_header(field: str, name: str, key: Any, source: str, hw: dict) -> dict:
    """The fields every entry starts with (``field`` names what was tuned: function or kernel)."""
    return {"format": FORMAT, field: name, "key": repr(key), "source": source, "hardware": hw,
            "versions": versions(), "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat()}


def warn_unwritable(name: str, directory: Path, key: Any, exc: OSError, stacklevel: int) -> None:
    """A tuning whose entry cannot be written (a full disk, an unwritable directory, a store that
    is down) keeps its pick in memory; say so, and where else it is kept."""
    failed = getattr(exc, "failed", None) or {filestore.NAME: exc}  # bus.StoreError says which stores
    kept = getattr(exc, "kept", [])
    place = f"in {directory}" if filestore.NAME in failed else "in the store " + ", ".join(map(repr, failed))
    if filestore.NAME in kept:
        after = f"kept in memory and in {directory}"
    else:  # other stores that raised nothing may or may not have kept it (one may be idle)
        after = "kept in memory" + ("" if kept else " for this process only")
    hint = f" Point {ROOT_ENV} at a writable directory to keep it across runs." if filestore.NAME in failed else ""
    warnings.warn(f"{name}: cannot write the autotune cache {place} ({exc}); the pick for key {key!r} is "
                  f"{after}.{hint}", RuntimeWarning, stacklevel=stacklevel + 1)


class FunctionCache:
    """The cache directory of one tuned function."""

    def __init__(self, name: str, source: str, hw: dict, directory: Optional[str] = None):
        self.name, self.source, self.hw = name, source, hw
        self.dir = cache_root() / safe_name(directory or name)

    def entry(self, key: Any) -> CacheEntry:
        return cache_entry("function", self.name, self.dir, self.source, self.hw, key)

    def path(self, key: Any) -> Path:
        return self.entry(key).path

    def load(self, key: Any, space_reprs: list[str]) -> Optional[dict]:
        """The record for ``key`` if it is valid for this source, hardware and config space."""
        if settings.value(ALWAYS_TUNE_ENV):
            return None
        entry = self.entry(key)
        found = bus.cache_get(entry)
        if found is None:
            return None
        store, record = found
        pick = record.get("pick")
        if (record.get("format") != FORMAT or record.get("key") != repr(key) or not isinstance(pick, int)
                or not 0 <= pick < len(space_reprs) or record.get("pick_config") != space_reprs[pick]):
            warnings.warn(f"autotune cache {where(entry, store)} does not match {self.name}'s key or config space; "
                          "re-tuning", RuntimeWarning, stacklevel=2)
            return None
        if settings.value(VERSION_CHECK_ENV) and record.get("versions") != versions():
            return None
        return record

    def store(self, key: Any, record: dict) -> Path:
        """Hand the entry to every store (``tdp_cache_put``); its file's place, for the ``.log``."""
        entry = self.entry(key)
        bus.cache_put(entry, {**entry_header("function", self.name, key, self.source, self.hw), **record})
        return entry.path

    def log(self, key: Any, text: str) -> None:
        """Append ``text`` to the ``.log`` beside the entry's file: local only, and only where the
        directory exists (a log alone must not create a cache directory nothing else uses)."""
        try:
            with open(self.path(key).with_suffix(".log"), "a") as f:
                f.write(text)
        except OSError:
            pass
