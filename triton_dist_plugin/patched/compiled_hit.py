"""The cache-hit launch in compiled code (``_hit.c``), built once per machine as Triton builds its
own launchers: the system C compiler, Python's headers, the result kept in Triton's cache.

A tuned launch that went through ``launch._fast_run`` and ``direct.Launcher`` in Python spends
most of its host time on interpreter frames that answer the same questions every call (the raw
key, the cache check, the guard, the entry): ``Hit`` does those steps in C and calls Triton's C
launcher itself, and hands anything it does not serve to that Python path, unchanged. It is used
only where the direct launcher is (a GPU driver, a known Triton release) and
``TRITON_DIST_COMPILED_HIT`` is on. The build starts in a thread of its own at activation or
decoration (``start``), so it overlaps the first tuning, which does not wait for it; a machine
without a C compiler or Python's headers keeps the Python path and says why in ``why_not``. The
module is loaded from Triton's cache as Triton loads its launchers from there; one that does not
load (cut short, another build's) is built again.
"""

from __future__ import annotations

import atexit
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
_builder: list = []  # the thread ``start`` began, if any
why_not = ""  # why the compiled path is not in use, if it was tried


def wanted() -> bool:
    """Whether a tuned launch here would use ``Hit``: the direct launcher's conditions, and the setting."""
    from . import direct

    return bool(settings.value(COMPILED_ENV)) and direct.releases_usable()


def start() -> None:
    """Build (or load) the module in a thread of its own, now, so that it is ready by the first
    cache hit (called at activation and decoration, beside ``forked_compile.prestart``; nothing
    waits for it but the first hit, and only while it is still building)."""
    if _module or _builder or not wanted():
        return
    _builder.append(threading.Thread(target=module, name="tdp-compiled-hit", daemon=True))
    _builder[0].start()


def module() -> Optional[ModuleType]:
    """The compiled module, built (or found in Triton's cache) on the first call; None where it
    cannot be built or loaded here, or is not wanted (``TRITON_DIST_COMPILED_HIT`` is read then)."""
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
                    why_not = f"{type(exc).__name__}: {exc}"[:500]
            else:
                why_not = "not wanted here (interpreter, Triton release, or TRITON_DIST_COMPILED_HIT=0)"
            _module.append(loaded)
    return _module[0]


def _after_fork() -> None:
    """A child forked while the build held the lock (a user's ``multiprocessing`` pool) gets a free
    lock and builds, or finds, the module itself."""
    global _lock
    _lock = threading.Lock()
    _builder.clear()
    _running.clear()  # the parent's compiler, not this process's to stop


os.register_at_fork(after_in_child=_after_fork)


def _load() -> ModuleType:
    from triton.runtime.cache import get_cache_manager

    source = SOURCE.read_bytes()
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), suffix.encode(), include.encode()])).hexdigest()
    cache = get_cache_manager(key)
    path = cache.get_file(NAME + suffix)
    if path is not None:
        try:
            return _loaded(path)
        except ImportError:  # a file cut short or not ours: built again, and put in its place
            pass
    return _loaded(_build(cache, include, NAME + suffix))


def _build(cache, include: str, name: str) -> str:
    """Compile ``_hit.c`` in a temporary directory and put the result in Triton's cache (atomically)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang, or $CC) to build the compiled cache-hit path")
    with tempfile.TemporaryDirectory(prefix="tdp-hit-") as tmp:
        out = Path(tmp, name)
        command = [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", str(out)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as build:
            _running.append(build)
            try:
                said, _ = build.communicate(timeout=BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                build.kill()
                raise
            finally:
                _running.remove(build)
        if build.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {(said or '').strip()[-300:]}")
        return cache.put(out.read_bytes(), name, binary=True)


_running: list = []  # the compiler while it runs (a process exiting meanwhile stops it: ``_stop``)


@atexit.register
def _stop() -> None:
    for build in list(_running):
        build.kill()


def _loaded(path: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    loaded = importlib.util.module_from_spec(spec)
    loader.exec_module(loaded)
    import torch

    loaded.configure(torch.Tensor, torch.nn.Parameter, getattr(_compat.knobs, "HookChain", None))
    return loaded
