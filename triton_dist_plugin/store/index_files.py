"""The files of a kernel directory's index (``index``), read and written: what each holds and how
a damaged one reads, apart from when they are written and what a lookup does with them.

In ``kernels/<kernel>/.index/``: ``<id>.idx`` (a 16-byte header: magic, how many numbers each key
holds; then fixed-size little-endian rows: the key's numbers as float64, 8 bytes of the pick's
digest, the entry's 16-byte id), ``stamp`` (the directory's mtime and inode, 16 bytes),
``unusable`` (the names of entries that cannot be indexed, one a line) and ``index.lock``. Every
file is opened below the directory without following a link (``safe_files``). A damaged file
reads as damaged (``load`` gives False), never as rows: a header that does not fit, a size
past the limit; a torn last row is left out.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from contextlib import suppress
from pathlib import Path
from typing import Any, Optional

from . import keys
from .safe_files import open_at, read_at, temporary_name

MAGIC = b"TDPKEYS1"
HEADER = struct.Struct("<8sII")  # magic, numbers per key, reserved
STAMP = struct.Struct("<qq")  # the directory's mtime (ns) and inode
LIMIT = 1 << 30  # the most bytes an index file may hold (tens of millions of keys)
MAX_NUMBERS = 1024  # the most numbers a key of an index may hold
_ID = re.compile(r"[0-9a-f]{32}")
_ENTRY = re.compile(r"[0-9a-f]{32}\.json")
ENTRY_LIMIT = 32 << 20  # the most bytes an entry file may hold


def row_size(dims: int) -> int:
    return (dims + 3) * 8


def load(ix: int, ident: str) -> Any:
    """``(numbers per key, rows)`` of ``<ident>.idx``; None if absent; False if damaged."""
    try:
        raw = read_at(ix, f"{ident}.idx", Path(f"{ident}.idx"), LIMIT)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    if len(raw) < HEADER.size:
        return False
    magic, dims, _ = HEADER.unpack_from(raw)
    if magic != MAGIC or not 0 < dims <= MAX_NUMBERS:
        return False
    size = row_size(dims)
    end = HEADER.size + (len(raw) - HEADER.size) // size * size  # a torn last row is left out
    return dims, raw[HEADER.size: end]


def load_all(ix: Optional[int]) -> tuple[dict, set]:
    """Every index file's ``(numbers per key, rows)`` by id, and the ids of those damaged."""
    tables, damaged = {}, set()
    for name in os.listdir(ix) if ix is not None else ():
        ident = name[: -len(".idx")]
        if not (name.endswith(".idx") and _ID.fullmatch(ident)):
            continue
        table = load(ix, ident)
        if table:
            tables[ident] = table
        elif table is False:
            damaged.add(ident)
    return tables, damaged


def names(rows: bytes, dims: int) -> list:
    """The entry file names the rows point at, in order."""
    size = row_size(dims)
    return [rows[end - 16: end].hex() + ".json" for end in range(size, len(rows) + 1, size)]


def stamp(ix: int) -> Optional[tuple[int, int]]:
    try:
        raw = read_at(ix, "stamp", Path("stamp"), STAMP.size)
    except OSError:
        return None
    return STAMP.unpack(raw) if len(raw) == STAMP.size else None


def unusable(ix: Optional[int]) -> set:
    try:
        raw = read_at(ix, "unusable", Path("unusable"), LIMIT) if ix is not None else b""
    except OSError:
        return set()
    return {n for n in raw.decode("ascii", "replace").split("\n") if _ENTRY.fullmatch(n)}


def replace(ix: int, name: str, data: bytes) -> None:
    """Replace ``name`` whole, through a temporary and a rename (a reader sees one or the other)."""
    tmp = temporary_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=ix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=ix, dst_dir_fd=ix)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=ix)
        raise


def write_table(ix: int, ident: str, dims: int, rows: bytes) -> None:
    replace(ix, f"{ident}.idx", HEADER.pack(MAGIC, dims, 0) + rows)


def append(ix: int, ident: str, dims: int, row: bytes) -> bool:
    """Append ``row`` in one write (the caller holds the lock); False when the file had to be
    repaired first (then only bringing the index up to date restores the rows it lost)."""
    fd = open_at(ix, f"{ident}.idx", os.O_RDWR | os.O_CREAT, Path(f"{ident}.idx"))
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER.size, 0)
        whole = True
        if len(head) < HEADER.size or HEADER.unpack(head)[:2] != (MAGIC, dims):
            whole = size == 0
            os.ftruncate(fd, 0)
            os.pwrite(fd, HEADER.pack(MAGIC, dims, 0), 0)
            size = HEADER.size
        elif (size - HEADER.size) % len(row):
            size -= (size - HEADER.size) % len(row)  # a torn row of a writer that died
            os.ftruncate(fd, size)
        if os.pwrite(fd, row, size) != len(row):
            os.ftruncate(fd, size)
            raise OSError(f"the disk took only part of a row of {ident}.idx")
        return whole
    finally:
        os.close(fd)


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
