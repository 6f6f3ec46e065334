"""The isolation workers' zygote: a process forked from this one while that is safe, which forks
each later worker from itself.

This process may fork a worker only while that is safe (``fork_checks``): before the GPU is in use,
from the main thread alone, with no module being imported. A worker needed after that (a kernel
decorated once its inputs are on the GPU, or as a library is imported; one that replaces a crashed
worker, or one released when tuning went idle) would be a fresh interpreter, importing torch and
Triton again: seconds. So, while a fork is safe (at activation, or as the first kernel to isolate
is decorated), the plugin forks the zygote (``worker_start.start_zygote``): it lets go of its parent
as a forked worker does, never uses the GPU, and sleeps until asked for a worker, which it forks
from itself in milliseconds with torch and Triton imported. Idle, it holds no GPU memory and wakes
for nothing. It dies with this process (the parent-death signal, and its socket's end), and its
workers die with it.

One ``SOCK_SEQPACKET`` socket pair: this process sends ``("spawn", path)`` with the worker's end
of its own socket attached, or ``("kill", pid)``; the zygote answers ``("spawned", pid)`` and tells
of each worker's end as it reaps it (``("exited", pid, status)``). Only the zygote waits on its
children, so it signals a pid only while that process (or its zombie) is still there.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import threading
import time
from typing import Callable, Optional

_MESSAGE = 1 << 16


def tie(name: bytes) -> None:
    """This process dies with the one that forked it (Linux's parent-death signal), and is named
    ``name`` (``ps -o comm``, ``top``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(15, name)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass  # the sockets and the parent are watched as well


class Zygote:
    """This process's side: ``spawn`` a worker, and its life as ``subprocess.Popen`` shows one."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock, self.lock = pid, sock, threading.Lock()
        self.exited: dict[int, int] = {}
        self.gone = False

    def spawn(self, theirs: socket.socket, path: list[str]) -> Optional[Spawned]:
        """A worker forked from the zygote on ``theirs``; None when the zygote is gone."""
        with self.lock:
            try:
                socket.send_fds(self.sock, [pickle.dumps(("spawn", path))], [theirs.fileno()])
                deadline = time.monotonic() + 10
                while (message := self._next(deadline - time.monotonic())) is not None:
                    if message[0] == "spawned":
                        return Spawned(self, message[1])
            except OSError:
                pass
            self.gone = True
            return None

    def ask(self, message: tuple) -> None:
        with self.lock:
            try:
                self.sock.send(pickle.dumps(message))
            except OSError:
                self.gone = True

    def status(self, pid: int) -> Optional[int]:
        """``pid``'s exit status once the zygote reaped it; a killed one's when the zygote is gone."""
        with self.lock:
            while not self.gone and self._next(0) is not None:
                pass
            return self.exited.get(pid, -signal.SIGKILL if self.gone else None)

    def _next(self, timeout: float) -> Optional[tuple]:
        """The next message other than an exit (those are noted); None after ``timeout``."""
        while select.select([self.sock], [], [], max(0.0, timeout))[0]:
            data = self.sock.recv(_MESSAGE)
            try:
                message = pickle.loads(data)
            except Exception:  # noqa: BLE001 - its end closed (b""), or it failed to start and said so
                self.gone = True
                return None
            if message[0] != "exited":
                return message
            self.exited[message[1]] = message[2]
            timeout = 0.0
        return None

    def forget(self) -> None:
        """Let go of the zygote: at exit, or in a child forked from this process (not its own;
        no lock taken: another thread of the parent may have held it at the fork)."""
        self.gone = True
        self.sock.close()


class Spawned:
    """What the worker's owner uses of ``subprocess.Popen``, for a worker the zygote forked."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.zygote.status(self.pid)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("isolation worker", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self.zygote.ask(("kill", self.pid))


def main(fd: int, parent: int, become: Callable[[int, list], None],
         serve: Callable[[int, int], int]) -> int:  # pragma: no cover - the zygote
    """The zygote's life: fork a worker when asked (``become`` readies it, ``serve`` is its life),
    reap each, and end when its parent's end of the socket closes."""
    control = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    for end in (wake_r, wake_w):
        os.set_blocking(end, False)
    signal.set_wakeup_fd(wake_w)  # a child's end wakes the select below: nothing polls
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    while True:
        readable = select.select([control, wake_r], [], [])[0]
        if wake_r in readable:
            while _drained(wake_r):
                pass
        _reap(control, children)
        if control not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, _MESSAGE, 1)
        except OSError:
            return 0
        if not data:  # its parent is gone
            return 0
        request = pickle.loads(data)
        if request[0] == "spawn" and fds:
            pid = _fork(fds[0], request[1], [control.fileno(), wake_r, wake_w], become, serve)
            children.add(pid)
            control.send(pickle.dumps(("spawned", pid)))
        elif request[0] == "kill" and request[1] in children:  # not reaped: the pid is still its child's
            os.kill(request[1], signal.SIGKILL)
        for extra in fds:
            os.close(extra)


def _drained(fd: int) -> bool:  # pragma: no cover - the zygote
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def _reap(control: socket.socket, children: set) -> None:  # pragma: no cover - the zygote
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        children.discard(pid)
        try:
            control.send(pickle.dumps(("exited", pid, os.waitstatus_to_exitcode(status))))
        except OSError:
            return


def _fork(fd: int, path: list, own: list, become: Callable[[int, list], None],
          serve: Callable[[int, int], int]) -> int:  # pragma: no cover - the zygote
    """Fork a worker on ``fd``; ``own``: the zygote's descriptors, which the worker closes."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = os.fork()
    if pid == 0:
        try:
            zygote = os.getppid()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for number in own:
                os.close(number)
            become(fd, path)
            if os.getppid() != zygote:  # the zygote died before the parent-death signal was set
                os._exit(0)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            code = serve(fd, zygote)
        except BaseException:  # noqa: BLE001 - never back into the zygote's loop
            code = 1
        os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid
