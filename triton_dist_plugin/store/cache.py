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
import stat
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from .. import _callsite, bus, settings
from ..requests import CacheEntry
from . import filestore, fingerprint, records

ROOT_ENV = "TRITON_DIST_AUTOTUNE_DIR"
ALWAYS_TUNE_ENV = "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"
VERSION_CHECK_ENV = "TRITON_DIST_AUTOTUNE_VERSION_CHECK"
FORMAT = records.FORMAT


def cache_root() -> Path:
    if settings.value(ROOT_ENV):
        return Path(settings.value(ROOT_ENV))
    return Path(os.environ.get("HOME") or os.path.expanduser("~")) / ".triton_dist" / "autotune"


def kernel_root() -> Path:
    """The configured directory the kernel-level picks live below: ``TRITON_DIST_AUTOTUNE_DIR``
    when set, else Triton's cache directory (so clearing or moving it resets them, as it does
    upstream's ``cache_results``)."""
    return cache_root() if settings.value(ROOT_ENV) else fingerprint.triton_cache_dir()


def kernel_base() -> Path:
    """The folder holding ``kernels/`` (what a manifest's kernel entries are relative to)."""
    return cache_root() if settings.value(ROOT_ENV) else fingerprint.triton_cache_dir() / "triton_dist"


def safe_name(name: str) -> str:
    """A directory name for ``name``: unsafe characters replaced, a digest added if anything changed."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "function"
    if safe != name or len(safe) > 100:
        safe = f"{safe[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return safe


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

    def digest(parts: list) -> str:
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]

    def const_text(c: Any) -> str:
        if inspect.iscode(c):
            return code_text(c)
        if isinstance(c, frozenset):  # ``x in {...}``: its order follows the hash seed
            return "{" + ", ".join(sorted(describe(v, seen) for v in c)) + "}"
        return describe(c, seen)

    def code_text(code: Any) -> str:  # bytecode, constants and names: no address, no line numbers
        return digest([code.co_code.hex(), *map(const_text, code.co_consts), *code.co_names, *code.co_varnames,
                       *code.co_freevars])

    def cell(c: Any) -> str:
        try:
            return describe(c.cell_contents, seen)
        except ValueError:  # a cell not yet assigned
            return "<empty>"

    if inspect.ismethod(value):
        return f"{describe(value.__func__, seen)} of {describe(value.__self__, seen)}"
    if isinstance(value, functools.partial):
        parts = [describe(value.func, seen), *(describe(a, seen) for a in value.args),
                 *(f"{k}={describe(v, seen)}" for k, v in value.keywords.items())]
        return f"functools.partial({', '.join(parts)})"
    if isinstance(value, type) or inspect.isroutine(value):
        owner = getattr(value, "__self__", None)  # a built-in method's object (a module for functions)
        module = getattr(value, "__module__", None) or getattr(getattr(value, "__objclass__", type(owner)),
                                                               "__module__", "builtins")
        name = f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', kind.__qualname__))}"
        code = getattr(value, "__code__", None)
        if code is not None and "<" in name:  # <lambda>, <locals>: the name alone is not unique
            name += "#" + digest([code_text(code), describe(getattr(value, "__defaults__", None), seen),
                                  describe(getattr(value, "__kwdefaults__", None), seen),
                                  *(cell(c) for c in getattr(value, "__closure__", None) or ())])
        if owner is not None and not inspect.ismodule(owner) and not isinstance(owner, type):
            name += f" of {describe(owner, seen)}"
        return name
    text = repr(value)
    if " at 0x" not in text:
        return text
    state = getattr(value, "__dict__", None)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}#{digest([describe(state, seen)])}" if isinstance(state, dict) else name


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
    from .. import _compat

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


def entry_digest(source: str, hw: dict, key_text: str, context: Optional[dict] = None) -> str:
    """The stable id of an entry: one per (source, hardware, key as stored (its ``repr``), and
    ``context``: what else the pick depends on), the same on every host; a manifest's entries are
    checked against it."""
    parts = [source, hw, key_text] + ([context] if context is not None else [])
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


_blocked: dict = {}  # a cache root's text -> the file standing where it or a folder above it must be, or None


def _blocker(root: Path) -> Optional[Path]:
    """The file (not a directory) at ``root`` or at the nearest existing folder above it: then no
    entry can ever be read or written below ``root``. Checked once per root and process; the
    first time one is found, one warning says so, and the file store's own warnings about places
    below it (each read, scan and write would warn again) are silenced."""
    text = str(root)
    if text in _blocked:
        return _blocked[text]
    found = None
    for place in (root, *root.parents):
        try:
            mode = os.stat(place).st_mode
        except (FileNotFoundError, NotADirectoryError):  # look further up
            continue
        except OSError:
            break
        if not stat.S_ISDIR(mode):
            found = place
        break
    _blocked[text] = found
    if found is not None:
        below = re.escape(text.rstrip("/") + "/")
        warnings.filterwarnings("ignore", message=rf"(cannot read|refusing|cannot list autotune cache) {below}",
                                category=RuntimeWarning)
        warnings.warn(f"the autotune cache {root} cannot be used: {found} is a file, not a directory; picks are kept "
                      f"in memory only, for this process. Point {ROOT_ENV} at a directory (or move the file) to keep "
                      "them across runs.", RuntimeWarning, stacklevel=_callsite.stacklevel())
    return found


def cache_entry(kind: str, name: str, directory: Path, source: str, hw: dict, key: Any,
                context: Optional[dict] = None, root: Optional[Path] = None) -> CacheEntry:
    """What the store hooks get for ``key``: its id, and its file under ``directory`` (one file
    per source, hardware, key and context), below ``root``, where the file store's checks start."""
    _blocker(root if root is not None else directory)
    digest = entry_digest(source, hw, repr(key), context)
    return CacheEntry(kind, name, digest, directory / f"{digest}.json", root=root)


def entry_header(field: str, name: str, key: Any, source: str, hw: dict, context: Optional[dict] = None) -> dict:
    """The fields every entry starts with (``field`` names what was tuned: function or kernel)."""
    return {"format": FORMAT, field: name, "key": repr(key), "source": source, "hardware": hw,
            **({"context": context} if context is not None else {}),
            "versions": versions(), "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat()}


def warn_unwritable(name: str, directory: Path, key: Any, exc: OSError, stacklevel: int) -> None:
    """A tuning whose entry cannot be written (a full disk, an unwritable directory, a store that
    is down) keeps its pick in memory; say so, and where else it is kept."""
    failed = getattr(exc, "failed", None) or {filestore.NAME: exc}  # bus.StoreError says which stores
    if set(failed) == {filestore.NAME} and any(_blocked.get(str(p)) for p in (directory, *directory.parents)):
        return  # the one warning about the file in the cache directory's place said it all
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
        return cache_entry("function", self.name, self.dir, self.source, self.hw, key, root=cache_root())

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
        if (record.get("key") != repr(key) or not isinstance(pick, int)
                or not 0 <= pick < len(space_reprs) or record.get("pick_config") != space_reprs[pick]):
            warnings.warn(f"autotune cache {bus.where(entry, store)} does not match {self.name}'s key or config space; "
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
        directory exists (a log alone must not create a cache directory nothing else uses); in
        one write that a full disk cannot tear, never through a link."""
        entry = self.entry(key)
        try:
            filestore.append_line(entry.path.with_suffix(".log"), text, root=entry.root, create=False)
        except OSError:
            pass
