"""Picks moved between machines: ``triton-dist-tune export`` writes them, ``import`` (or
``TRITON_DIST_AUTOTUNE_MANIFEST=FILE`` at the first tuning of a process) puts them in the cache.

A manifest is the JSON list ``export`` writes; each entry the plugin owns (function-level and
kernel-level picks) carries its whole record and its place: ``<function>/<id>.json`` under the
function-level cache, ``kernels/<kernel>/<id>.json`` under the kernel-level one. A manifest is
input from outside, so each entry is checked before anything is written: its record passes
``records.check``, its place has exactly that shape, and its id is the one the record's own
fields give (so an entry can only land where its own key would find it). Importing writes each
record there unless a valid entry already exists (a pick tuned on this machine stays). An entry
measured on other hardware, or under other versions of the software recorded with it, is
skipped with a warning: its timings say nothing about this machine.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from . import cache, filestore, fingerprint, records, settings

ENV = "TRITON_DIST_AUTOTUNE_MANIFEST"
KERNELS = "kernels"
_loaded: set = set()  # manifests this process already imported (by path)
_load_lock = threading.Lock()  # a thread racing the import waits for its records, not past them
_PART = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
_FILE = re.compile(r"[0-9a-f]{32}\.json")


def _roots() -> dict:
    """Where each kind of entry lives: ``(the folder its place is relative to, the configured
    root the file store's checks start from)``."""
    return {"function": (cache.cache_root(), cache.cache_root()), "kernel": (cache.kernel_base(), cache.kernel_root())}


def entry(path: Path, record: Optional[dict], kind: str) -> dict:
    """The fields ``export`` adds to an entry the plugin owns, so that ``import`` can restore it."""
    if record is None:
        return {}
    folder = _roots()[kind][0]
    try:
        relative = path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return {}
    return {"relpath": relative, "record": record}


def _place(relpath: Any) -> tuple[str, PurePosixPath]:
    """``(kind, place)`` of a manifest entry's ``relpath``; ``ValueError`` unless it has the shape
    of a cache entry's place (no absolute path, no ``..``, no hidden or odd names)."""
    if not isinstance(relpath, str):
        raise ValueError("its place (relpath) is not text")
    place = PurePosixPath(relpath)
    parts = place.parts
    shaped = (len(parts) == 2 or (len(parts) == 3 and parts[0] == KERNELS)) and \
        all(_PART.fullmatch(p) for p in parts[:-1]) and _FILE.fullmatch(parts[-1])
    if not shaped or "\\" in relpath or str(place) != relpath:
        raise ValueError(f"{relpath[:200]!r} is not a cache entry's place (<function>/<id>.json or "
                         f"{KERNELS}/<kernel>/<id>.json)")
    return ("kernel" if len(parts) == 3 else "function"), place


def _own_id(kind: str, record: dict, place: PurePosixPath) -> Optional[str]:
    """Why ``record`` does not belong at ``place`` (its id, or its kernel's folder), or None."""
    digest = cache.entry_digest(record["source"], record["hardware"], record["key"],
                                record["context"] if kind == "kernel" else None)
    if place.stem != digest:
        return "its id does not match its own fields"
    if kind == "kernel" and place.parts[1] != cache.safe_name(record["kernel"]):
        return "it is not in its kernel's folder"
    return None


def import_file(path: Path) -> tuple[int, int, list[str]]:
    """Write the manifest's records into the cache: ``(written, already there, skipped reasons)``.
    ``ValueError`` when the file is not a manifest at all; a bad entry is skipped, with its reason."""
    try:
        items = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:300]
        raise ValueError(f"cannot read the manifest {path}: {reason}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a manifest: expected the JSON list `triton-dist-tune export` writes")
    written, present, skipped = 0, 0, []
    roots = _roots()
    hardware: dict = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or "relpath" not in item:
            continue  # Triton's own files: nothing to restore
        label = f"entry {n}"
        try:
            kind, place = _place(item["relpath"])
            label = f"entry {n} ({place})"
            record = records.check(item.get("record"), kind)
        except ValueError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        try:
            why = _mismatch(record, hardware) or _own_id(kind, record, place)
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the others
            why = f"it cannot be checked ({type(exc).__name__}: {exc})"
        if why:
            skipped.append(f"{label} {record.get(kind)} {record['key'][:200]}: {why}")
            continue
        folder, root = roots[kind]
        target = folder / Path(*place.parts)
        if records.valid(filestore.read_json(target), kind):
            present += 1
            continue
        try:
            filestore.write_json_atomic(target, record, root=root)
        except OSError as exc:  # an unwritable or unsafe place: this entry only
            skipped.append(f"{label}: cannot write {target} ({exc})")
            continue
        written += 1
    return written, present, skipped


def _mismatch(record: dict, seen: dict) -> Optional[str]:
    hw = record["hardware"]
    probe = (hw.get("device"), hw.get("world_size"))
    if probe not in seen:
        try:
            seen[probe] = cache.hardware(str(hw.get("device")), int(hw.get("world_size") or 1))
        except Exception as exc:  # noqa: BLE001 - that device is not here at all
            seen[probe] = f"{type(exc).__name__}: {exc}"
    here = seen[probe]
    if here != hw:
        hint = ""
        if isinstance(here, dict) and here.get("interpreter") != hw.get("interpreter"):
            hint = (f"; they apply under TRITON_INTERPRET={'1' if hw.get('interpreter') else '0'}, as they were "
                    "tuned")
        return f"measured on other hardware ({_differences(hw, here)}){hint}"
    if record["versions"] != cache.versions():
        return f"measured under other versions ({_differences(record['versions'], cache.versions())})"
    context = record.get("context")
    if isinstance(context, dict) and context.get("triton") != fingerprint.triton_hash():
        return "made under another build of Triton (its hash differs)"
    return None


def _differences(theirs: Any, ours: Any) -> str:
    if not isinstance(theirs, dict) or not isinstance(ours, dict):
        return f"{theirs!r} here {ours!r}"
    keys = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    return ", ".join(f"{k}: {theirs.get(k)!r}, here {ours.get(k)!r}" for k in keys)


def load_from_env() -> None:
    """Import ``TRITON_DIST_AUTOTUNE_MANIFEST`` once per process, before the first cache lookup;
    a thread that arrives while another imports waits until the records are in place."""
    path = settings.value(ENV)
    if not path or path in _loaded:
        return
    with _load_lock:
        if path in _loaded:
            return
        try:
            written, present, skipped = import_file(Path(path))
        except (ValueError, OSError) as exc:
            warnings.warn(f"{ENV}: {exc}; continuing without it", RuntimeWarning, stacklevel=2)
            skipped = []
        finally:
            _loaded.add(path)  # after the records are written: never marked loaded before they are there
    for reason in skipped:
        warnings.warn(f"{ENV}={path}: skipped {reason}", RuntimeWarning, stacklevel=2)
