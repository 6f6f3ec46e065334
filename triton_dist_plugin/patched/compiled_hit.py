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
import contextlib
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
from ..compiling import prestart

COMPILED_ENV = "TRITON_DIST_COMPILED_HIT"
NAME = "_tdp_hit"
SOURCE = Path(__file__).with_name("_hit.c")
BUILD_TIMEOUT_S = 120.0

#: Files an NVIDIA driver puts in place: ``start`` builds ahead only where one is (no CUDA call).
_NVIDIA_DRIVER = ("/proc/driver/nvidia/version", "/dev/nvidiactl")
_lock = threading.Lock()
_module: list = []  # the loaded module once built (or [None] once it could not be)
_builder: list = []  # holds True once ``start`` has begun the build in its side thread
why_not = ""  # why the compiled path is not in use, if it was tried


def wanted() -> bool:
    """Whether a tuned launch here would use ``Hit``: the direct launcher's conditions, and the setting."""
    from . import direct

    return bool(settings.value(COMPILED_ENV)) and direct.releases_usable()


def start() -> None:
    """Build the module (or find it built) in a thread, now, so that it is ready by the first cache
    hit (called at activation and decoration, beside ``prestart.prestart``). No tuning waits
    for it; the first hit does while it still builds, and a fork of the isolation worker does too
    (it holds a lock and a compiler while it works). It imports nothing: loading is the first hit's."""
    if _module or _builder or not wanted() or not any(os.path.exists(p) for p in _NVIDIA_DRIVER):
        return  # (without an NVIDIA driver nothing launches here: the first hit, if any, builds it)
    _builder.append(True)
    prestart.start_side("tdp-compiled-hit", _prepare)


def module() -> Optional[ModuleType]:
    """The compiled module, built (or found in Triton's cache) and loaded on the first call; None
    where it cannot be built or loaded here, or is not wanted (``TRITON_DIST_COMPILED_HIT`` is read then)."""
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


def _prepare() -> None:
    """``start``'s thread: the module's file in Triton's cache, built if missing (``module`` says
    what went wrong, if anything, when it tries again)."""
    with _lock:
        if not _module:
            _cached(build=True)


def _after_fork() -> None:
    """A child forked while the build held the lock (a user's ``multiprocessing`` pool) gets a free
    lock and builds, or finds, the module itself."""
    global _lock
    _lock = threading.Lock()
    _builder.clear()
    _running.clear()  # the parent's compiler, not this process's to stop


os.register_at_fork(after_in_child=_after_fork)


def _cached(build: bool) -> Optional[str]:
    """The module's file in Triton's cache (keyed by its source and this Python), built into it if
    missing and ``build``."""
    from triton.runtime.cache import get_cache_manager

    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), sys.version.encode(), suffix.encode(),
                                      include.encode()])).hexdigest()
    cache = get_cache_manager(key)
    path = cache.get_file(NAME + suffix)
    return path if path is not None or not build else _build(cache, include, NAME + suffix)


def _load() -> ModuleType:
    path = _cached(build=True)
    try:
        return _loaded(path)
    except ImportError:  # a file cut short, or not ours: built again, and put in its place
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return _loaded(_cached(build=True))


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
                _end(build)
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
        _end(build)


def _end(build: subprocess.Popen) -> None:
    """Stop the compiler driver so that it stops its own passes and removes its temporary files
    (a SIGKILL would leave both behind), killing it only if it does not end within a second."""
    build.terminate()
    try:
        build.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        build.kill()


def _loaded(path: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    loaded = importlib.util.module_from_spec(spec)
    loader.exec_module(loaded)
    import torch

    loaded.configure(torch.Tensor, torch.nn.Parameter, getattr(_compat.knobs, "HookChain", None), _again)
    return loaded


def _again(instance, grid, args: tuple, kwargs: dict):
    """``KernelInterface.__getitem__``'s lambda, for the calls ``Launch`` leaves to it (``grid`` or
    ``warmup`` among the keywords: the lambda's own error)."""
    return instance.run(grid=grid, warmup=False, *args, **kwargs)  # noqa: B026 - the lambda's very form
