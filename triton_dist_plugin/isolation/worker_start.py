"""How an isolation worker's process begins: forked from this one while that is safe, else a
fresh ``python -I`` interpreter.

A fresh interpreter imports torch and Triton again (1.5-2.5 s), and a first tuning waits for it
whenever its kernel is decorated shortly before its first launch, as scripts do. A fork has both
already, in milliseconds. ``fork_checks`` says when it is safe (and why not: the worker is then a
fresh interpreter, as the report's isolation note says). A forked worker that fails to become
ready (within ``FORKED_READY_S``) is replaced by a fresh interpreter: the fork only ever saves time.

The forked child keeps nothing of this process that could act: signals wait (blocked across the
fork) until it has restored the default handlers; it closes every file descriptor but its socket
and standard streams (as ``close_fds`` does, so it holds no listening socket, pipe or lock file of
its parent); it drops tracers, logging handlers and warnings made errors, keeps one torch thread
(its parent's pool is gone), and puts the plugin's patches away (``IN_CHILD``: plain Triton, as
the fresh interpreter's ``TRITON_DIST_PLUGIN_DISABLE``); it never returns into its parent's code,
ending with ``os._exit`` and the status a fresh interpreter would end with. It runs each
candidate through the kernel's own ``JITFunction``, as the fresh interpreter does. What it cannot
avoid: hooks libraries registered with ``os.register_at_fork`` run, in both processes, as at any
fork (a data loader's, say).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Optional

from .._lifetime import die_with_parent
from . import fork_checks, isolate_source
from .isolate_worker import BOOTSTRAP

FORK_ENV = fork_checks.FORK_ENV
NAME = b"tdp-isolation"  # the worker's process name (``ps -o comm``, ``top``), however it started
FORKED_READY_S = 30.0  # a forked worker not ready by then (its job's imports, its GPU context) is replaced
_serving = False  # True in a forked worker


#: What a forked child runs before it serves, to be as the fresh interpreter is (the switch layer
#: puts its patches away here: ``activation``).
IN_CHILD: list = []


def serving() -> bool:
    """Whether this process is a forked worker: a decorator its parent bound before the fork
    still reaches the plugin's wrapper here, which must start no worker of its own."""
    return _serving


def launch(theirs: socket.socket, ours: socket.socket, refusal: Optional[str] = None) -> tuple[Any, str]:
    """Start a worker on ``theirs`` (its end of the socket pair; the caller closes it after):
    ``(process, how)``, the process as ``subprocess.Popen`` shows one, and how it began.
    ``refusal``: why not to fork it (a forked one that failed to start, say)."""
    path = isolate_source.search_path()[0]
    refusal = refusal or fork_checks.refusal()
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
        if self.poll() is None:  # not reaped (by us, or by anyone: then poll says so), so the pid is still ours
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _fork(theirs: socket.socket, ours: socket.socket, path: list[str]) -> Forked:
    import signal
    import warnings

    for stream in (sys.stdout, sys.stderr):  # else the child holds, and may write again, what is buffered
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing buffered to repeat
            pass
    parent = os.getpid()
    # Signals wait until the child has put its parent's handlers away (a group's SIGTERM must not
    # run the user's shutdown code in the worker); the parent gets its own back at once.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = -1
    try:
        with warnings.catch_warnings():
            # 3.12+ warns of a fork with threads, counting native ones (a BLAS pool): the child
            # never uses them (one torch thread there, ``_as_fresh``).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            try:
                _become_worker(theirs.fileno(), ours, parent, path, mask)
            except BaseException as exc:  # noqa: BLE001 - never back into the parent's code
                _tell(theirs.fileno(), f"the forked worker could not start ({type(exc).__name__}: {exc})")
                os._exit(1)
            os._exit(_serve(theirs.fileno(), parent))
    finally:
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return Forked(pid)


def _serve(fd: int, parent: int) -> int:  # pragma: no cover - child
    """The worker's life, and its exit status, as a fresh interpreter's would be."""
    from .isolate_worker import serve

    try:
        serve(fd, parent)
    except SystemExit as exc:  # a candidate that exits: its status, as the fresh interpreter ends with
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - an uncaught error, as the interpreter ends with it
        return 1
    return 0


def _tell(fd: int, reason: str) -> None:  # pragma: no cover - child
    """Say why this worker never became one: its owner reports the kernel as unisolated with it."""
    try:
        from multiprocessing.connection import Connection

        from .isolate_worker import put

        put(Connection(fd), ("unisolated", reason))
    except BaseException:  # noqa: BLE001 - its owner still sees the socket close
        pass


def _become_worker(fd: int, ours: socket.socket, parent: int, path: list[str],
                   mask: Any) -> None:  # pragma: no cover - child
    """Let go of the parent, then take signals again: what ``_serve`` runs next is the worker."""
    import signal

    global _serving
    _serving = True
    if not die_with_parent(parent, NAME):  # the fork came from the main thread; the socket is watched as well
        os._exit(0)
    _let_go_of_parent(fd, ours)
    _as_fresh(path)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _let_go_of_parent(fd: int, ours: socket.socket) -> None:  # pragma: no cover - child
    """Nothing of the parent's that could act stays: its files, handlers, tracers."""
    import faulthandler
    import gc
    import signal

    gc.freeze()  # the parent's objects are never collected here: no finaliser of theirs runs on an fd reused below
    signal.set_wakeup_fd(-1)  # an event loop's: an fd number about to be closed, and perhaps reused
    # Its writes go to fds of the parent's, about to be closed. (A dump timer's thread did not come
    # along: cancelling it would wait forever on that thread's lock.)
    faulthandler.disable()
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
    worker's path, one torch thread, and the plugin's patches put away."""
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
    torch = sys.modules.get("torch")
    if torch is not None:  # a CPU thread pool of the parent's is gone: using it would wait forever
        torch.set_num_threads(1)
    for step in IN_CHILD:  # plain Triton, as the fresh interpreter's TRITON_DIST_PLUGIN_DISABLE gives
        step()
