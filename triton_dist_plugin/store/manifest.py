"""Picks moved between machines: ``triton-dist-tune export`` writes them, ``import`` (or
``TRITON_DIST_AUTOTUNE_MANIFEST=FILE`` at the first tuning of a process) puts them in the cache.

A manifest is the JSON list ``export`` writes; each entry the plugin owns (function-level and
kernel-level picks) carries its whole record and its place: ``<function>/<id>.json`` under the
function-level cache, ``kernels/<kernel>/<id>.json`` under the kernel-level one. A manifest is
input from outside, so each entry is checked before anything is written: its record passes
``records.check``, its place has exactly that shape, and its id is the one the record's own
fields give (so an entry can only land where its own key would find it). Importing writes each
record there unless a valid entry already exists (a pick tuned on this machine stays), and adds a
kernel entry to its directory's index (``index``), as a tuning's write does. An entry
measured on other hardware, or under other versions of the software recorded with it, is
skipped with a warning: its timings say nothing about this machine.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

from .. import settings
from . import cache, filestore, records
from .manifest_checks import KERNELS, REEXPORT, entry_of, mismatch, misplaced, read_items

__all__ = ["ENV", "KERNELS", "entry", "import_file", "load_from_env"]

ENV = "TRITON_DIST_AUTOTUNE_MANIFEST"
_loaded: set = set()  # manifests this process already imported (by path)
_load_lock = threading.Lock()  # a thread racing the import waits for its records, not past them


def _roots() -> dict:
    """Where each kind of entry lives: ``(the folder its place is relative to, the configured
    root the file store's checks start from)``."""
    return {"function": (cache.cache_root(), cache.cache_root()), "kernel": (cache.kernel_base(), cache.kernel_root())}


def entry(relpath: str, record: dict) -> dict:
    """The fields ``export`` adds to an entry the plugin owns, so that ``import`` can restore it:
    its place below the folder its kind lives in (``kernels/<kernel>/<id>.json`` or
    ``<function>/<id>.json``) and its whole record."""
    return {"relpath": relpath, "record": record}


def import_file(path: Path) -> tuple[int, int, list[str]]:
    """Write the manifest's records into the cache: ``(written, already there, skipped reasons)``.
    ``ValueError`` when the file is not a manifest at all; a bad entry is skipped, with its reason."""
    items = read_items(path)
    written, present, skipped = 0, 0, []
    roots = _roots()
    hardware: dict = {}
    for n, item in enumerate(items):
        try:
            kind, place, record = entry_of(item)
        except ValueError as exc:
            skipped.append(f"entry {n}{exc}")
            continue
        if kind is None:
            continue
        label = f"entry {n} ({place})"
        try:
            why = mismatch(kind, record, hardware) or misplaced(kind, item, place)
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the others
            why = f"it cannot be checked ({type(exc).__name__}: {exc}); {REEXPORT}"
        if why:
            skipped.append(f"{label} {record.get(kind)} {record['key'][:200]}: {why}")
            continue
        stored = item["record"]  # what is written is the record as it came
        folder, root = roots[kind]
        target = folder / Path(*place.parts)
        if records.valid(filestore.read_json(target), kind):
            present += 1
            continue
        try:
            filestore.put_entry(kind, target, stored, root)  # a kernel entry goes into its directory's index
        except OSError as exc:  # an unwritable or unsafe place: this entry only
            skipped.append(f"{label}: cannot write {target} ({exc}); make that directory writable, or point "
                           f"{cache.ROOT_ENV} at one that is")
            continue
        written += 1
    return written, present, skipped


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
