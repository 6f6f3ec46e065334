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

import math
import sys
import warnings
from array import array
from contextlib import ExitStack
from itertools import repeat
from operator import add, sub
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .. import _callsite
from . import index_files as files
from .index_catchup import _STEP, FOLDER, _index_folder, _rebuild, _state, _warn, refresh  # noqa: F401
from .index_files import ENTRY_LIMIT, identity, pick_digest, row_of  # noqa: F401
from .safe_files import locked, open_directory

_SWAP = sys.byteorder == "big"  # rows are little-endian on every host
_SKIPS = 8  # rows whose pick is none of the candidates passed over one by one before all are filtered
#: the longest a lookup spends indexing entries the index lacks (the next lookup goes on from there)
CATCH_UP_S = 0.05
_memo: dict = {}  # folder -> (directory state, {id: (numbers per key, rows)}, every id loaded, caught up)
_told: set = set()  # folders whose catch-up this process has announced


# -- reading -------------------------------------------------------------------------------------

def nearest(folder: Path, root: Optional[Path], ident: str, vector: tuple,
            picks: Optional[set] = None, catch_up: bool = True) -> Iterator[tuple[float, str]]:
    """``(distance, entry name)`` of the keys of index ``ident`` in ``folder``, nearest
    ``vector`` first (a key at distance 0 too: the key itself under other candidates, or a key
    as near; the caller decides); with ``picks`` (``pick_digest`` values) a key whose pick is
    none of them is passed over. ``catch_up`` False: an index behind its directory is not brought
    up to date for this (a lookup that asks several indexes of one folder does so once)."""
    if not vector or not all(math.isfinite(v) for v in vector):
        return  # no numbers: every comparable key is this one; a number that is not finite: none is near
    try:
        with open_directory(folder, root, create=False) as fd:
            table = _current(fd, folder, ident, catch_up)
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


def _current(fd: int, folder: Path, ident: str, catch_up: bool = True) -> Optional[tuple[int, bytes]]:
    """The rows of ``ident`` as the directory holds now: from this process's memory, the index
    file when its stamp matches, else after bringing the index up to date, for at most
    ``CATCH_UP_S`` (the rows indexed so far, then; without ``catch_up``, those indexed already)."""
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
    if not catch_up:
        return seen[1].get(ident)
    tables, caught_up = refresh(fd, folder, CATCH_UP_S)
    _memo[str(folder)] = (state, tables, True, caught_up)
    if not caught_up and str(folder) not in _told:
        _told.add(str(folder))
        warnings.warn(f"the autotune cache {folder} holds entries its index lacks (copied in by hand, or written "
                      "by an older release): each new key indexes some of them, and until then its nearest tuned "
                      "key is sought among those indexed. Run 'triton-dist-tune index' to index them all now.",
                      RuntimeWarning, stacklevel=_callsite.stacklevel())
    return tables.get(ident)


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


