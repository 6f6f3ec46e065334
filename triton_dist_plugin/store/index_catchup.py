"""Bringing a kernel folder's index up to date with the folder: the entries it lacks read and
indexed (within a time budget per lookup, going on from this process's own listing), those gone
dropped, those that cannot be indexed listed once. See ``index`` for what the index is."""

from __future__ import annotations

import os
import time
import warnings
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator, Optional

from . import describe, records
from . import index_files as files
from .index_files import _ENTRY, ENTRY_LIMIT, row_of
from .safe_files import TooLarge, clean, locked, read_at, subdirectory

FOLDER = ".index"
_STEP = 16  # a lookup always indexes this many, so that it gets there however long listing the directory takes
_pending: dict = {}  # folder -> the entries this process listed and has not indexed yet (a catch-up under way)
_deferred: dict = {}  # folder -> entries this process could not read now (left to the next, or a change)
_warned: set = set()
_LATER = object()  # an entry that cannot be read now


def _state(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_mtime_ns, st.st_ino


@contextmanager
def _index_folder(fd: int, folder: Path, create: bool, quiet: bool = False) -> Iterator[Optional[int]]:
    """The index folder's descriptor, made if ``create``; ``quiet``: None where it is absent or
    cannot be opened (a plant in its place, another user's), else that error."""
    try:
        ix = subdirectory(fd, FOLDER, folder / FOLDER, create)
    except OSError:
        if quiet:
            yield None
            return
        raise
    try:
        yield ix
    finally:
        os.close(ix)


def refresh(fd: int, folder: Path, budget: Optional[float] = None) -> tuple[dict, bool]:
    """Index the entries of the open directory ``fd`` the index lacks (for about ``budget``
    seconds at most, if given) and drop those gone, under the index's lock where it can be written
    (else in memory only, and all of them: nothing would keep the progress); ``({id: (numbers,
    rows)}, whether the index has caught up with the directory)``."""
    try:
        with ExitStack() as stack:
            ix = stack.enter_context(_index_folder(fd, folder, create=True))
            stack.enter_context(locked(ix, "index", folder / FOLDER / "index"))
            return _rebuild(fd, folder, ix, write=True, budget=budget)
    except OSError as exc:  # read-only, or a plant in the index's place: this process only
        _warn(folder, exc)
    with _index_folder(fd, folder, create=False, quiet=True) as ix:
        return _rebuild(fd, folder, ix, write=False)


def _rebuild(fd: int, folder: Path, ix: Optional[int], write: bool,
             budget: Optional[float] = None, retry: bool = False) -> tuple[dict, bool]:
    """The index of the open directory ``fd`` as it is now: its rows of entries still there, and
    a row for each entry it lacks that can be indexed (those read within ``budget`` seconds);
    written back when ``write`` (the stamp only once it has caught up); and whether it has. A
    catch-up this process began goes on from its own listing (``_pending``): listing a folder of
    a hundred thousand entries costs more than the budget itself, which counts from after it. An
    entry that cannot be read now (another user's, say) is tried again by the next process, or
    when the folder changes, not by every lookup of this one. ``retry``: read again those found
    unusable before."""
    state = _state(fd)  # taken before the listing: a change after it gives the directory another mtime
    loaded, changed = files.load_all(ix)
    unusable = set() if retry else files.unusable(ix)
    deferred = _deferred.setdefault(str(folder), set())
    queue = _pending.pop(str(folder), None) if budget is not None and write else None
    if queue:
        tables, todo, listed_now = dict(loaded), queue, False
    else:
        present = _listing(fd)
        tables, have = _still_there(loaded, present, changed)
        unusable &= present
        todo, listed_now = list(present - have - unusable - deferred), True
    known = -1 if retry else len(unusable)
    grown: dict = {}
    done = 0
    started = time.perf_counter()
    for done, name in enumerate(todo, 1):
        made = _row_from_file(fd, folder, name)
        if made is None:
            unusable.add(name)
        elif made is _LATER:
            deferred.add(name)
        elif tables.get(made[0], (made[1],))[0] == made[1]:
            grown.setdefault(made[0], (made[1], bytearray()))[1].extend(made[2])
        if budget is not None and done >= _STEP and time.perf_counter() - started > budget:
            break
    if done < len(todo):
        _pending[str(folder)] = todo[done:]  # the next lookup goes on from here
    caught_up = listed_now and done == len(todo)
    for ident, (dims, rows) in grown.items():
        tables[ident] = (dims, tables.get(ident, (dims, b""))[1] + bytes(rows))
        changed.add(ident)
    if write and ix is not None:
        clean(ix)  # the temporaries of an index writer that died
        for ident in changed:
            if ident in tables:
                files.write_table(ix, ident, *tables[ident])
            else:  # damaged, and none of its entries is left
                with suppress(FileNotFoundError):
                    os.unlink(f"{ident}.idx", dir_fd=ix)
        if len(unusable) != known:
            files.replace(ix, "unusable", "".join(f"{n}\n" for n in sorted(unusable)).encode())
        if caught_up:
            files.replace(ix, "stamp", files.STAMP.pack(*state))
    return tables, caught_up


def _still_there(loaded: dict, present: set, changed: set) -> tuple[dict, set]:
    """The loaded tables less the rows of entries no longer ``present`` (and the older rows of an
    entry written again); the ids of tables so trimmed join ``changed``. Also every name they list."""
    tables, have = {}, set()
    for ident, (dims, rows) in loaded.items():
        listed = files.names(rows, dims)
        if not present.issuperset(listed) or len(set(listed)) != len(listed):  # removed, or written again
            size, last = files.row_size(dims), {n: i for i, n in enumerate(listed)}
            rows = b"".join(rows[i * size: (i + 1) * size] for i, n in enumerate(listed)
                            if n in present and last[n] == i)
            changed.add(ident)
        tables[ident] = (dims, rows)
        have.update(listed)
    return tables, have


def _listing(fd: int) -> set:
    """The entry files of the open directory (not their lock files, which are as many)."""
    return {n for n in os.listdir(fd) if len(n) == 37 and n.endswith(".json") and _ENTRY.fullmatch(n)}


def _row_from_file(fd: int, folder: Path, name: str) -> Any:
    """The row of a valid entry at its own place; None for one that is not, or too large (it is
    read once); ``_LATER`` for one that cannot be read now (another user's, say: tried again)."""
    try:
        stored = records.parse(read_at(fd, name, folder / name, ENTRY_LIMIT))
        record = records.check(stored, "kernel")
        if describe.entry_digest(record["source"], record["hardware"], record["key"],
                                 records.id_context(stored, "kernel")) != name[:32]:
            return None
    except (records.RecordError, TooLarge):
        return None
    except OSError:
        return _LATER
    return row_of(record, name)


def _warn(folder: Path, exc: OSError) -> None:
    if str(folder) not in _warned:
        _warned.add(str(folder))
        warnings.warn(f"cannot keep the index of the autotune cache {folder} ({exc}); a new key of this kernel "
                      "reads its entries once per process instead", RuntimeWarning, stacklevel=3)
