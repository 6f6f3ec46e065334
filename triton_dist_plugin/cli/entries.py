"""The stored entries the command line works on: finding and loading them, skipping bad ones,
and removing one (``clear``).

Function-level entries live under ``$HOME/.triton_dist/autotune`` (``TRITON_DIST_AUTOTUNE_DIR``),
and the plugin's kernel-level picks under ``triton_dist/kernels/`` in Triton's cache directory
(``TRITON_CACHE_DIR``, default ``$HOME/.triton/cache``; under ``TRITON_DIST_AUTOTUNE_DIR/kernels``
when that is set); kernel-level entries also come from Triton's own ``*.autotune.json`` files
(``cache_results=True`` or ``TRITON_CACHE_AUTOTUNING=1``) in Triton's cache directory. Each entry
says which of these ``PLACES`` it came from, which ``list`` heads with ``heading`` (docs/picks.md
says why picks live in two places). Every entry read passes the same check as at a launch
(``records.check``). One that cannot be read (cut short,
binary, not JSON, refused, too large, or not a valid record) is named on standard error with why,
and ``Reader.summary`` counts them at the end: a user learns that a pick is gone. Entries are read
one at a time (``list`` prints each as it is read). Kept apart from the commands so that every
command (and the HTML report, which is given these ``Entry`` objects) reads the entries one way.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from .. import settings
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
    restore: dict = field(default_factory=dict)  # the plugin's own entries: what `import` writes back, as stored
    record: dict = field(default_factory=dict)  # the plugin's own entries: the record in this version's layout
    place: str = ""  # which of PLACES it was read from ("": none said, as for an entry made by hand)


#: Where entries are read from, in the order ``Reader.entries`` reads them (docs/picks.md says why
#: there are several): the function-level store, the kernel-level store, Triton's own files.
PLACES = ("function", "kernel", "triton")


def kernel_cache_root() -> Path:
    return fingerprint.triton_cache_dir()


def heading(place: str) -> str:
    """The line ``list`` prints above the entries of ``place`` (one of ``PLACES``): what is kept
    there and in which directory, now."""
    if place == "function":
        return f"function-level picks, in {cache.cache_root()}"
    if place == "kernel":
        where = cache.ROOT_ENV if settings.value(cache.ROOT_ENV) else "Triton's cache"
        return f"kernel-level picks, in {where}: {cache.kernel_base() / persist.DIRECTORY}"
    if place == "triton":
        return f"Triton's own tuning files (cache_results), in Triton's cache: {kernel_cache_root()}"
    return place


def looked_in(functions: bool = True, kernels: bool = True) -> str:
    """Where the entries were looked for (those of the kinds asked for: ``--functions``,
    ``--kernels``), for the messages that say none was found."""
    places = ([str(cache.cache_root())] if functions else []) + \
        ([str(cache.kernel_base() / persist.DIRECTORY), str(kernel_cache_root())] if kernels else [])
    return "looked in " + (", ".join(places[:-1]) + " and " + places[-1] if len(places) > 1 else places[0])


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


class Reader:
    """The entries, one at a time; each one that cannot be read is named on standard error."""

    def __init__(self) -> None:
        self.found = 0  # entries read (matching or not)
        self.unreadable = 0

    def skip(self, path: Path, reason: str) -> None:
        self.unreadable += 1
        print(f"triton-dist-tune: warning: skipping {path}: {reason}", file=sys.stderr)

    def summary(self) -> Optional[str]:
        """The count of the entries named as unreadable, for the end of the command."""
        n = self.unreadable
        if not n:
            return None
        what = "1 entry could not be read (named above, with why); it is ignored, and its key is" if n == 1 else \
            f"{n} entries could not be read (named above, with why); they are ignored, and their keys are"
        return f"triton-dist-tune: warning: {what} tuned again when next launched"

    def entries(self, functions: bool = True, kernels: bool = True) -> Iterator[Entry]:
        """Function-level entries, then the plugin's kernel-level picks, then Triton's own files."""
        if functions:
            root = cache.cache_root()
            for folder in filestore.folders(root, root):
                yield from self._plugin_entries("function", folder, root, folder.name)
        if kernels:
            root = cache.kernel_root()
            for folder in filestore.folders(cache.kernel_base() / persist.DIRECTORY, root):
                yield from self._plugin_entries("kernel", folder, root, f"{persist.DIRECTORY}/{folder.name}")
            yield from self._triton_entries()

    def _plugin_entries(self, kind: str, folder: Path, root: Path, place: str) -> Iterator[Entry]:
        for path, rec, why in filestore.read_all(folder, root):
            try:
                if why is not None:
                    raise records.RecordError(why)
                current = records.check(rec, kind)  # an older format's entry, in this version's layout
            except records.RecordError as exc:
                self.skip(path, str(exc))
                continue
            self.found += 1
            cands = [{"config": c["config"], "ms": _ms(c["ms"]), "failure": c["failure"], "measured": c["measured"]}
                     for c in current["candidates"]]
            best = min((c["ms"] for c in cands if c["ms"] is not None), default=None)
            # Exported as stored: an older format's entry lands where its own id puts it.
            yield Entry(kind, current[kind], current["key"], current["pick_config"], best, current["timestamp"],
                        str(path), cands, manifest.entry(f"{place}/{path.name}", rec), current, kind)

    def _triton_entries(self) -> Iterator[Entry]:
        """The kernel-level entries of Triton's own ``*.autotune.json`` files."""
        import datetime as dt

        for path in sorted(kernel_cache_root().glob("*/*.autotune.json")):
            rec, why = filestore.load_json(path)
            if why is not None:
                self.skip(path, why)
                continue
            if rec is None or "configs_timings" not in rec:
                continue
            try:
                cands = [_kernel_candidate(item) for item in _pairs(rec["configs_timings"])]
                when = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat()
            except (ValueError, OSError, RecursionError) as exc:
                self.skip(path, "nested too deeply" if isinstance(exc, RecursionError) else str(exc))
                continue
            self.found += 1
            valid = [c for c in cands if c["ms"] is not None]
            best = min(valid, key=lambda c: c["ms"]) if valid else None
            yield Entry("kernel", path.name[: -len(".autotune.json")], str(rec.get("key")),
                        best["config"] if best else "-", best["ms"] if best else None, when, str(path), cands,
                        place="triton")


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
