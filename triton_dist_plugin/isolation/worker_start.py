"""How an isolation worker's process begins: forked from this one while that is safe, else a
fresh ``python -I`` interpreter.

A fresh interpreter imports torch and Triton again (1.5-2.5 s), and a first tuning waits for it
whenever its kernel is decorated shortly before its first launch, as scripts and libraries do. A
fork has both already, in milliseconds. It is safe only before this process has initialised a
GPU driver (a CUDA driver initialised before a fork is unusable in the child) and while no other
Python thread could hold a lock the child needs; ``fork_refusal`` says why not, and the worker is
then a fresh interpreter as before (``TRITON_DIST_AUTOTUNE_ISOLATE_FORK=0``: always). Either way
the report's isolation note says which.

The forked child keeps nothing of this process that could act: it closes every file descriptor but
its socket and standard streams (as ``close_fds`` does, so it holds no listening socket, pipe or
lock file of its parent), restores default signal handlers, drops logging handlers and warnings made errors, drops
tracers, forgets modules whose import the fork interrupted (imported again, if a kernel needs
them, from ``sys.path`` less the working directory, where no kernel decorated starts a worker of
its own: ``serving``), and never returns into its parent's code: it ends with ``os._exit``. It
runs each candidate through the kernel's own ``JITFunction``, as the fresh interpreter does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Optional

from .. import settings
from . import isolate_source
from .isolate_worker import BOOTSTRAP

FORK_ENV = "TRITON_DIST_AUTOTUNE_ISOLATE_FORK"
NAME = b"tdp-isolation"  # the worker's process name (``ps -o comm``, ``top``), however it started
_JOIN_S = 10.0  # the longest a fork waits for the plugin's own start-up threads (``forked_compile.prestart``)
_CUDA_ERROR_NOT_INITIALIZED = 3
#: The plugin's own threads that a child never needs anything of: they only send to, or time the
#: release of, a worker the child knows nothing of (``isolate._forget_after_fork``).
_HARMLESS = frozenset({"tdp-isolation-send", "tdp-isolation-idle"})
_HEAP_MIB = 2048  # above this much private memory (a model loaded, say), a fresh interpreter costs less
_serving = False  # True in a forked worker


def serving() -> bool:
    """Whether this process is a forked worker: its kernels' modules, imported here with the
    plugin's patches still on, must start no worker of their own."""
    return _serving


def launch(theirs: socket.socket, ours: socket.socket) -> tuple[Any, str]:
    """Start a worker on ``theirs`` (its end of the socket pair; the caller closes it after):
    ``(process, how)``, the process as ``subprocess.Popen`` shows one, and how it began."""
    path = isolate_source.search_path()[0]
    refusal = fork_refusal()
    if refusal is None:
        try:
            return _fork(theirs, ours, path), "forked"
        except OSError as exc:
            refusal = f"the fork failed ({exc})"
    # Linux sends the parent-death signal when the *thread* that started the worker ends: only
    # the main thread lasts as long as the process (from others, the worker's watch alone serves).
    pdeathsig = threading.current_thread() is threading.main_thread()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package, above isolation/
    argv = [str(theirs.fileno()), str(os.getpid()), "1" if pdeathsig else "0", package, *path]
    env = {**os.environ, "TRITON_DIST_PLUGIN_DISABLE": "1"}  # plain Triton there: no tuning in the worker
    proc = subprocess.Popen([sys.executable, "-I", "-c", BOOTSTRAP, *argv], pass_fds=[theirs.fileno()],
                            env=env, stdin=subprocess.DEVNULL)
    return proc, f"started as a fresh interpreter ({refusal})"


def fork_refusal() -> Optional[str]:
    """Why this process may not fork its worker now; None when it may."""
    if not settings.value(FORK_ENV):
        return f"{FORK_ENV}=0"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return "forks only on Linux"
    if threading.current_thread() is not threading.main_thread():
        return "started from a thread other than the main one"
    from ..compiling import forked_compile

    forked_compile.prestarted(_JOIN_S)  # the plugin's own threads end first: they hold locks while they work
    others = sorted(t.name for t in threading.enumerate()
                    if t is not threading.current_thread() and t.name not in _HARMLESS)
    if others:
        return f"other threads run in this process ({', '.join(others[:3])})"
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
            libraries = {line.split()[-1] for line in maps if line.rstrip().endswith(".so") or ".so." in line}
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


class Forked:
    """What the worker's owner uses of ``subprocess.Popen``, for a forked child."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (a SIGCHLD handler): as Popen says then
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("isolation worker", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:  # never reaped yet, so the pid is still this child's
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _fork(theirs: socket.socket, ours: socket.socket, path: list[str]) -> Forked:
    import warnings

    for stream in (sys.stdout, sys.stderr):  # else the child holds, and may write again, what is buffered
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing buffered to repeat
            pass
    parent = os.getpid()
    with warnings.catch_warnings():
        # 3.12+ warns of a fork with threads, counting native ones (a BLAS pool) we have judged safe.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _become_worker(theirs.fileno(), ours, parent, path)
        except BaseException as exc:  # noqa: BLE001 - never back into the parent's code
            _tell(theirs.fileno(), f"the forked worker could not start ({type(exc).__name__}: {exc})")
        finally:
            os._exit(code)
    return Forked(pid)


def _tell(fd: int, reason: str) -> None:  # pragma: no cover - child
    """Say why this worker never became one: its owner reports the kernel as unisolated with it."""
    try:
        from multiprocessing.connection import Connection

        from .isolate_worker import put

        put(Connection(fd), ("unisolated", reason))
    except BaseException:  # noqa: BLE001 - its owner still sees the socket close
        pass


def _become_worker(fd: int, ours: socket.socket, parent: int, path: list[str]) -> None:  # pragma: no cover - child
    import ctypes
    import signal

    global _serving
    _serving = True
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the fork came from the main thread
        libc.prctl(15, NAME)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass  # the socket and the parent are watched as well
    if os.getppid() != parent:
        os._exit(0)
    _let_go_of_parent(fd, ours)
    _as_fresh(path)
    from .isolate_worker import serve

    serve(fd, parent)


def _let_go_of_parent(fd: int, ours: socket.socket) -> None:  # pragma: no cover - child
    """Nothing of the parent's that could act stays: its files, handlers, tracers."""
    import faulthandler
    import gc
    import signal

    gc.freeze()  # the parent's objects are never collected here: no finaliser of theirs runs on an fd reused below
    faulthandler.disable()  # it writes to fds of the parent's, about to be closed
    faulthandler.cancel_dump_traceback_later()
    for number in signal.valid_signals():
        try:
            faulthandler.unregister(number)
        except (RuntimeError, ValueError, OSError):  # the fatal ones, which disable() covered
            pass
    ours.detach()  # the parent's end: closed with the rest, and never again through its object
    for entry in os.listdir("/proc/self/fd"):
        number = int(entry)
        if number > 2 and number != fd:
            try:
                os.close(number)
            except OSError:
                pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own, for its life
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - a capture's stand-in would be lost
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    signal.set_wakeup_fd(-1)  # an event loop's: an fd number closed above, perhaps reused
    for number in signal.valid_signals():
        try:
            if callable(signal.getsignal(number)):  # the parent's Python handlers: its code, not ours
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the parent's to handle; we die with it
    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)  # type: ignore[arg-type]
    threading.setprofile(None)  # type: ignore[arg-type]


def _as_fresh(path: list[str]) -> None:  # pragma: no cover - child
    """What a fresh interpreter would have: no warning made an error, no logging handler, the
    worker's path, and no module whose import the fork interrupted."""
    import logging
    import warnings

    kept = [f for f in warnings.filters if f[0] != "error"]  # the parent's "error" must not fail a candidate here
    warnings.resetwarnings()
    for action, message, category, module, line in kept:  # the libraries' own filters stay, as they would
        warnings.filterwarnings(action, getattr(message, "pattern", message) or "", category,
                                getattr(module, "pattern", module) or "", line, append=True)
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            logger.handlers.clear()  # not closed: their files were the parent's
    os.environ["TRITON_DIST_PLUGIN_DISABLE"] = "1"  # for any process the kernels' modules start
    sys.path[:] = path
    for name, module in list(sys.modules.items()):  # run again here, in full, if a kernel needs them
        if getattr(getattr(module, "__spec__", None), "_initializing", False) and not (
                name == "triton_dist_plugin" or name.startswith("triton_dist_plugin.")):
            del sys.modules[name]
