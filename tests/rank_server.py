"""A fork server ("zygote") for the ranks of ``tests/dist_worker.py``: each rank forked, not started afresh.

A rank's own work takes a fraction of a second; starting the Python process that does it (importing
torch, Triton and the plugin) takes 1.3-1.5 CPU-seconds, and the multi-rank tests start about 75
ranks. So each pytest process (each xdist worker) starts, on first use, a server that runs
``dist_worker.py --serve``: dist_worker's module-level code runs there once, as ``__main__``, as in a
rank. For each rank the server forks a child that takes the rank's environment, working directory,
arguments, stdout and stderr, runs ``dist_worker.main`` and exits. Ranks stay separate OS processes
with real gloo groups; ``start_ranks`` hands back one object per rank with ``Popen``'s
``communicate``, ``kill`` and ``returncode``, so ``helpers.run_ranks`` times them out and reports them
as before.

What a fresh process would have that a forked one must be given:

- Its environment, set first: ``os.environ`` (and so the C library's) becomes the rank's. What is
  read from the environment at import is fixed in the server, so a rank is forked only when its
  environment equals the server's but for variables nothing reads at import (``_per_rank``): the
  plugin's own settings, ``TRITON_DIST_*``, but the three ``READ_AT_IMPORT`` (the plugin reads its
  settings when it uses them; a dev check that recorded every ``os.environ`` read while dist_worker
  imports found those alone), and ``HOME``, whose import-time copies ``_take_place`` derives again
  (Triton's default home directory, ``site``'s user directories, ``multiprocessing``'s start
  directory). Any other difference (``TRITON_DIST_AUTOTUNE_ISOLATE``, which activation reads, or
  any variable torch or Triton might read) gets a plain ``subprocess.Popen`` start, as does every rank
  where the server cannot be used (not Linux, or its start-up checks failed). No scenario needs one
  for itself: none has a ``prepare_`` hook, and those that set variables set them after the imports,
  in a fresh rank as in a forked one.
- Its own seeds: ``random`` and numpy's global generator are seeded afresh, and torch's where torch seeds
  it at random at start-up (2.13 does; where it takes a fixed default instead, every rank keeps that, as
  fresh ones would: the server draws nothing from it). The hash seed of
  ``str`` cannot change after start-up, so there are two servers, each with its own: even ranks fork
  from one, odd ranks from the other, so neighbouring ranks differ in it, as separate processes do.
- No threads at the fork: only the forking thread survives one, so a thread pool, a gloo connection or
  a lock held in another thread would be broken in the child. After the imports the server forks one
  probe child (OpenBLAS, loaded with numpy by torch, stops its pool at a fork and restarts it on use)
  and then refuses to serve unless it is down to one OS thread, CUDA and ``torch.distributed`` are
  untouched and the probe found torch's generator as seeded (no random operation ran) and no copy of
  the server's home or directory left once a rank's is taken. Before each fork it counts its threads again.
- No process outlives its parent: the server gets SIGKILL when its pytest process dies
  (``PR_SET_PDEATHSIG``) and kills its ranks and exits when its socket closes; each rank gets SIGKILL
  when the server dies. A rank that hangs is killed by the test (``kill``), through the server, which
  alone may signal it (it has not reaped it yet, so the pid is still that rank's).

A rank's stdout and stderr are anonymous memory files (``memfd``), read once it has exited: nothing is
written to disk, and a chatty rank never blocks on a full pipe. The server's home and working
directory is a temporary directory of its own, removed at exit. (``ps`` shows a forked rank with its
server's command line.)
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

SCRIPT = Path(__file__).resolve().with_name("dist_worker.py")
PER_RANK = frozenset({"HOME", "PYTEST_CURRENT_TEST"})
READ_AT_IMPORT = frozenset({"TRITON_DIST_PLUGIN_DISABLE", "TRITON_DIST_AUTOTUNE_ISOLATE",
                            "TRITON_DIST_AUTOTUNE_FROZEN"})
STARTUP_S = 300  # a server imports what a rank does, on a machine busy with other tests
PR_SET_PDEATHSIG = 1
USABLE = sys.platform == "linux" and all(hasattr(os, f) for f in ("memfd_create", "pidfd_open", "fork"))

plain_starts: list[str] = []  # why each rank started afresh instead (a test reads it)


# The client's side, in the pytest process.


def start_ranks(scenario: str, world: int, port: str, envs: list[dict], cwd) -> list:
    """One handle per rank of ``dist_worker.py SCENARIO RANK WORLD PORT``: a forked rank, or a
    ``subprocess.Popen`` (with text pipes) where it cannot be forked."""
    servers = [_server(parity, envs[parity]) for parity in range(min(world, 2))] if USABLE else []  # both start now
    handles = []
    for rank, env in enumerate(envs):
        argv = [str(SCRIPT), scenario, str(rank), str(world), port]
        server = servers[rank % 2] if servers else None
        why = "not Linux" if server is None else server.why_not(env)
        handle = server.fork(argv, env, cwd) if why is None else None
        if handle is None:
            plain_starts.append(f"{scenario} rank {rank}: {why or server.refused}")
            handle = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        handles.append(handle)
    return handles


_servers: dict[int, _Server] = {}


def _server(parity: int, env: dict) -> _Server:
    if parity not in _servers:
        _servers[parity] = _Server(env)
    return _servers[parity]


def _per_rank(name: str) -> bool:
    """Whether a variable may differ between a rank and its server: nothing reads it at import but
    HOME (see ``_take_place``), pytest's own marker, and the plugin's settings (it reads them when it
    uses them, through ``settings.value``) but those its import and activation read."""
    return name in PER_RANK or name.startswith("TRITON_DIST_") and name not in READ_AT_IMPORT


class _Server:
    """The client's end of one server: starts it (its first fork waits for its imports), forks ranks,
    waits for them and kills them."""

    def __init__(self, env: dict):
        self.home = tempfile.mkdtemp(prefix="tdp-rank-server-")
        self.env = {**{k: v for k, v in env.items() if not _per_rank(k)}, "HOME": self.home}
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.err = os.fdopen(os.memfd_create("rank-server-stderr"), "rb")  # what it says if it fails to start
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), "--serve", str(theirs.fileno()), str(os.getpid())],
                                     pass_fds=[theirs.fileno()], env=self.env, cwd=self.home,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err)
        theirs.close()
        self.ready = False
        self.refused: str | None = None
        self.exited: dict[int, int] = {}  # pid -> return code, as the server reports them
        atexit.register(self.close)

    def why_not(self, env: dict) -> str | None:
        """Why a rank with this environment cannot be forked from this server, or None."""
        differ = sorted(k for k in env.keys() | self.env.keys() if not _per_rank(k) and env.get(k) != self.env.get(k))
        return f"environment differs from the server's in {differ}" if differ else None

    def fork(self, argv: list, env: dict, cwd) -> _Forked | None:
        """A forked rank, or None where the server refuses (``refused`` says why)."""
        if not self.ready and self.refused is None:
            reply = self._reply(time.monotonic() + STARTUP_S, "the rank server's start")
            self.ready = "ready" in reply
            if not self.ready:
                self.err.seek(0)
                self.refused = f"{reply['refused']}: {self.err.read().decode(errors='replace')[-3000:]}"
        if self.refused is not None:
            return None
        out, err = (os.fdopen(os.memfd_create(f"rank-{name}"), "rb") for name in ("stdout", "stderr"))
        request = {"argv": argv, "env": env, "cwd": str(cwd)}
        socket.send_fds(self.sock, [json.dumps(request).encode()], [out.fileno(), err.fileno()])
        reply = self._reply(time.monotonic() + 60, "a fork")
        if "refused" in reply:
            self.refused = reply["refused"]
            return None
        return _Forked(self, reply["forked"], out, err)

    def wait(self, pid: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exited:
            self._receive(deadline, f"rank {pid}")
        return self.exited.pop(pid)

    def kill(self, pid: int) -> None:
        self.sock.send(json.dumps({"kill": pid}).encode())

    def _reply(self, deadline: float, what: str) -> dict:
        """The server's answer to the last request (exit reports that come first are kept)."""
        while "exited" in (message := self._receive(deadline, what)):
            pass
        return message

    def _receive(self, deadline: float | None, what: str) -> dict:
        """The server's next message; an exit report is kept in ``exited``."""
        self.sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            raise subprocess.TimeoutExpired(what, 0) from None
        if not data:
            self.err.seek(0)
            tail = self.err.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"the rank server exited, with its ranks, during {what}:\n{tail}")
        message = json.loads(data)
        if "exited" in message:
            self.exited[message["exited"]] = message["returncode"]
        return message

    def close(self) -> None:
        """Closing the socket ends the server (and kills any rank still running)."""
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        shutil.rmtree(self.home, ignore_errors=True)


class _Forked:
    """A forked rank, with what ``helpers.run_ranks`` uses of ``subprocess.Popen``."""

    def __init__(self, server: _Server, pid: int, out, err):
        self.server, self.pid, self.out, self.err = server, pid, out, err
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.returncode = self.server.wait(self.pid, timeout)
        texts = []
        for f in (self.out, self.err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
            f.close()
        return texts[0], texts[1]

    def kill(self) -> None:
        if self.returncode is None:
            self.server.kill(self.pid)


# The server's side: ``dist_worker.py --serve FD PARENT``, after dist_worker's imports.


def serve(main) -> None:
    """Fork a rank that runs ``main`` for each request on the socket ``FD`` until it closes."""
    fd, parent = int(sys.argv[2]), int(sys.argv[3])
    _die_with(parent)
    sock = socket.socket(fileno=fd)
    refused = _unsafe(home=os.environ["HOME"])
    sock.send(json.dumps({"refused": refused} if refused else {"ready": True}).encode())
    if refused:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)  # the client stops reading it now
    os.close(null)
    gc.freeze()  # what the imports made stays shared with the ranks, not copied on their first collection
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    ranks: dict[int, int] = {}  # pidfd -> pid, until reaped
    while True:
        for ready, _ in poll.poll():
            if ready in ranks:
                pid = ranks.pop(ready)
                poll.unregister(ready)
                os.close(ready)
                status = os.waitpid(pid, 0)[1]
                sock.send(json.dumps({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
            except OSError:
                data = b""
            if not data:  # the pytest process is gone or done
                for pid in ranks.values():
                    os.kill(pid, signal.SIGKILL)
                return
            request = json.loads(data)
            if "kill" in request:
                if request["kill"] in ranks.values():
                    os.kill(request["kill"], signal.SIGKILL)
                continue
            refused = _threads()
            server = os.getpid()
            pid = os.fork() if refused is None else -1
            if pid == 0:
                try:
                    _die_with(server)
                    os.close(sock.fileno())
                    for pidfd in ranks:
                        os.close(pidfd)
                    _rank(main, request, *fds)
                finally:
                    os._exit(70)
            for f in fds:
                os.close(f)
            if refused:
                sock.send(json.dumps({"refused": refused}).encode())
                continue
            pidfd = os.pidfd_open(pid)
            ranks[pidfd] = pid
            poll.register(pidfd, select.POLLIN)
            sock.send(json.dumps({"forked": pid}).encode())


def _die_with(parent: int) -> None:
    """SIGKILL when the parent dies (Linux), and exit now if it has died already."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _threads() -> str | None:
    """Why forking now is unsafe (another thread runs in this process), or None."""
    tasks = os.listdir("/proc/self/task")
    if len(tasks) > 1 or threading.active_count() > 1:
        return f"{len(tasks)} OS threads and {threading.active_count()} Python threads in the server"
    return None


def _unsafe(home: str) -> str | None:
    """Why this server must not fork ranks, or None: checked once, after the imports."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_initialized() or dist.is_initialized():
        return "CUDA or torch.distributed was initialised at import"
    probe = os.fork()
    if probe == 0:  # a rank's set-up in a throwaway child: a fresh generator, and no trace of the server's places
        try:
            fresh = torch.equal(torch.get_rng_state(), torch.Generator().manual_seed(torch.initial_seed()).get_state())
            _take_place({**os.environ, "HOME": "/"}, "/")
            left = _copies_of(home)
            sys.stderr.write(f"the probe rank still holds the server's home in {left}\n" if left else "")
            sys.stderr.write("" if fresh else "torch's generator was used at import\n")
            sys.stderr.flush()
            os._exit(0 if fresh and not left else 1)
        finally:
            os._exit(70)
    status = os.waitstatus_to_exitcode(os.waitpid(probe, 0)[1])
    if status != 0:
        return f"the probe rank failed ({status}; the server's stderr says why)"
    return _threads()


def _copies_of(text: str) -> list[str]:
    """Where a string holding ``text`` is kept (container items, object attributes): the probe rank
    looks for the server's home, which is its working directory too, since a copy made at import
    would be wrong in a rank."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, dict):
            items = obj.items()
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = enumerate(obj)
        else:
            try:
                items = object.__getattribute__(obj, "__dict__").items()
            except Exception:
                continue
        for key, value in list(items):
            if isinstance(value, str) and text in value:
                found.append(f"{type(obj).__name__}[{key!r}]={value!r}")
    return found


def _take_place(env: dict, cwd: str) -> None:
    """Become a process started with ``env`` in ``cwd``: set them, then derive again what the
    imports computed from the server's, and seed afresh what a new process seeds at random."""
    import random
    import site
    import sysconfig

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    site.USER_BASE = site.USER_SITE = None
    site.getusersitepackages()  # from HOME, as at start-up
    if "userbase" in (sysconfig.get_config_vars() or {}):
        sysconfig.get_config_vars()["userbase"] = site.USER_BASE
    if "multiprocessing.process" in sys.modules:
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.getcwd()
    knob = vars(getattr(sys.modules.get("triton.knobs"), "cache_knobs", object)).get("home_dir")
    if knob is not None:  # Triton 3.4+ takes its home directory's default from HOME at import
        knob.default = os.path.expanduser("~/")
    random.seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    torch = sys.modules.get("torch")
    if torch is not None and torch.initial_seed() != torch.Generator().initial_seed():
        torch.default_generator.seed()  # this torch seeds its generator at random in each new process


def _rank(main, request: dict, out: int, err: int) -> None:
    """In the forked child: become the rank and run ``main`` as the interpreter would, then exit."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    _take_place(request["env"], request["cwd"])
    sys.argv = request["argv"]
    sys.orig_argv = [sys.executable, *request["argv"]]
    code = 1
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
