"""The cache-hit launch in compiled code (``_hit.c``), built once per machine as Triton builds its
own launchers: the system C compiler, Python's headers, the result kept in Triton's cache.

A tuned launch that went through ``launch._fast_run`` and ``direct.Launcher`` in Python spends
most of its host time on interpreter frames that answer the same questions every call (the raw
key, the cache check, the guard, the entry): ``Hit`` does those steps in C and calls Triton's C
launcher itself, and hands anything it does not serve to that Python path, unchanged. It is used
only where the direct launcher is (a GPU driver, a known Triton release) and
``TRITON_DIST_COMPILED_HIT`` is on. The build starts in a thread at activation or decoration
(``forked_compile.prestart``), so it overlaps the first tuning; a machine without a C compiler or
Python's headers keeps the Python path and says why in ``why_not``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional

from .. import _compat, settings

COMPILED_ENV = "TRITON_DIST_COMPILED_HIT"
NAME = "_tdp_hit"
SOURCE = Path(__file__).with_name("_hit.c")
BUILD_TIMEOUT_S = 120.0

_lock = threading.Lock()
_module: list = []  # the loaded module once built (or [None] once it could not be)
why_not = ""  # why the compiled path is not in use, if it was tried


def wanted() -> bool:
    """Whether a tuned launch here would use ``Hit``: the direct launcher's conditions, and the setting."""
    from . import direct

    return bool(settings.value(COMPILED_ENV)) and direct.releases_usable()


def module() -> Optional[ModuleType]:
    """The compiled module, built (or found in Triton's cache) on the first call; None where it
    cannot be built or loaded here, or is not wanted."""
    global why_not
    if _module:
        return _module[0]
    with _lock:
        if not _module:
            loaded = None
            if wanted():
                try:
                    loaded = _load()
                except Exception as exc:  # noqa: BLE001 - no compiler, no headers, a full disk: Python's path serves
                    why_not = f"{type(exc).__name__}: {exc}"
            else:
                why_not = "not wanted here (interpreter, Triton release, or TRITON_DIST_COMPILED_HIT=0)"
            _module.append(loaded)
    return _module[0]


def _load() -> ModuleType:
    from triton.runtime.cache import get_cache_manager

    source = SOURCE.read_bytes()
    include = sysconfig.get_paths()["include"]
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang, or $CC) to build the compiled cache-hit path")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), suffix.encode(), include.encode()])).hexdigest()
    cache = get_cache_manager(key)
    path = cache.get_file(NAME + suffix)
    if path is None:
        with tempfile.TemporaryDirectory(prefix="tdp-hit-") as tmp:
            out = Path(tmp, NAME + suffix)
            subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", str(out)],
                           check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)
            path = cache.put(out.read_bytes(), NAME + suffix, binary=True)
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    loaded = importlib.util.module_from_spec(spec)
    loader.exec_module(loaded)
    import torch

    loaded.configure(torch.Tensor, torch.nn.Parameter, getattr(_compat.knobs, "HookChain", None))
    return loaded


def prebuild() -> None:
    """``module()``, for ``forked_compile.prestart``'s thread."""
    module()
