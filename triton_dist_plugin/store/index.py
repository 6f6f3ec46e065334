"""An index of the keys stored in one kernel's directory: a new key finds its nearest tuned key
(warm starts, frozen mode's nearest key) by reading one small file, not every entry.

Its files (``index_files``) live in ``kernels/<kernel>/.index/``: one per (kernel, source,
hardware, setting: the context less its candidates, key signature: ``keys.signature``), the keys
that can be compared at all, each key a fixed-size row (its numbers as ``ln(|x|+1)``, its pick's
digest, its entry's name); and a stamp, the directory's mtime and inode when the index last
matched it. A directory changed behind the index's back (entries copied in by hand, written by an
older version, removed) has another: the next reader brings the index up to date (``refresh``),
reading only the entries it lacks and dropping those gone; those it cannot index are listed as
unusable, so each is read once. A lookup spends at most ``CATCH_UP_S`` reading entries the index
lacks and keeps what it indexed; the next lookup goes on from there, and until the index has
caught up a key's nearest is sought among the entries indexed so far (a hundred thousand entries
copied in by hand cost each new key tens of milliseconds, never a read of them all). ``update``
indexes them all at once.

The file store's writer appends its entry's row (``put``), under the index's lock; readers take
none (a row is one write; a torn tail is left out; a whole file is replaced by rename). The
index is input from outside too: a damaged file is rebuilt, numbers that are not finite read as
infinitely far, and every entry it points to is read and checked in full by the caller
(``persist``) before use, so an index can at most hide an entry. Where it cannot be written (a
read-only shared cache) the same is built in memory, once per process and directory state; a
process keeps what it read while the directory is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
import sys
import time
import warnings
from array import array
from contextlib import ExitStack, contextmanager, suppress
from itertools import repeat
from operator import add, sub
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .. import _callsite
from . import describe, keys, records
from . import index_files as files
from .safe_files import TooLarge, clean, locked, open_directory, read_at, subdirectory

FOLDER = ".index"
ENTRY_LIMIT = 32 << 20  # the most bytes an entry file may hold
_ENTRY = re.compile(r"[0-9a-f]{32}\.json")
_SWAP = sys.byteorder == "big"  # rows are little-endian on every host
_SKIPS = 8  # rows whose pick is none of the candidates passed over one by one before all are filtered
#: the longest a lookup spends indexing entries the index lacks (the next lookup goes on from there)
CATCH_UP_S = 0.05
_STEP = 16  # ...but always indexes this many, so that it gets there however long listing the directory takes
_pending: dict = {}  # folder -> the entries this process listed and has not indexed yet (a catch-up under way)
_deferred: dict = {}  # folder -> entries this process could not read now (left to the next, or a change)
_memo: dict = {}  # folder -> (directory state, {id: (numbers per key, rows)}, every id loaded, caught up)
_warned: set = set()
_told: set = set()  # folders whose catch-up this process has announced
_LATER = object()  # an entry that cannot be read now


def identity(kernel: Any, source: Any, hardware: Any, context: Any, signature: tuple) -> str:
    """Which index file holds a key: the keys of one kernel, source, hardware and setting (any
    candidates: pruning depends on the key) that share a signature."""
    setting = {k: v for k, v in context.items() if k != "configs"} if isinstance(context, dict) else context
    text = json.dumps([kernel, source, hardware, setting, list(signature)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def pick_digest(text: str) -> int:
    """A pick's description as the 8 bytes a row holds (read back as a little-endian int64)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "backslashreplace")).digest()[:8], "little", signed=True)


def row_of(record: dict, name: str) -> Optional[tuple[str, int, bytes]]:
    """``(index id, numbers per key, row)`` of an entry named ``name``; None where its key is no
    tuple of bounded numbers and comparable parts, or the name is not an entry's."""
    key = keys.parse(record.get("key"))
    signature = keys.signature(key)
    if signature is None or not _ENTRY.fullmatch(name) or not isinstance(record.get("pick_config"), str):
        return None
    vector = keys.vector(key)
    if not all(math.isfinite(v) for v in vector):
        return None
    ident = identity(record.get("kernel"), record.get("source"), record.get("hardware"), record.get("context"),
                     signature)
    digest = pick_digest(record["pick_config"]).to_bytes(8, "little", signed=True)
    return ident, len(vector), struct.pack(f"<{len(vector)}d", *vector) + digest + bytes.fromhex(name[:32])


# -- reading -------------------------------------------------------------------------------------

def nearest(folder: Path, root: Optional[Path], ident: str, vector: tuple,
            picks: Optional[set] = None) -> Iterator[tuple[float, str]]:
    """``(distance, entry name)`` of the keys of index ``ident`` in ``folder``, nearest
    ``vector`` first (a key at distance 0 too: the key itself under other candidates, or a key
    as near; the caller decides); with ``picks`` (``pick_digest`` values) a key whose pick is
    none of them is passed over."""
    if not vector or not all(math.isfinite(v) for v in vector):
        return  # no numbers: every comparable key is this one; a number that is not finite: none is near
    try:
        with open_directory(folder, root, create=False) as fd:
            table = _current(fd, folder, ident)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        _warn(folder, exc)
        return
    if table is not None and table[0] == len(vector):
        yield from _ranked(table[1], len(vector), vector, picks)


def _ranked(rows: bytes, dims: int, vector: tuple, picks: Optional[set]) -> Iterator[tuple[float, str]]:
    """One pass over every row for the distances, then the nearest, one at a time."""
    size = (dims + 3) * 8
    count = len(rows) // size
    if not count:
        return
    values = array("d")
    values.frombytes(rows[: count * size])
    if _SWAP:
        values.byteswap()
    total: Any = None
    for i, x in enumerate(vector):
        part = map(abs, map(sub, values[i::dims + 3], repeat(x)))
        total = part if total is None else map(add, total, part)
    dist = array("d", total)
    del values
    ids = None
    if picks is not None:
        ids = array("q")
        ids.frombytes(rows[: count * size])
        if _SWAP:
            ids.byteswap()
        ids = ids[dims::dims + 3]
    skipped = 0
    while True:
        best = min(dist)
        if best != best:  # NaN from a damaged row: read as infinitely far
            dist = array("d", map(min, repeat(math.inf), dist))
            continue
        if best == math.inf:
            return
        i = dist.index(best)
        dist[i] = math.inf
        if ids is not None and ids[i] not in picks:
            skipped += 1
            if skipped == _SKIPS:  # the candidates changed: filter every row at once
                dist = array("d", (d if p in picks else math.inf for d, p in zip(dist, ids)))
            continue
        start = i * size + dims * 8 + 8
        yield best, rows[start: start + 16].hex() + ".json"


def _state(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_mtime_ns, st.st_ino


def _current(fd: int, folder: Path, ident: str) -> Optional[tuple[int, bytes]]:
    """The rows of ``ident`` as the directory holds now: from this process's memory, the index
    file when its stamp matches, else after bringing the index up to date, for at most
    ``CATCH_UP_S`` (the rows indexed so far, then)."""
    state = _state(fd)
    seen = _memo.get(str(folder))
    if seen is None or seen[0] != state:
        seen = (state, {}, False, True)
    elif seen[3] and (seen[2] or ident in seen[1]):
        return seen[1].get(ident)
    table: Any = False
    if seen[3]:
        with _index_folder(fd, folder, create=False, quiet=True) as ix:
            if ix is not None and files.stamp(ix) == state:
                table = files.load(ix, ident)
    if table is not False:
        seen[1][ident] = table
        _memo[str(folder)] = seen
        return table
    tables, caught_up = refresh(fd, folder, CATCH_UP_S)
    _memo[str(folder)] = (state, tables, True, caught_up)
    if not caught_up and str(folder) not in _told:
        _told.add(str(folder))
        warnings.warn(f"the autotune cache {folder} holds entries its index lacks (copied in by hand, or written "
                      "by an older release): each new key indexes some of them, and until then its nearest tuned "
                      "key is sought among those indexed. Run 'triton-dist-tune index' to index them all now.",
                      RuntimeWarning, stacklevel=_callsite.stacklevel())
    return tables.get(ident)


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


def update(folder: Path, root: Optional[Path] = None) -> list:
    """Bring the index of ``folder`` up to date now, every entry it lacks read, those it could
    not index before read again (one read while it was being copied, say); the names of those it
    still cannot index."""
    with open_directory(folder, root, create=False) as fd:
        try:
            with ExitStack() as stack:
                ix = stack.enter_context(_index_folder(fd, folder, create=True))
                stack.enter_context(locked(ix, "index", folder / FOLDER / "index"))
                _rebuild(fd, folder, ix, write=True, retry=True)
                return sorted(files.unusable(ix))
        except OSError as exc:
            raise OSError(f"cannot write the index of {folder}: {exc}") from exc


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


def _listing(fd: int) -> set:
    """The entry files of the open directory (not their lock files, which are as many)."""
    return {n for n in os.listdir(fd) if len(n) == 37 and n.endswith(".json") and _ENTRY.fullmatch(n)}


def _row_from_file(fd: int, folder: Path, name: str) -> Any:
    """The row of a valid entry at its own place; None for one that is not, or too large (it is
    read once); ``_LATER`` for one that cannot be read now (another user's, say: tried again)."""
    try:
        record = records.check(records.parse(read_at(fd, name, folder / name, ENTRY_LIMIT)), "kernel")
        if describe.entry_digest(record["source"], record["hardware"], record["key"], record["context"]) != name[:32]:
            return None
    except (records.RecordError, TooLarge):
        return None
    except OSError:
        return _LATER
    return row_of(record, name)


def put(path: Path, root: Optional[Path], record: dict, write: Callable[[], None]) -> None:
    """Run ``write`` (the entry's atomic write) under the index's lock, then add its row; the
    index left as it is (its stamp then no longer matches) where it cannot be kept."""
    folder = path.parent
    with ExitStack() as stack:
        try:
            fd = stack.enter_context(open_directory(folder, root, create=True))
        except OSError:  # the write meets the same error, and says it
            stack.close()
            write()
            return
        try:
            ix = stack.enter_context(_index_folder(fd, folder, create=True))
            stack.enter_context(locked(ix, "index", folder / FOLDER / "index"))
        except OSError as exc:
            _warn(folder, exc)
            stack.close()
            write()
            return
        fresh = files.stamp(ix) == _state(fd)
        write()
        try:
            made = row_of(record, path.name)
            whole = files.append(ix, *made) if made is not None else False
            if fresh and whole:
                files.replace(ix, "stamp", files.STAMP.pack(*_state(fd)))
        except OSError as exc:
            _warn(folder, exc)


def _warn(folder: Path, exc: OSError) -> None:
    if str(folder) not in _warned:
        _warned.add(str(folder))
        warnings.warn(f"cannot keep the index of the autotune cache {folder} ({exc}); a new key of this kernel "
                      "reads its entries once per process instead", RuntimeWarning, stacklevel=3)
