"""The built-in cache store: one JSON file per entry, written atomically under a lock.

The plugin ``tdp.store`` implements ``tdp_cache_get``/``tdp_cache_put`` over ``entry.path``
(``trylast``: any other store is asked first). The directory scans (CLI, manifests, frozen mode's
nearest key) and the logs use the helpers below too.

A cache directory may be shared or world-writable, so every path is reached from the configured
root one name at a time (``O_NOFOLLOW``, ``dir_fd``): no symbolic link below the root is followed
(the root itself is the user's configuration and may be one), and another user's files and
directories are refused unless ``TRITON_DIST_AUTOTUNE_SHARED=1``. A refused read warns and reads
as absent (the key is re-tuned); a refused write raises ``OSError``. Writes hold ``flock`` on
``<file>.lock`` (the lock ``filelock`` takes) and go through a temporary named after its writer,
``fsync`` and ``os.replace``, with the umask's mode; dead writers' temporaries are removed; log
lines are appended in one write, undone if it falls short. Data is JSON, never pickle. POSIX only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import time
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .. import settings
from ..hookspecs import hookimpl

NAME = "tdp.store"
SHARED_ENV = "TRITON_DIST_AUTOTUNE_SHARED"
#: a temporary older than this is a dead writer's, wherever it ran
STALE_SECONDS = 300.0

_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:32]
_OURS = re.compile(r"\..+\.(?P<host>[A-Za-z0-9_-]*)-(?P<pid>\d{1,9})\.[0-9a-f]+\.tmp")
_TEMPORARY = re.compile(r"\..+\.tmp")  # ours, and those of older releases (tempfile.mkstemp)
_LOCK = re.compile(r".+\.(json|jsonl|log)\.lock")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK  # a planted FIFO must not hang the open


class Refused(OSError):
    """A path the file store will not use: a link it did not make, another user's file or
    directory, or something other than a plain file."""


def with_suppress(fn: Callable, *args: Any) -> None:
    with suppress(OSError):
        fn(*args)


# -- reaching a path safely ---------------------------------------------------------------------

def _shared() -> bool:
    return bool(settings.value(SHARED_ENV))


def _check_owner(st: os.stat_result, shown: Path) -> None:
    """Another user's file or directory could be a plant; take it only in a shared cache. The
    system's sticky directories (``/tmp``) pass: no one else can replace a file of ours there."""
    system_sticky = st.st_uid == 0 and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_uid != os.geteuid() and not system_sticky and not _shared():
        raise Refused(f"{shown} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}); set "
                      f"{SHARED_ENV}=1 if this cache directory is shared with a team")


def _open_at(parent: int, name: str, flags: int, shown: Path) -> int:
    """``os.open(name, dir_fd=parent)`` that never follows a link, of a plain file (or, with
    ``O_DIRECTORY``, a directory) this user may trust."""
    try:
        fd = os.open(name, flags | _FILE_FLAGS, 0o666, dir_fd=parent)  # the umask applies
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and stat.S_ISLNK(_mode(parent, name)):
            raise Refused(f"{shown} is a symbolic link, which the cache never follows") from None
        raise
    try:
        st = os.fstat(fd)
        if not flags & os.O_DIRECTORY and not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown} is not a regular file")
        _check_owner(st, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mode(folder: int, name: str) -> int:
    """The type and mode of ``name`` itself (a link is not followed); 0 if it cannot be seen."""
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except OSError:
        return 0


def _subdirectory(parent: int, name: str, shown: Path, create: bool) -> int:
    try:
        return _open_at(parent, name, _DIR_FLAGS, shown)
    except FileNotFoundError:
        if not create:
            raise
    with suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=parent)  # the umask applies
    return _open_at(parent, name, _DIR_FLAGS, shown)


def _route(directory: Path, root: Optional[Path]) -> tuple[Path, tuple[str, ...]]:
    """Where the walk to ``directory`` starts, and the names it then opens one by one."""
    try:
        names = directory.relative_to(root).parts if root is not None else None
    except ValueError:
        names = None
    if names is None:
        return directory.parent, (directory.name,) if directory.name else ()
    if ".." in names:
        raise Refused(f"{directory} is not below {root}")
    return root, names


@contextmanager
def _directory(directory: Path, root: Optional[Path], create: bool) -> Iterator[int]:
    """A descriptor of ``directory``, reached from ``root`` (followed: the user's configuration)
    one name at a time, so no link can be swapped in on the way. ``root`` None, or not above
    ``directory``: only ``directory`` itself is checked."""
    base, names = _route(directory, root)
    if create:
        os.makedirs(base, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if base == root:  # the root is checked too: it may be another user's in a shared /tmp
            _check_owner(os.fstat(fd), base)
        for i, name in enumerate(names):
            child = _subdirectory(fd, name, base.joinpath(*names[: i + 1]), create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _locked(folder: int, name: str, shown: Path) -> Iterator[None]:
    """Hold ``<name>.lock`` (the same ``flock`` a ``filelock.FileLock`` on it takes); read-only,
    so a teammate's lock file serves too."""
    fd = _open_at(folder, name + ".lock", os.O_RDONLY | os.O_CREAT, Path(f"{shown}.lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_target(folder: int, name: str, shown: Path) -> None:
    """The file a write replaces must be this user's plain file (or absent), as for a read."""
    with suppress(FileNotFoundError):
        os.close(_open_at(folder, name, os.O_RDONLY, shown))


# -- temporaries --------------------------------------------------------------------------------

def _temporary_name(name: str) -> str:
    return f".{name}.{_HOST}-{os.getpid()}.{secrets.token_hex(8)}.tmp"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: alive, another user's
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _stale(name: str, st: os.stat_result) -> bool:
    """A temporary whose writer died: it ran on this host, is gone and the file is a minute old
    (a writer in another PID namespace of the same host name looks gone: it gets that long), or
    it is old."""
    ours = _OURS.fullmatch(name)
    if ours and ours["host"] == _HOST and not _alive(int(ours["pid"])) and time.time() - st.st_mtime > 60:
        return True
    return time.time() - st.st_mtime > STALE_SECONDS


def _clean(folder: int, every: bool = False) -> int:
    """Remove this user's temporaries in ``folder`` whose writer died; ``every``: every temporary
    and lock file (a teammate's too, in a shared cache), and links by those names. How many."""
    removed = 0
    for name in os.listdir(folder):
        if not (_TEMPORARY.fullmatch(name) or (every and _LOCK.fullmatch(name))):
            continue
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            mine = stat.S_ISREG(st.st_mode) and (st.st_uid == os.geteuid() or (every and _shared()))
            if (mine and (every or _stale(name, st))) or (every and stat.S_ISLNK(st.st_mode)):
                os.unlink(name, dir_fd=folder)  # a link is removed, never followed
                removed += 1
        except OSError:
            continue  # gone already, or not ours to remove
    return removed


def sweep(directory: Path, root: Optional[Path] = None) -> int:
    """Remove every temporary and lock file the store left in and below ``directory`` (no link
    followed; other users' directories skipped unless shared); how many were removed. For
    ``triton-dist-tune clear --all``: a writer busy now loses its write."""
    removed = 0
    try:
        with _directory(directory, root, create=False) as top:
            for where, dirs, _, folder in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                try:
                    _check_owner(os.fstat(folder), directory / where)
                except Refused:
                    dirs[:] = []
                    continue
                removed += _clean(folder, every=True)
    except FileNotFoundError:
        pass
    except OSError as exc:
        warnings.warn(f"cannot sweep {directory}: {exc}", RuntimeWarning, stacklevel=2)
    return removed


# -- the public helpers -------------------------------------------------------------------------

def write_json_atomic(path: Path, data: Any, root: Optional[Path] = None) -> None:
    """Write ``data`` as JSON to ``path`` under a lock, through a temporary file, ``fsync`` and
    ``os.replace``; directories are created from ``root`` down. ``Refused`` (an ``OSError``) when
    a link or another user's file is in the way."""
    text = json.dumps(data, indent=2, default=str).encode()
    with _directory(path.parent, root, create=True) as folder, _locked(folder, path.name, path):
        _check_target(folder, path.name, path)
        _clean(folder)
        tmp = _temporary_name(path.name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=folder)
        try:
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        with suppress(OSError):
            os.fsync(folder)  # the rename itself survives a crash


def append_line(path: Path, text: str, root: Optional[Path] = None, create: bool = True) -> None:
    """Append ``text`` (one record of one or more lines) to ``path`` in one write under its lock,
    starting on a new line if an older writer left a torn one; a write that falls short (a full
    disk) is cut back off and raises ``OSError``, so no torn line is left. ``create``: make the
    missing directories (the file itself is always created)."""
    data = (text if text.endswith("\n") else text + "\n").encode()
    with _directory(path.parent, root, create) as folder, _locked(folder, path.name, path):
        fd = _open_at(folder, path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT, path)
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


def _read(path: Path, root: Optional[Path]) -> bytes:
    with _directory(path.parent, root, create=False) as folder:
        with os.fdopen(_open_at(folder, path.name, os.O_RDONLY, path), "rb") as f:
            return f.read()


def read_bytes(path: Path, root: Optional[Path] = None, then: str = "ignoring it") -> Optional[bytes]:
    """The bytes of ``path``, reached from ``root`` without following a link; None if absent;
    None with a warning (ending in ``then``) if refused or unreadable."""
    try:
        return _read(path, root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "refusing" if isinstance(exc, Refused) else "cannot read"
        warnings.warn(f"{what} {path}: {exc}; {then}", RuntimeWarning, stacklevel=3)
        return None


def read_json(path: Path, root: Optional[Path] = None) -> Optional[dict]:
    """The JSON object at ``path``; None if absent; None with a warning if refused, unreadable or
    corrupt (not UTF-8, not JSON, nested too deeply to parse, or not an object)."""
    raw = read_bytes(path, root, then="the autotune cache entry is ignored and will be re-tuned")
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))  # UnicodeDecodeError is a ValueError
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        warnings.warn(f"corrupt autotune cache {path} ({reason}); ignoring it, it will be re-tuned and replaced",
                      RuntimeWarning, stacklevel=2)
        return None


def scan(directory: Path, root: Optional[Path] = None) -> list[Path]:
    """The ``*.json`` files of ``directory`` (plain files only: no link is listed or followed),
    sorted; empty if it is absent, and with a warning if it is refused."""
    try:
        with _directory(directory, root, create=False) as folder:
            return sorted(directory / name for name in os.listdir(folder)
                          if name.endswith(".json") and not name.startswith(".")
                          and stat.S_ISREG(_mode(folder, name)))
    except FileNotFoundError:
        return []
    except OSError as exc:
        warnings.warn(f"cannot list autotune cache {directory}: {exc}", RuntimeWarning, stacklevel=2)
        return []


class FileStore:
    """Entries as files under the cache root (``TRITON_DIST_AUTOTUNE_DIR``)."""

    @hookimpl(trylast=True)
    def tdp_cache_get(self, entry: Any) -> Optional[dict]:
        return read_json(entry.path, getattr(entry, "root", None))

    @hookimpl(trylast=True)
    def tdp_cache_put(self, entry: Any, record: dict) -> None:
        write_json_atomic(entry.path, record, getattr(entry, "root", None))
