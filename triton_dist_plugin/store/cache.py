"""The function-level disk cache: one JSON file per (function source, hardware, business key).

Layout: ``<root>/<function name>/<digest>.json`` with a ``.log`` beside it from the tuning that
wrote it. The root is ``$HOME/.triton_dist/autotune`` unless ``TRITON_DIST_AUTOTUNE_DIR`` moves it.
Entries are read and written through the store hooks (``tdp_cache_get``/``tdp_cache_put``);
the built-in store (:mod:`.filestore`) keeps them as those files, written atomically under a
lock. Data is JSON, never pickle. What an entry is keyed on (the source digest, the hardware,
the versions, the entry's id) is described in :mod:`.describe`.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from .. import _callsite, bus, settings
from ..hook_objects import CacheEntry
from . import describe, filestore, fingerprint, records
from .describe import safe_name  # noqa: F401  (where the stores and tests name it)

ROOT_ENV = "TRITON_DIST_AUTOTUNE_DIR"
ALWAYS_TUNE_ENV = "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"
VERSION_CHECK_ENV = describe.VERSION_CHECK_ENV
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


_blocked: dict = {}  # a cache root's text -> what stands where it or a folder above it must be, or None


def _blocker(root: Path) -> Optional[Path]:
    """What makes every entry below ``root`` unreachable: a file (not a directory) at ``root`` or
    at the nearest existing folder above it, or a symbolic link there whose target does not
    exist. Checked once per root and process; the first time one is found, one warning says so,
    and the file store's own warnings about places below it (each read, scan and write would
    warn again) are silenced."""
    text = str(root)
    if text in _blocked:
        return _blocked[text]
    found, why = None, ""
    for place in (root, *root.parents):
        try:
            mode = os.stat(place).st_mode
        except (FileNotFoundError, NotADirectoryError):  # look further up, past a link to nowhere too
            if os.path.islink(place):
                found, why = place, f"{place} is a symbolic link to {os.readlink(place)!r}, which does not exist"
                break
            continue
        except OSError:
            break
        if not stat.S_ISDIR(mode):
            found, why = place, f"{place} is a file, not a directory"
        break
    _blocked[text] = found
    if found is not None:
        below = re.escape(text.rstrip("/") + "/")
        warnings.filterwarnings("ignore", message=rf"(cannot read|refusing|cannot list autotune cache) {below}",
                                category=RuntimeWarning)
        warnings.warn(f"the autotune cache {root} cannot be used: {why}; picks are kept in memory only, for this "
                      f"process. Point {ROOT_ENV} at a directory (or make the link's target one, or move the file) "
                      "to keep them across runs.", RuntimeWarning, stacklevel=_callsite.stacklevel())
    return found


def blocked(root: Path) -> bool:
    """``root`` cannot hold entries, and a warning said so once (``_blocker``)."""
    return _blocker(root) is not None


def cache_entry(kind: str, name: str, directory: Path, source: str, hw: dict, key: Any,
                context: Optional[dict] = None, root: Optional[Path] = None) -> CacheEntry:
    """What the store hooks get for ``key``: its id, and its file under ``directory`` (one file
    per source, hardware, key and context), below ``root``, where the file store's checks start."""
    _blocker(root if root is not None else directory)
    digest = describe.entry_digest(source, hw, repr(key), context)
    return CacheEntry(kind, name, digest, directory / f"{digest}.json", root=root)


def entry_header(field: str, name: str, key: Any, source: str, hw: dict, context: Optional[dict] = None) -> dict:
    """The fields every entry starts with (``field`` names what was tuned: function or kernel;
    both stores give a ``context``)."""
    return {"format": FORMAT, field: name, "key": repr(key), "source": source, "hardware": hw,
            **({"context": context} if context is not None else {}),
            "versions": describe.versions(), "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat()}


def warn_unwritable(name: str, directory: Path, key: Any, exc: OSError) -> None:
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
                  f"{after}.{hint}", RuntimeWarning, stacklevel=_callsite.stacklevel())


def put_checked(entry: CacheEntry, record: dict) -> None:
    """Hand ``record`` to every store if it passes the check every reader makes (else warn: the
    pick stays in memory); a store's ``OSError`` is raised after all."""
    try:
        records.check(record, entry.kind)
    except records.RecordError as exc:
        warnings.warn(f"{entry.name}: the pick is kept in memory only: its entry would not pass the check "
                      f"every reader makes ({exc})", RuntimeWarning, stacklevel=_callsite.stacklevel())
        return
    bus.cache_put(entry, record)


class EntryStore:
    """What the two stores share (``FunctionCache``, ``persist.KernelStore``): an entry's id and
    place, reading it through every store (``bus.cache_get``: the one check, older layouts in this
    version's) and holding it against what asked for it, and writing it (``put_checked``)."""

    kind = ""  # "function" or "kernel", as the store hooks see it

    def __init__(self, name: str, source: str, hw: dict, directory: Path, root: Path, context: dict):
        self.name, self.source, self.hw, self.dir, self.root, self.context = name, source, hw, directory, root, context

    def entry(self, key: Any, context: Any = None) -> CacheEntry:
        """``key``'s entry under this store's context (or ``context``)."""
        return cache_entry(self.kind, self.name, self.dir, self.source, self.hw, key,
                           self.context if context is None else context, self.root)

    def path(self, key: Any) -> Path:
        return self.entry(key).path

    def contexts(self) -> list[dict]:
        """The settings a lookup reads picks of: this store's own, then the more thorough ones
        (``fingerprint.thorougher``), most thorough first."""
        return [self.context, *fingerprint.thorougher(self.context)]

    def places(self, key: Any) -> list[CacheEntry]:
        """Where ``key``'s entry may be, the first first: one per setting of ``contexts`` (a store
        may add an older layout's place)."""
        return [self.entry(key, c) for c in self.contexts()]

    def lookup(self, key: Any, fits: Callable[[dict], bool] = lambda record: True) -> Optional[tuple[str, dict, str]]:
        """``(where it was found, record, the store that answered)`` of ``key``'s entry in this
        version's layout, if one is found that was made for this key and context and ``fits`` (else
        a warning: it is re-tuned and replaced), under the recorded versions where
        ``TRITON_DIST_AUTOTUNE_VERSION_CHECK`` asks for them; None otherwise, and always under
        ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE``."""
        if settings.value(ALWAYS_TUNE_ENV):
            return None
        places = self.places(key)
        for tables in (False, True):  # every place of this machine's and the user's stores, then the tables
            for entry in places:
                found = bus.cache_get(entry, tables=tables)
                if found is None:
                    continue
                store, record = found
                if record["key"] != repr(key) or not fingerprint.serves(record["context"], self.context) \
                        or not fits(record):
                    warnings.warn(f"autotune cache {bus.where(entry, store)} is not {self.name}'s entry for key "
                                  f"{key!r} here (its key, setting or candidates differ); not used",
                                  RuntimeWarning, stacklevel=_callsite.stacklevel())
                    continue
                if describe.versions_refused(record["versions"]):
                    continue
                return bus.where(entry, store), record, store
        return None

    def full(self, key: Any, body: dict) -> dict:
        """The entry of ``key`` whose pick, candidates and the rest are ``body``."""
        return {**entry_header(self.kind, self.name, key, self.source, self.hw, self.context), **body}

    def put(self, key: Any, body: dict) -> Path:
        """Hand ``key``'s entry to every store (``put_checked``); its file's place."""
        entry = self.entry(key)
        put_checked(entry, self.full(key, body))
        return entry.path


class FunctionCache(EntryStore):
    """The cache directory of one tuned function: its entries are keyed, as kernel entries are,
    on the search and its effort (``fingerprint.tuning_context``)."""

    kind = "function"

    def __init__(self, name: str, source: str, hw: dict, directory: Optional[str] = None):
        super().__init__(name, source, hw, cache_root() / safe_name(directory or name), cache_root(),
                         fingerprint.tuning_context())

    def places(self, key: Any) -> list[CacheEntry]:
        """Its places (``EntryStore.places``), with, right after the defaults' own, where formats
        1 and 2 kept it (an id that covered no context): such an entry is taken as tuned under the
        defaults, so it serves where a pick of the defaults would."""
        places, contexts = super().places(key), self.contexts()
        defaults = fingerprint.tuning_context(unset=True)
        if defaults in contexts:  # read as tuned at the defaults: asked in the defaults' own turn
            places.insert(contexts.index(defaults) + 1,
                          cache_entry(self.kind, self.name, self.dir, self.source, self.hw, key, None, self.root))
        return places

    def find(self, key: Any, space_reprs: list[str]) -> Optional[tuple[str, dict, str]]:
        """``(where it was found, record, store)`` for ``key`` if valid for this source, hardware,
        setting and config space (``space_reprs``: each entry's description)."""
        return self.lookup(key, lambda record: 0 <= record["pick"] < len(space_reprs)
                           and record["pick_config"] == space_reprs[record["pick"]])

    def load(self, key: Any, space_reprs: list[str]) -> Optional[dict]:
        """The record alone (``find``)."""
        found = self.find(key, space_reprs)
        return found[1] if found is not None else None

    def store(self, key: Any, record: dict) -> Path:
        """Hand the entry (``record``: its pick and candidates, rows as ``records.row`` makes them)
        to every store (``tdp_cache_put``); its file's place, for the ``.log``."""
        return self.put(key, record)

    def log(self, key: Any, text: str) -> None:
        """Append ``text`` to the ``.log`` beside the entry's file: local only, and only where the
        directory exists (a log alone must not create a cache directory nothing else uses); in
        one write that a full disk cannot tear, never through a link."""
        entry = self.entry(key)
        try:
            filestore.append_line(entry.path.with_suffix(".log"), text, root=entry.root, create=False)
        except OSError:
            pass
