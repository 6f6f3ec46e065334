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

import json
import re
import threading
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from .. import settings
from . import cache, describe, filestore, fingerprint, records

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


def entry(relpath: str, record: dict) -> dict:
    """The fields ``export`` adds to an entry the plugin owns, so that ``import`` can restore it:
    its place below the folder its kind lives in (``kernels/<kernel>/<id>.json`` or
    ``<function>/<id>.json``) and its whole record."""
    return {"relpath": relpath, "record": record}


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
    """Why ``record`` (checked, as stored: an older format's id covers what it covered) does not
    belong at ``place`` (its id, or its kernel's folder), or None."""
    digest = describe.entry_digest(record["source"], record["hardware"], record["key"],
                                   records.id_context(record, kind))
    if place.stem != digest:
        return "its id does not match its own fields"
    if kind == "kernel" and place.parts[1] != cache.safe_name(record["kernel"]):
        return "it is not in its kernel's folder"
    return None


#: what makes an entry that was changed or damaged after export apply
_REEXPORT = "export it again where it was tuned (triton-dist-tune export), unedited"


def import_file(path: Path) -> tuple[int, int, list[str]]:
    """Write the manifest's records into the cache: ``(written, already there, skipped reasons)``.
    ``ValueError`` when the file is not a manifest at all; a bad entry is skipped, with its reason."""
    try:
        items = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:300]
        raise ValueError(f"cannot read the manifest {path}: {reason}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a manifest: expected the JSON list that triton-dist-tune export writes")
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
            stored = item.get("record")
            record = records.check(stored, kind)  # what is written is the record as it came (``stored``)
        except ValueError as exc:
            skipped.append(f"{label}: {exc}; {_REEXPORT}")
            continue
        try:
            why = _mismatch(kind, record, hardware)
            if why is None and _own_id(kind, stored, place):
                why = f"{_own_id(kind, stored, place)}; {_REEXPORT}"
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the others
            why = f"it cannot be checked ({type(exc).__name__}: {exc}); {_REEXPORT}"
        if why:
            skipped.append(f"{label} {record.get(kind)} {record['key'][:200]}: {why}")
            continue
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


def _mismatch(kind: str, record: dict, seen: dict) -> Optional[str]:
    """Why ``record`` does not apply here, and what would make it apply; None if it does."""
    hw = record["hardware"]
    probe = (hw.get("device"), hw.get("world_size"))
    if probe not in seen:
        try:
            seen[probe] = describe.hardware(str(hw.get("device")), int(hw.get("world_size") or 1))
        except Exception as exc:  # noqa: BLE001 - that device is not here at all
            seen[probe] = f"{type(exc).__name__}: {exc}"
    here = seen[probe]
    if not isinstance(here, dict):
        return (f"measured on a {hw.get('device')} device, which this machine cannot use ({here}); import it on a "
                f"machine with that device ({hw.get('name')!r}), {_RETUNE}")
    if here != hw:
        return f"measured on other hardware ({_differences(hw, here)}); {_hardware_advice(hw, here)}"
    ours = describe.versions()
    if record["versions"] != ours:
        return f"measured under other versions ({_differences(record['versions'], ours)}); " + \
            _versions_advice(record["versions"], ours)
    context = record.get("context")
    if kind == "kernel" and context.get("triton") != fingerprint.triton_hash():  # a function's names no build
        return ("made under another build of Triton (its hash differs); install the Triton build of the machine "
                f"that tuned it, {_RETUNE}")
    return None


_RETUNE = "or tune here (run the program once, or triton-dist-tune pretune)"


def _hardware_advice(theirs: dict, ours: dict) -> str:
    """How to make entries measured on ``theirs`` apply, given what differs from ``ours``."""
    differ = {k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k)}
    steps = []
    if "interpreter" in differ:
        steps.append("set TRITON_INTERPRET=1 for the import and the program (it was tuned under Triton's "
                     "interpreter)" if theirs.get("interpreter") else
                     "unset TRITON_INTERPRET for the import and the program (it was tuned without Triton's "
                     "interpreter)")
    if "world_size" in differ:
        steps.append(f"tune with {theirs.get('world_size')} ranks, as it was")
    if differ - {"interpreter", "world_size"}:
        steps.append(f"import it on a machine like the one that tuned it (device {theirs.get('name')!r}), "
                     + _RETUNE)
    return "; ".join(steps) if steps else _RETUNE


def _versions_advice(theirs: Any, ours: Any) -> str:
    if not isinstance(theirs, dict) or not isinstance(ours, dict):
        return _RETUNE
    steps = []
    for name in sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k)):
        if name == "python":
            steps.append(f"run Python {theirs.get(name)}")
        elif name == "cuda":
            steps.append(f"install a torch built for CUDA {theirs.get(name)}")
        elif theirs.get(name) is None:
            steps.append(f"uninstall {name}")
        else:
            steps.append(f"pip install '{name}=={theirs.get(name)}'")
    return f"to use it, {', '.join(steps)}, as where it was tuned; {_RETUNE}"


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
