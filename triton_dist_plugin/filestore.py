"""The built-in cache store: one JSON file per entry, written atomically under a lock.

The plugin ``tdp.store`` implements ``tdp_cache_get``/``tdp_cache_put`` over ``entry.path``
(``trylast``, so any other store is asked first; unregister it to keep nothing on disk). The
JSON helpers live here, below the bus that registers the store; the directory scans (CLI,
manifests, frozen mode's nearest key) use them to read the files directly.

Writes take a file lock (``filelock``) and go through a temporary file and ``os.replace``, so
readers never see half a file and concurrent writers never interleave; a file that cannot be
read is reported, ignored, and replaced by the next write. Data is JSON, never pickle.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from filelock import FileLock

from .hookspecs import hookimpl

NAME = "tdp.store"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` under a lock, through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with_suppress(os.unlink, tmp)
            raise


def with_suppress(fn: Callable, *args: Any) -> None:
    try:
        fn(*args)
    except OSError:
        pass


def read_json(path: Path) -> Optional[dict]:
    """The JSON object at ``path``; None if absent; None with a warning if unreadable or corrupt
    (not UTF-8, not JSON, nested too deeply to parse, or not an object)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"cannot read autotune cache {path}: {exc}; it will be re-tuned", RuntimeWarning, stacklevel=2)
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


class FileStore:
    """Entries as files under the cache root (``TRITON_DIST_AUTOTUNE_DIR``)."""

    @hookimpl(trylast=True)
    def tdp_cache_get(self, entry: Any) -> Optional[dict]:
        return read_json(entry.path)

    @hookimpl(trylast=True)
    def tdp_cache_put(self, entry: Any, record: dict) -> None:
        write_json_atomic(entry.path, record)
