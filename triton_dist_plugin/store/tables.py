"""Picks a library ships inside its own package: tables found through the entry-point group
``triton_dist_plugin.tables``, read as a store below the user's own.

A library pretunes its kernels over a grid of shapes (``triton-dist-tune pretune``), exports the
picks (``triton-dist-tune export``: a manifest) into its package, and declares the file:

    [project.entry-points."triton_dist_plugin.tables"]
    mylib = "mylib.tuning:TABLE"     # TABLE = the manifest's absolute path (a str or a Path)

Every process that has the library installed then finds its picks before any tuning, with no
setting and no code in the user's program. A table is input from outside: each entry passes the
same checks as an imported manifest's (``manifest_checks``: the record's layout, its place and
its own id), and an entry is found only under the id its own fields give, which holds the
hardware, the kernel's source, the key and what the pick depends on (Triton's and the backend's
hashes, the plugin's version, the timing method, the checks, the candidates). So a pick is never
used where it was not made: a table made elsewhere (another GPU, another Triton build) is stale
here, and is said so in one warning, as is a table with entries refused. The user's own stores
come first (a key tuned here keeps its pick); frozen mode serves a table's pick as it serves a
stored one. ``TRITON_DIST_AUTOTUNE_TABLES=0`` ignores every table.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Optional

from .. import settings
from ..hookspecs import hookimpl
from . import describe
from . import manifest_checks as checks

GROUP = "triton_dist_plugin.tables"
ENV = "TRITON_DIST_AUTOTUNE_TABLES"
LIMIT = 64 << 20  # bytes a table may hold: it is read whole, once per process

_entries: Optional[dict] = None  # (kind, folder, id) -> record, once the tables are read
_lock = threading.RLock()
_reading = threading.local()  # set while this thread reads them: a library's import may launch a kernel


def entries() -> dict:
    """Every usable entry of every table installed, read once per process. A lookup made while
    this thread reads them (a library that launches a kernel at import) finds none, never waits."""
    global _entries
    if _entries is None:
        if getattr(_reading, "on", False):
            return {}
        with _lock:
            if _entries is None:
                _reading.on = True
                try:
                    found: dict = {}
                    for name, path in sorted(_declared(), key=lambda d: d[0]):  # any order of discovery alike
                        _merge(found, name, _read(name, path))
                    _entries = found
                finally:
                    _reading.on = False
    return _entries


def _merge(found: dict, label: str, usable: dict) -> None:
    """Add one table's entries: where an earlier table (by name) has the same key with another
    pick, the earlier one's stays, and this table is warned about once."""
    clashes = [key for key, record in usable.items()
               if key in found and found[key].get("pick_config") != record.get("pick_config")]
    for key, record in usable.items():
        found.setdefault(key, record)
    if clashes:
        kind, name, _ = clashes[0]
        _warn(label, f"{len(clashes)} of its entries pick otherwise than a table named before it for the same "
                     f"key ({kind} {name} first), and are not used")


def _declared() -> list:
    """``(name, path)`` of each table the installed distributions declare; one that cannot be
    loaded is warned about and skipped."""
    from importlib.metadata import entry_points

    tables = []
    for point in entry_points(group=GROUP):
        label = f"{point.name} ({point.value}"
        label += f", from {point.dist.name})" if getattr(point, "dist", None) is not None else ")"
        try:
            table = point.load()
            if not isinstance(table, (str, os.PathLike)) or not Path(table).is_absolute():
                raise TypeError(f"it names {table!r}, not the absolute path of a file in the library's package")
            tables.append((label, Path(table)))
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one broken library never stops the others
            _warn(label, f"cannot be loaded ({type(exc).__name__}: {exc})")
    return tables


def _read(label: str, path: Path) -> dict:
    """The usable entries of one table, keyed for lookup; one warning for what is refused or stale."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > LIMIT:
            raise ValueError(f"{path} is not a regular file of at most {LIMIT >> 20} MiB")
        items = checks.read_items(path)
    except (ValueError, OSError) as exc:
        _warn(label, str(exc)[:300])
        return {}
    usable, refused, elsewhere, seen = {}, [], [], {}
    for n, item in enumerate(items):
        try:
            kind, place, record = checks.entry_of(item)
        except ValueError as exc:
            refused.append(f"entry {n}{exc}")
            continue
        if kind is None or not _in_use(record["hardware"].get("device")):
            continue  # Triton's own files, or a device this process has not used: nothing to serve here
        try:
            why = checks.mismatch(kind, record, seen, versions=describe.versions_checked())
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the others
            why = f"it cannot be checked ({type(exc).__name__}: {exc})"
        if why:
            elsewhere.append(f"entry {n} ({place}): {why}")
        elif wrong := checks.misplaced(kind, item, place):
            refused.append(f"entry {n} ({place}): {wrong}")
        else:
            usable[(kind, place.parts[-2], place.stem)] = item["record"]
    if refused:
        _warn(label, f"{len(refused)} of {len(items)} entries refused, so not used (first: {refused[0]})")
    if elsewhere and not usable:
        _warn(label, f"none of its {len(elsewhere)} entries was made for this machine and software, so it is "
                     f"not used (first: {elsewhere[0]})")
    return usable


def _in_use(device: Any) -> bool:
    """Whether this process has taken up ``device``: the first lookup comes from a launch, whose
    tensors are on its device already. Describing one it has not would start its driver (and a
    GPU context) in a process that may never use it, to check entries none of its keys can find."""
    if device == "cpu":
        return True
    module = getattr(sys.modules.get("torch"), str(device), None)
    try:
        return bool(module.is_initialized())
    except Exception:  # noqa: BLE001 - not a device torch knows here
        return False


def _warn(label: str, why: str) -> None:
    warnings.warn(f"pick table {label}: {why}", RuntimeWarning, stacklevel=3)


class TableStore:
    """The built-in store of the tables libraries ship: read-only, asked after the file store."""

    @hookimpl(trylast=True)
    def tdp_cache_get(self, entry: Any) -> Optional[dict]:
        if not settings.value(ENV):
            return None
        path = Path(entry.path)
        record = entries().get((entry.kind, path.parent.name, path.stem))
        return copy.deepcopy(record) if record is not None else None  # the table's own stays as read
