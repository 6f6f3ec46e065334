"""The checks an entry from outside passes before the plugin uses its pick: a manifest's
(``manifest``: ``triton-dist-tune import``, ``TRITON_DIST_AUTOTUNE_MANIFEST``) and a pick table's
(``tables``). An entry's place must have the shape of a cache entry's, its record the layout
``records.check`` holds it to, and its id the one its own fields give (so it can only land, or be
found, where its own key would find it); and it applies here only if it was measured on this
hardware, under this Triton build (and, where asked, these versions). Each refusal says what
would make the entry apply.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from . import describe, fingerprint, records

KERNELS = "kernels"
_PART = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
_FILE = re.compile(r"[0-9a-f]{32}\.json")


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
    if kind == "kernel" and place.parts[1] != describe.safe_name(record["kernel"]):
        return "it is not in its kernel's folder"
    return None


#: what makes an entry that was changed or damaged after export apply
REEXPORT = "export it again where it was tuned (triton-dist-tune export), unedited"


def read_items(path: Path) -> list:
    """The entries of the manifest at ``path``; ``ValueError`` when it is not a manifest at all."""
    try:
        items = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:300]
        raise ValueError(f"cannot read the manifest {path}: {reason}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path} is not a manifest: expected the JSON list that triton-dist-tune export writes")
    return items


def entry_of(item: Any) -> tuple:
    """``(kind, place, record)`` of a manifest entry the plugin owns, its place's shape and its
    record's layout checked; ``(None, None, None)`` for Triton's own files (nothing to restore);
    ``ValueError`` saying what is wrong and what would make it right, as the rest of a line that
    begins ``entry N``. Whether it belongs at its place (``misplaced``) is asked once it applies here."""
    if not isinstance(item, dict) or "relpath" not in item:
        return None, None, None
    try:
        kind, place = _place(item["relpath"])
    except ValueError as exc:
        raise ValueError(f": {exc}; {REEXPORT}") from None
    try:
        return kind, place, records.check(item.get("record"), kind)
    except ValueError as exc:
        raise ValueError(f" ({place}): {exc}; {REEXPORT}") from None


def misplaced(kind: str, item: dict, place: PurePosixPath) -> Optional[str]:
    """Why the entry (checked by ``entry_of``) does not belong at its place, or None: an entry can
    only land where its own key would find it."""
    try:
        wrong = _own_id(kind, item["record"], place)  # the record as stored: an older format's id covers its fields
    except Exception as exc:  # noqa: BLE001 - one odd entry never stops the others
        wrong = f"it cannot be checked ({type(exc).__name__}: {exc})"
    return f"{wrong}; {REEXPORT}" if wrong else None


def mismatch(kind: str, record: dict, seen: dict, versions: bool = True) -> Optional[str]:
    """Why ``record`` does not apply here, and what would make it apply; None if it does.
    ``versions``: the software's versions must be these too (a pick table leaves that to
    ``TRITON_DIST_AUTOTUNE_VERSION_CHECK``, as stored picks do)."""
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
    if versions and record["versions"] != ours:
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
