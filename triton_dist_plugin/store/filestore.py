"""The built-in cache store: one JSON file per entry, written atomically under a lock.

The plugin ``tdp.store`` implements ``tdp_cache_get``/``tdp_cache_put`` over ``entry.path``
(``trylast``: any other store is asked first); a kernel entry's write also adds it to its
directory's index (``index``: how a new key finds its nearest tuned key without reading every
entry). The CLI, manifests and the logs use the helpers below too. An entry file larger than
``ENTRY_LIMIT`` is refused unread.

Every path is reached through ``safe_files``: from the configured root one name at a time, no
link followed, another user's files refused unless ``TRITON_DIST_AUTOTUNE_SHARED=1``. A refused
read warns and reads as absent (the key is re-tuned); a refused write raises ``OSError``. Writes
hold the file's lock and go through a temporary named after its writer, ``fsync`` and
``os.replace``, with the umask's mode; dead writers' temporaries are removed; log lines are
appended in one write, undone if it falls short. Data is JSON, never pickle. POSIX only.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..hookspecs import hookimpl
from . import index, records
from .safe_files import (
    PARTIAL,
    Refused,
    check_owner,
    check_target,
    clean,
    locked,
    mode_of,
    open_at,
    open_directory,
    read_at,
    subdirectory,
    temporary_name,
)

NAME = "tdp.store"
#: the most bytes an entry file may hold (a large space's entry is well under 1 MB)
ENTRY_LIMIT = index.ENTRY_LIMIT


def with_suppress(fn: Callable, *args: Any) -> None:
    with suppress(OSError):
        fn(*args)


def sweep(directory: Path, root: Optional[Path] = None) -> int:
    """Remove the temporaries of writers that died and the lock files no one holds, in and below
    ``directory`` (no link followed; other users' directories skipped unless shared); how many
    were removed. For ``triton-dist-tune clear --all``: a writer busy now keeps its temporary
    and its lock."""
    removed = 0
    try:
        with open_directory(directory, root, create=False) as top:
            for where, dirs, _, folder in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                try:
                    check_owner(os.fstat(folder), directory / where)
                except Refused:
                    dirs[:] = []
                    continue
                removed += clean(folder, every=True)  # older releases' temporaries lie beside the entries
                if PARTIAL in dirs:  # writers' temporaries: their entries' locks are here
                    dirs.remove(PARTIAL)
                    with suppress(OSError):
                        partial = subdirectory(folder, PARTIAL, directory / where / PARTIAL, create=False)
                        try:
                            removed += clean(partial, every=True, locks=folder)
                        finally:
                            os.close(partial)
    except FileNotFoundError:
        pass
    except OSError as exc:
        warnings.warn(f"cannot sweep {directory}: {exc}", RuntimeWarning, stacklevel=2)
    return removed


# -- the public helpers -------------------------------------------------------------------------

def write_json_atomic(path: Path, data: Any, root: Optional[Path] = None) -> None:
    """Write ``data`` as JSON to ``path`` under a lock, through a temporary file in ``.partial/``
    beside it (so a writer lists the temporaries, never every entry), ``fsync`` and
    ``os.replace``; directories are created from ``root`` down. ``Refused`` (an ``OSError``) when
    a link or another user's file is in the way."""
    text = json.dumps(data, indent=2, default=str).encode()
    with open_directory(path.parent, root, create=True) as folder, locked(folder, path.name, path):
        check_target(folder, path.name, path)
        partial = subdirectory(folder, PARTIAL, path.parent / PARTIAL, create=True)
        try:
            clean(partial, own=path.name, locks=folder)
            tmp = temporary_name(path.name)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=partial)
            try:
                try:
                    view = memoryview(text)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path.name, src_dir_fd=partial, dst_dir_fd=folder)
            except BaseException:
                with suppress(OSError):
                    os.unlink(tmp, dir_fd=partial)
                raise
        finally:
            os.close(partial)
        with suppress(OSError):
            os.fsync(folder)  # the rename itself survives a crash


def append_line(path: Path, text: str, root: Optional[Path] = None, create: bool = True) -> None:
    """Append ``text`` (one record of one or more lines) to ``path`` in one write under its lock,
    starting on a new line if an older writer left a torn one; a write that falls short (a full
    disk) is cut back off and raises ``OSError``, so no torn line is left. ``create``: make the
    missing directories (the file itself is always created)."""
    data = (text if text.endswith("\n") else text + "\n").encode()
    with open_directory(path.parent, root, create) as folder, locked(folder, path.name, path):
        fd = open_at(folder, path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT, path)
        try:
            st = os.fstat(fd)
            if st.st_nlink != 1:  # a hard link planted to another file
                raise Refused(f"{path} has {st.st_nlink} links; the cache appends only to its own file")
            if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                data = b"\n" + data
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, f"{path}: the disk is full; the line was not kept")
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, st.st_size)  # no torn line is left behind
                raise
        finally:
            os.close(fd)


def _read(path: Path, root: Optional[Path], limit: Optional[int] = None) -> bytes:
    with open_directory(path.parent, root, create=False) as folder:
        return read_at(folder, path.name, path, limit)


def read_bytes(path: Path, root: Optional[Path] = None, then: str = "ignoring it",
               limit: Optional[int] = None) -> Optional[bytes]:
    """The bytes of ``path``, reached from ``root`` without following a link; None if absent;
    None with a warning (ending in ``then``) if refused, larger than ``limit`` or unreadable."""
    try:
        return _read(path, root, limit)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "refusing" if isinstance(exc, Refused) else "cannot read"
        warnings.warn(f"{what} {path}: {exc}; {then}", RuntimeWarning, stacklevel=3)
        return None


def load_json(path: Path, root: Optional[Path] = None) -> tuple[Optional[dict], Optional[str]]:
    """``(the JSON object at path, None)``; ``(None, None)`` if absent; ``(None, why)`` if it is
    refused (a link, another user's, too large), unreadable, or not a JSON object. Never warns:
    for callers that say it their own way (the command line)."""
    try:
        raw = _read(path, root, ENTRY_LIMIT)
    except FileNotFoundError:
        return None, None
    except Refused as exc:
        return None, f"refused ({exc})"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    try:
        return records.parse(raw), None
    except records.RecordError as exc:
        return None, str(exc)


def other_than_files(store: str) -> Optional[str]:
    """A store's name where it is not this one (the views say where a hit was read only then)."""
    return None if store == NAME else store


def read_json(path: Path, root: Optional[Path] = None) -> Optional[dict]:
    """The JSON object at ``path``; None if absent; None with a warning if refused (a link,
    another user's, larger than ``ENTRY_LIMIT``), unreadable or corrupt (not UTF-8, not JSON,
    nested too deeply to parse, or not an object)."""
    raw = read_bytes(path, root, then="the autotune cache entry is ignored and will be re-tuned", limit=ENTRY_LIMIT)
    if raw is None:
        return None
    try:
        return records.parse(raw)
    except records.RecordError as exc:
        warnings.warn(f"corrupt autotune cache {path} ({exc}); ignoring it, it will be re-tuned and replaced",
                      RuntimeWarning, stacklevel=2)
        return None


def put_entry(kind: str, path: Path, record: dict, root: Optional[Path] = None) -> None:
    """Write an entry atomically; a kernel entry is added to its directory's index as well."""
    if kind == "kernel":
        index.put(path, root, record, lambda: write_json_atomic(path, record, root))
    else:
        write_json_atomic(path, record, root)


def scan(directory: Path, root: Optional[Path] = None) -> list[Path]:
    """The ``*.json`` files of ``directory`` (plain files only: no link is listed or followed),
    sorted; empty if it is absent, and with a warning if it is refused."""
    try:
        with open_directory(directory, root, create=False) as folder:
            return sorted(directory / name for name in os.listdir(folder)
                          if name.endswith(".json") and not name.startswith(".")
                          and stat.S_ISREG(mode_of(folder, name)))
    except FileNotFoundError:
        return []
    except OSError as exc:
        warnings.warn(f"cannot list autotune cache {directory}: {exc}", RuntimeWarning, stacklevel=2)
        return []


def folders(directory: Path, root: Optional[Path] = None) -> list[Path]:
    """The folders in ``directory`` (no link, no hidden name), sorted; empty if it is absent, and
    with a warning if it is refused."""
    try:
        with open_directory(directory, root, create=False) as folder:
            return sorted(directory / name for name in os.listdir(folder)
                          if not name.startswith(".") and stat.S_ISDIR(mode_of(folder, name)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        warnings.warn(f"cannot list autotune cache {directory}: {exc}", RuntimeWarning, stacklevel=2)
        return []


def read_all(directory: Path, root: Optional[Path] = None) -> Iterator[tuple[Path, Optional[dict], Optional[str]]]:
    """``(path, object, None)`` or ``(path, None, why it cannot be used)`` for each ``*.json`` in
    ``directory``, by name, one at a time (the directory opened once; no link followed)."""
    try:
        with open_directory(directory, root, create=False) as folder:
            for name in sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith(".")):
                path = directory / name
                try:
                    raw = read_at(folder, name, path, ENTRY_LIMIT)
                except FileNotFoundError:
                    continue  # removed meanwhile
                except Refused as exc:
                    yield path, None, f"refused ({exc})"
                    continue
                except OSError as exc:
                    yield path, None, f"cannot be read ({exc.strerror or exc})"
                    continue
                try:
                    yield path, records.parse(raw), None
                except records.RecordError as exc:
                    yield path, None, str(exc)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        warnings.warn(f"cannot list autotune cache {directory}: {exc}", RuntimeWarning, stacklevel=2)


class FileStore:
    """Entries as files under the cache root (``TRITON_DIST_AUTOTUNE_DIR``)."""

    @hookimpl(trylast=True)
    def tdp_cache_get(self, entry: Any) -> Optional[dict]:
        return read_json(entry.path, getattr(entry, "root", None))

    @hookimpl(trylast=True)
    def tdp_cache_put(self, entry: Any, record: dict) -> None:
        put_entry(entry.kind, entry.path, record, getattr(entry, "root", None))
