"""The file primitives the file store is built on: a path under a cache root reached one name at
a time, never through a symbolic link and never into another user's file or directory, and the
temporaries a write goes through, named after their writer so that dead writers' can be swept.

A cache directory may be shared or world-writable, so every path is reached from the configured
root by ``dir_fd`` (``O_NOFOLLOW``): no symbolic link below the root is followed (the root
itself is the user's configuration and may be one), and another user's files and directories
are refused (``Refused``) unless ``TRITON_DIST_AUTOTUNE_SHARED=1``; a file larger than a read's
limit is refused unread (``TooLarge``). Locks are ``flock`` on ``<file>.lock``, the lock
``filelock`` takes; a writer's temporary lives in ``.partial/`` beside the entries, and one whose
entry's lock is held belongs to a writer busy now and is never removed, nor is a lock file
someone holds. Apart from ``filestore`` (what is read and
written, and the plugin) so that what makes a path safe to use reads in one place. POSIX only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import socket
import stat
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator, Optional

from .. import settings

SHARED_ENV = "TRITON_DIST_AUTOTUNE_SHARED"
#: the folder beside the entries that holds writers' temporaries (so a writer lists only those)
PARTIAL = ".partial"
#: a temporary older than this is a dead writer's, wherever it ran
STALE_SECONDS = 300.0

_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:32]
_OURS = re.compile(r"\.(?P<entry>.+)\.(?P<host>[A-Za-z0-9_-]*)-(?P<pid>\d{1,9})\.[0-9a-f]+\.tmp")
_TEMPORARY = re.compile(r"\..+\.tmp")  # ours, and those of older releases (tempfile.mkstemp)
_LOCK = re.compile(r".+\.(json|jsonl|log)\.lock")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK  # a planted FIFO must not hang the open


class Refused(OSError):
    """A path the file store will not use: a link it did not make, another user's file or
    directory, or something other than a plain file."""


class TooLarge(Refused):
    """A file larger than what may be read of it (an entry is small; a huge one is damage or a plant)."""


# -- reaching a path safely ---------------------------------------------------------------------

def _shared() -> bool:
    return bool(settings.value(SHARED_ENV))


def check_owner(st: os.stat_result, shown: Path) -> None:
    """Another user's file or directory could be a plant; take it only in a shared cache. The
    system's sticky directories (``/tmp``) pass: no one else can replace a file of ours there."""
    system_sticky = st.st_uid == 0 and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_uid != os.geteuid() and not system_sticky and not _shared():
        raise Refused(f"{shown} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}); set "
                      f"{SHARED_ENV}=1 if this cache directory is shared with a team")


def open_at(parent: int, name: str, flags: int, shown: Path) -> int:
    """``os.open(name, dir_fd=parent)`` that never follows a link, of a plain file (or, with
    ``O_DIRECTORY``, a directory) this user may trust."""
    try:
        fd = os.open(name, flags | _FILE_FLAGS, 0o666, dir_fd=parent)  # the umask applies
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and stat.S_ISLNK(mode_of(parent, name)):
            raise Refused(f"{shown} is a symbolic link, which the cache never follows") from None
        raise
    try:
        st = os.fstat(fd)
        if not flags & os.O_DIRECTORY and not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown} is not a regular file")
        check_owner(st, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def mode_of(folder: int, name: str) -> int:
    """The type and mode of ``name`` itself (a link is not followed); 0 if it cannot be seen."""
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except OSError:
        return 0


def read_at(folder: int, name: str, shown: Path, limit: Optional[int] = None) -> bytes:
    """The bytes of the plain file ``name`` in ``folder`` (no link followed, this user's or a
    shared cache's); ``TooLarge`` unread when it holds more than ``limit`` bytes."""
    fd = open_at(folder, name, os.O_RDONLY, shown)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise TooLarge(f"{shown} holds {size} bytes, more than the {limit} a read of it may take")
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:  # it grew while being read
        raise TooLarge(f"{shown} holds more than the {limit} bytes a read of it may take")
    return data


def subdirectory(parent: int, name: str, shown: Path, create: bool) -> int:
    """A descriptor of the directory ``name`` in ``parent`` (made if ``create``), no link followed."""
    return _subdirectory(parent, name, shown, create)


def _subdirectory(parent: int, name: str, shown: Path, create: bool) -> int:
    try:
        return open_at(parent, name, _DIR_FLAGS, shown)
    except FileNotFoundError:
        if not create:
            raise
    with suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=parent)  # the umask applies
    return open_at(parent, name, _DIR_FLAGS, shown)


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
def open_directory(directory: Path, root: Optional[Path], create: bool) -> Iterator[int]:
    """A descriptor of ``directory``, reached from ``root`` (followed: the user's configuration)
    one name at a time, so no link can be swapped in on the way. ``root`` None, or not above
    ``directory``: only ``directory`` itself is checked."""
    base, names = _route(directory, root)
    if create:
        os.makedirs(base, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if base == root:  # the root is checked too: it may be another user's in a shared /tmp
            check_owner(os.fstat(fd), base)
        for i, name in enumerate(names):
            child = _subdirectory(fd, name, base.joinpath(*names[: i + 1]), create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


@contextmanager
def locked(folder: int, name: str, shown: Path) -> Iterator[None]:
    """Hold ``<name>.lock`` (the same ``flock`` a ``filelock.FileLock`` on it takes); read-only,
    so a teammate's lock file serves too."""
    fd = open_at(folder, name + ".lock", os.O_RDONLY | os.O_CREAT, Path(f"{shown}.lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_target(folder: int, name: str, shown: Path) -> None:
    """The file a write replaces must be this user's plain file (or absent), as for a read."""
    with suppress(FileNotFoundError):
        os.close(open_at(folder, name, os.O_RDONLY, shown))


# -- temporaries --------------------------------------------------------------------------------

def temporary_name(name: str) -> str:
    """A hidden name beside ``name`` that says which host and process writes it, so that ``clean``
    can tell a dead writer's temporary from a live one's."""
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


def held(folder: int, lock: str) -> bool:
    """Someone holds the lock file ``lock`` in ``folder`` now (a writer mid-write); False when it
    is absent, not a plain file, or free. Asked without waiting."""
    try:
        fd = os.open(lock, os.O_RDONLY | _FILE_FLAGS, dir_fd=folder)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the shared lock just taken


def _entry_of(name: str) -> str:
    """The entry a temporary was written for: ``.<entry>.<host>-<pid>.<hex>.tmp``, or an older
    release's ``.<entry>.<random>.tmp``."""
    ours = _OURS.fullmatch(name)
    return ours["entry"] if ours else name[1: -len(".tmp")].rsplit(".", 1)[0]


def _dead_here(name: str) -> bool:
    ours = _OURS.fullmatch(name)
    return bool(ours) and ours["host"] == _HOST and not _alive(int(ours["pid"]))


def _remove_lock(folder: int, name: str) -> bool:
    """Remove the lock file ``name`` if no one holds it (taken, then removed while held)."""
    try:
        fd = os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=folder)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(name, dir_fd=folder)
        return True
    except OSError:  # held by a writer now (BlockingIOError), or gone
        return False
    finally:
        os.close(fd)


def clean(folder: int, every: bool = False, own: Optional[str] = None, locks: Optional[int] = None) -> int:
    """Remove this user's temporaries in ``folder`` whose writer died, never one whose entry's
    lock (in ``locks``, else ``folder``) someone holds (``own``: the entry whose lock the caller
    holds itself). ``every`` (``triton-dist-tune clear --all``): a dead writer's of this host at
    once, a teammate's too in a shared cache, every lock file no one holds, and links by those
    names. How many were removed."""
    removed = 0
    locks = folder if locks is None else locks
    for name in os.listdir(folder):
        temporary, lock = _TEMPORARY.fullmatch(name), every and _LOCK.fullmatch(name)
        if not (temporary or lock):
            continue
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:
            continue  # gone already
        if stat.S_ISLNK(st.st_mode):
            if every:
                with suppress(OSError):
                    os.unlink(name, dir_fd=folder)  # a link is removed, never followed
                    removed += 1
            continue
        if not stat.S_ISREG(st.st_mode) or not (st.st_uid == os.geteuid() or (every and _shared())):
            continue  # not ours to remove
        if lock:
            removed += _remove_lock(folder, name)
            continue
        entry = _entry_of(name)
        if entry != own and held(locks, entry + ".lock"):
            continue  # its writer is busy now
        if _stale(name, st) or (every and _dead_here(name)):
            with suppress(OSError):
                os.unlink(name, dir_fd=folder)
                removed += 1
    return removed
