"""Whether this process may fork its isolation worker now (``worker_start``), and why not.

A fork is safe only from the main thread, with no other Python thread that could hold a lock the
child needs (the plugin's start-up threads are waited for), with no module half imported (the
child would hold it half run, and running it again would repeat what it did), before any GPU
driver is initialised here (a CUDA driver initialised before a fork is unusable in the child), and
while this process's own memory is small enough to share (a fork shares each page until either
side writes it). ``TRITON_DIST_AUTOTUNE_ISOLATE_FORK=0`` never forks.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Optional

from .. import settings

FORK_ENV = "TRITON_DIST_AUTOTUNE_ISOLATE_FORK"
#: The plugin's own threads that a child never needs anything of: they only send to, read from, or
#: time the release of, a worker the child knows nothing of (``isolate._forget_after_fork``).
_HARMLESS = frozenset({"tdp-isolation-send", "tdp-isolation-read", "tdp-isolation-idle"})
_HEAP_MIB = 512  # above this much private memory (a model loaded, say), a fresh interpreter (about 230 MiB) costs less
_JOIN_S = 10.0  # the longest a fork waits for the plugin's own start-up threads (``prestart.prestart``)
_CUDA_ERROR_NOT_INITIALIZED = 3


def refusal() -> Optional[str]:
    """Why this process may not fork its worker now; None when it may."""
    lasting = lasting_refusal()  # the cheap checks, before waiting on anything
    if lasting:
        return lasting
    if threading.current_thread() is not threading.main_thread():
        return "started from a thread other than the main one"
    importing = _importing()
    if importing is not None and importing.split(".")[0] != "triton":  # (Triton's: perhaps the threads' below)
        return f"a module is being imported ({importing})"
    from ..compiling import prestart

    prestart.prestarted(_JOIN_S, side=True)  # the plugin's own threads end first: they hold locks as they work
    importing = _importing()  # what they imported (Triton's driver module, say) is whole now
    if importing is not None:  # the child would have it half run, and running it again repeats what it did
        return f"a module is being imported ({importing})"
    others = sorted(t.name for t in threading.enumerate()
                    if t is not threading.current_thread() and t.name not in _HARMLESS)
    if others:
        return f"other threads run in this process ({', '.join(others[:3])})"
    return _device_in_use()


def _importing() -> Optional[str]:
    """A module other than this package's that is being imported now, if any."""
    return next((name for name, module in list(sys.modules.items())
                 if getattr(getattr(module, "__spec__", None), "_initializing", False)
                 and not (name == "triton_dist_plugin" or name.startswith("triton_dist_plugin."))), None)


def lasting_refusal() -> Optional[str]:
    """Why no fork can be made now or later (the setting, the platform, this process's memory, a
    GPU driver in use), leaving out what holds only for the moment (a thread, an import)."""
    if not settings.value(FORK_ENV):
        return f"{FORK_ENV}=0"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return "forks only on Linux"
    return _large_heap() or _device_in_use()


def _large_heap() -> Optional[str]:
    """Why this process's own memory is too large to share with a fork (each page is shared until
    either side writes it: a model loaded before the kernel was decorated would be copied)."""
    heap = 0
    try:
        with open("/proc/self/status") as status:
            heap = next((int(line.split()[1]) // 1024 for line in status if line.startswith("RssAnon:")), 0)
    except (OSError, ValueError, IndexError):
        pass
    if heap > _HEAP_MIB:
        return f"this process holds {heap} MiB of its own memory (a fork shares it only until it is written)"
    return None


def _device_in_use() -> Optional[str]:
    """Why a GPU driver may already be initialised in this process; None when none can be."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "this process has used the GPU already"
    except Exception:  # noqa: BLE001 - an unusual torch: the driver check below still decides
        pass
    if "torch_npu" in sys.modules:  # not known to be safe after its import: never tried on an NPU
        return "torch_npu is imported"
    try:
        with open("/proc/self/maps") as maps:
            libraries = {line.split(maxsplit=5)[-1].removesuffix(" (deleted)").strip() for line in maps
                         if ".so" in line and len(line.split(maxsplit=5)) == 6}
    except OSError:
        return "the libraries this process loaded cannot be read"
    for path in sorted(libraries):
        name = os.path.basename(path)
        if name.startswith("libcuda.so") and _cuda_initialised(path):
            return "the CUDA driver is initialised in this process"
        if name.startswith(("libamdhip64.so", "libascendcl.so")):
            return f"{name.split('.so')[0]} is loaded"
    return None


def _cuda_initialised(path: str) -> bool:
    """Whether ``cuInit`` ran here: before it, every driver call answers NOT_INITIALIZED (the
    library being loaded, by Triton's helper module say, is not enough to make a fork unsafe)."""
    import ctypes

    try:
        count = ctypes.c_int()
        return ctypes.CDLL(path).cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED
    except (OSError, AttributeError):
        return True  # cannot tell: not safe
