"""The stored entries the command line works on: finding and loading them, skipping bad ones,
and removing one (``clear``).

Function-level entries live under ``$HOME/.triton_dist/autotune`` (``TRITON_DIST_AUTOTUNE_DIR``),
and the plugin's kernel-level picks under ``triton_dist/kernels/`` in Triton's cache directory
(``TRITON_CACHE_DIR``, default ``$HOME/.triton/cache``; under ``TRITON_DIST_AUTOTUNE_DIR/kernels``
when that is set); kernel-level entries also come from Triton's own ``*.autotune.json`` files
(``cache_results=True`` or ``TRITON_CACHE_AUTOTUNING=1``) in Triton's cache directory. Every entry
read passes the same check as at a launch (``records.check``); one that does not is skipped with
its reason. Kept apart from the commands so that every command (and the HTML report, which is
given these ``Entry`` objects) reads the entries one way.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..store import cache, filestore, fingerprint, manifest, persist, records


@dataclass
class Entry:
    kind: str  # "function" or "kernel"
    name: str
    key: str
    pick: str
    best_ms: Optional[float]
    when: str
    path: str
    candidates: list = field(default_factory=list)
    restore: dict = field(default_factory=dict)  # the plugin's own entries: what `import` writes back


def kernel_cache_root() -> Path:
    return fingerprint.triton_cache_dir()


def looked_in() -> str:
    """Where the entries were looked for, for the messages that say none was found."""
    return (f"looked in {cache.cache_root()}, {cache.kernel_base() / persist.DIRECTORY} and "
            f"{kernel_cache_root()}")


def matches(name: str, pattern: Optional[str], exact: bool) -> bool:
    """``pattern`` is part of ``name`` (``exact``: is ``name``); no pattern keeps everything."""
    return pattern is None or (name == pattern if exact else pattern in name)


def _ms(value) -> Optional[float]:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(float(value)) else None
    except OverflowError:  # a JSON integer too large for a float
        return None


def _skip(path: Path, reason: str) -> None:
    print(f"triton-dist-tune: skipping {path}: {reason}", file=sys.stderr)


def function_entries() -> list[Entry]:
    return _plugin_entries("function", cache.cache_root(), "*/*.json")


def persisted_kernel_entries() -> list[Entry]:
    """The kernel-level picks the plugin keeps (``persist.py``)."""
    return _plugin_entries("kernel", cache.kernel_base(), f"{persist.DIRECTORY}/*/*.json")


def _plugin_entries(kind: str, folder: Path, pattern: str) -> list[Entry]:
    out = []
    root = cache.kernel_root() if kind == "kernel" else cache.cache_root()
    for path in sorted(folder.glob(pattern)):
        if path.is_symlink() or path.parent.is_symlink():
            continue  # never followed (the file store refuses them too)
        rec = filestore.read_json(path, root)
        if rec is None:
            continue
        try:
            records.check(rec, kind)
        except records.RecordError as exc:
            _skip(path, str(exc))
            continue
        cands = [{"config": c["config"], "ms": _ms(c.get("ms")), "failure": c.get("failure"),
                  "measured": c.get("measured", True) is not False} for c in rec["candidates"]]
        best = min((c["ms"] for c in cands if c["ms"] is not None), default=None)
        out.append(Entry(kind, rec[kind], rec["key"], rec["pick_config"], best, rec["timestamp"], str(path), cands,
                         manifest.entry(path, rec, kind)))
    return out


def kernel_entries() -> list[Entry]:
    """The kernel-level entries of Triton's own ``*.autotune.json`` files."""
    import datetime as dt

    out = []
    for path in sorted(kernel_cache_root().glob("*/*.autotune.json")):
        rec = filestore.read_json(path)
        if rec is None or "configs_timings" not in rec:
            continue
        try:
            cands = [_kernel_candidate(item) for item in _pairs(rec["configs_timings"])]
            when = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat()
        except (ValueError, OSError, RecursionError) as exc:
            _skip(path, "nested too deeply" if isinstance(exc, RecursionError) else str(exc))
            continue
        valid = [c for c in cands if c["ms"] is not None]
        best = min(valid, key=lambda c: c["ms"]) if valid else None
        out.append(Entry("kernel", path.name[: -len(".autotune.json")], str(rec.get("key")),
                         best["config"] if best else "-", best["ms"] if best else None, when, str(path), cands))
    return out


def _pairs(value) -> list:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError("field 'configs_timings' is not a list of [config, timing] pairs")
    return value


def _kernel_candidate(pair: list) -> dict:
    config, timing = pair
    if not isinstance(config, dict) or not isinstance(config.get("kwargs", {}), dict):
        raise ValueError("a config in 'configs_timings' is not an object with 'kwargs'")
    kwargs = dict(config.get("kwargs", {}))
    opts = {k: v for k, v in config.items() if k not in ("kwargs", "pre_hook") and v is not None}
    # Triton's own tuner measures every candidate fully (it has no screening round); its
    # [p50, p20, p80] is kept for the report's noise.
    spread = [_ms(v) for v in timing] if isinstance(timing, list) and len(timing) == 3 else None
    return {"config": ", ".join(f"{k}={v}" for k, v in {**kwargs, **opts}.items()), "ms": _ms(timing),
            "failure": None if _ms(timing) is not None else "inf", "measured": True,
            **({"timing": spread} if spread and None not in spread else {})}


def remove(e: Entry) -> Optional[str]:
    """Delete one entry's file and what the store keeps beside it; why it could not be, or None."""
    log = Path(e.path).with_suffix(".log")
    try:
        os.unlink(e.path)  # unlink removes a link itself, never its target
    except FileNotFoundError:
        pass  # gone already
    except OSError as exc:
        return exc.strerror or str(exc)
    for path in (log, Path(e.path + ".lock"), Path(f"{log}.lock")):
        filestore.with_suppress(os.unlink, path)
    return None
