"""Picks moved between machines: ``triton-dist-tune export`` writes them, ``import`` (or
``TRITON_DIST_AUTOTUNE_MANIFEST=FILE`` at the first tuning of a process) puts them in the cache.

A manifest is the JSON list ``export`` writes; each entry the plugin owns (function-level and
kernel-level picks) carries its whole record and its place under the cache root. Importing
writes each record there unless an entry for it already exists (a pick tuned on this machine
stays). An entry measured on other hardware, or under other versions of the software recorded
with it, is skipped with a warning: its timings say nothing about this machine.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from . import cache, filestore, settings

ENV = "TRITON_DIST_AUTOTUNE_MANIFEST"
_loaded: set = set()  # manifests this process already imported (by path)


def entry(path: Path, record: Optional[dict]) -> dict:
    """The fields ``export`` adds to an entry the plugin owns, so that ``import`` can restore it."""
    try:
        relative = path.resolve().relative_to(cache.cache_root().resolve()).as_posix()
    except ValueError:
        return {}
    return {"relpath": relative, "record": record} if record is not None else {}


def import_file(path: Path) -> tuple[int, int, list[str]]:
    """Write the manifest's records into the cache: ``(written, already there, skipped reasons)``."""
    try:
        items = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"cannot read the manifest {path}: {exc}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a manifest: expected the JSON list `triton-dist-tune export` writes")
    written, present, skipped = 0, 0, []
    root = cache.cache_root()
    hardware: dict = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("record"), dict) or "relpath" not in item:
            continue  # Triton's own files, or an entry without a record: nothing to restore
        record, relpath = item["record"], PurePosixPath(str(item["relpath"]))
        if relpath.is_absolute() or ".." in relpath.parts or relpath.suffix != ".json":
            skipped.append(f"{relpath}: not a cache entry's place")
            continue
        why = _mismatch(record, hardware)
        if why:
            skipped.append(f"{item.get('name', relpath)} {item.get('key', '')}: {why}")
            continue
        target = root / Path(*relpath.parts)
        if target.exists():
            present += 1
            continue
        filestore.write_json_atomic(target, record)
        written += 1
    return written, present, skipped


def _mismatch(record: dict, seen: dict) -> Optional[str]:
    hw = record.get("hardware")
    if not isinstance(hw, dict):
        return "no hardware recorded"
    probe = (hw.get("device"), hw.get("world_size"))
    if probe not in seen:
        try:
            seen[probe] = cache.hardware(str(hw.get("device")), int(hw.get("world_size") or 1))
        except Exception as exc:  # that device is not here at all
            seen[probe] = f"{type(exc).__name__}: {exc}"
    here = seen[probe]
    if here != hw:
        return f"measured on other hardware ({_differences(hw, here)})"
    if record.get("versions") != cache.versions():
        return f"measured under other versions ({_differences(record.get('versions'), cache.versions())})"
    return None


def _differences(theirs: Any, ours: Any) -> str:
    if not isinstance(theirs, dict) or not isinstance(ours, dict):
        return f"{theirs!r} here {ours!r}"
    keys = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    return ", ".join(f"{k}: {theirs.get(k)!r}, here {ours.get(k)!r}" for k in keys)


def load_from_env() -> None:
    """Import ``TRITON_DIST_AUTOTUNE_MANIFEST`` once per process, before the first cache lookup."""
    path = settings.value(ENV)
    if not path or path in _loaded:
        return
    _loaded.add(path)
    try:
        written, present, skipped = import_file(Path(path))
    except (ValueError, OSError) as exc:
        warnings.warn(f"{ENV}: {exc}; continuing without it", RuntimeWarning, stacklevel=2)
        return
    for reason in skipped:
        warnings.warn(f"{ENV}={path}: skipped {reason}", RuntimeWarning, stacklevel=2)
