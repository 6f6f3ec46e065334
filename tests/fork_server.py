"""Fork servers ("zygotes") for the processes the tests start: each forked, not started afresh.

Starting a Python process that imports torch costs 1.3-1.5 CPU-seconds, and the suite starts about
200: the ranks of ``tests/dist_worker.py`` (multi-rank tests), and the fresh interpreters other
tests run (``python -c CODE``, ``python SCRIPT``, ``python -m MODULE``, the ``triton-dist-tune``
script) to see what a new process does. So each pytest process (each xdist worker) starts, on first
use, servers of two flavours:

- ``ranks``: runs ``dist_worker.py --serve``; dist_worker's module-level code (torch, Triton, the
  plugin) runs there once, as ``__main__``, as in a rank, and each child runs ``dist_worker.main``.
- ``python``: runs this file with ``--serve``; it imports torch (and numpy, which torch loads) and
  nothing else, so what a child runs imports Triton and the plugin in its own order, as a fresh
  interpreter would. Each child runs its arguments as the interpreter does (``-c``, ``-m`` or a
  script; any other option, such as ``-I`` or ``-W``, gets a plain start): ``sys.argv``, a new
  ``__main__``, ``sys.path`` (the script's directory or ``''`` first, then ``PYTHONPATH``), and at
  the end non-daemon threads joined, ``atexit`` run, the streams flushed and the exit status a fresh
  process would have (a traceback on standard error and 1 for an uncaught exception).

Children stay separate OS processes; ``start``/``start_ranks`` hand back one object per process with
``Popen``'s ``communicate``, ``wait``, ``kill``, ``pid`` and ``returncode``.

What a fresh process would have that a forked one must be given:

- Its environment, set first: ``os.environ`` (and so the C library's) becomes the child's. What is
  read from the environment at import is fixed in the server, so a child is forked only when its
  environment equals the server's but for variables nothing the server imported reads at import
  (``_per_process``): ``HOME``, whose import-time copies ``_take_place`` derives again (Triton's
  default home directory, ``site``'s user directories, ``multiprocessing``'s start directory); in the
  ``ranks`` flavour, the plugin's settings (``TRITON_DIST_*``; it reads them when it uses them) but
  the three ``READ_AT_IMPORT``; in the ``python`` flavour, every ``TRITON_*`` and ``TDP_*`` variable
  but ``TDP_TEST_INSTALLED`` (a dev check that recorded every ``os.environ`` read during
  ``import torch`` found none of them) and ``PYTHONPATH`` (``sys.path`` is built from it afresh). Any
  other difference gets a plain ``subprocess.Popen`` start, as does every process where a server
  cannot be used (not Linux, or its start-up checks failed); ``plain_starts`` says why.
- Its own seeds: ``random`` and numpy's global generator are seeded afresh, and torch's where torch seeds
  it at random at start-up (2.13 does; where it takes a fixed default instead, every child keeps that, as
  fresh ones would: the server draws nothing from it). The hash seed of ``str`` cannot change after
  start-up, so there are two servers of each flavour, each with its own: children alternate between them
  (even and odd ranks), so neighbouring ones differ in it, as separate processes do.
- No threads at the fork: only the forking thread survives one, so a thread pool, a gloo connection or
  a lock held in another thread would be broken in the child. After the imports the server forks one
  probe child (OpenBLAS, loaded with numpy by torch, stops its pool at a fork and restarts it on use)
  and then refuses to serve unless it is down to one OS thread, CUDA and ``torch.distributed`` are
  untouched and the probe found torch's generator as seeded (no random operation ran) and no copy of
  the server's home or directory left once a child's is taken. Before each fork it counts its threads again.
- No process outlives its parent: the server gets SIGKILL when its pytest process dies
  (``PR_SET_PDEATHSIG``) and kills its children and exits when its socket closes; each child gets SIGKILL
  when the server dies. A child that hangs is killed by the test (``kill``), through the server, which
  alone may signal it (it has not reaped it yet, so the pid is still that child's).

A child's stdout and stderr are anonymous memory files (``memfd``), read once it has exited: nothing is
written to disk, and a chatty child never blocks on a full pipe (a test that reads a child's output while
it runs, or gives it a terminal or standard input, starts it with ``subprocess`` itself). The server's
home and working directory is a temporary directory of its own, removed at exit. (``ps`` shows a forked
child with its server's command line.)
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
from pathlib import Path

HERE = Path(__file__).resolve()
RANK_SCRIPT = HERE.with_name("dist_worker.py")
READ_AT_IMPORT = frozenset({"TRITON_DIST_PLUGIN_DISABLE", "TRITON_DIST_AUTOTUNE_ISOLATE",
                            "TRITON_DIST_AUTOTUNE_FROZEN"})
STARTUP_S = 300  # a server imports torch (and more), on a machine busy with other tests
PR_SET_PDEATHSIG = 1
USABLE = sys.platform == "linux" and all(hasattr(os, f) for f in ("memfd_create", "pidfd_open", "fork"))

plain_starts: list[str] = []  # why each process started afresh instead (tests read it)


# The client's side, in the pytest process.


def start_ranks(scenario: str, world: int, port: str, envs: list[dict], cwd) -> list:
    """One handle per rank of ``dist_worker.py SCENARIO RANK WORLD PORT``: a forked rank, or a
    ``subprocess.Popen`` (with text pipes) where it cannot be forked."""
    if USABLE:
        for parity in range(min(world, 2)):  # both servers start their imports now
            _server("ranks", parity, envs[parity])
    argvs = [[str(RANK_SCRIPT), scenario, str(rank), str(world), port] for rank in range(world)]
    return [_start("ranks", rank % 2, argv, env, cwd, f"{scenario} rank {rank}")
            for rank, (argv, env) in enumerate(zip(argvs, envs))]


_turn = 0


def start(args: list, env: dict, cwd) -> object:
    """``python ARGS`` (the interpreter's own arguments: ``-c CODE ...``, ``-m MODULE ...`` or
    ``SCRIPT ...``) with ``env`` in ``cwd``: forked from a ``python`` server, or a
    ``subprocess.Popen`` (with text pipes) where it cannot be."""
    global _turn
    _turn += 1
    why = None if args and (args[0] in ("-c", "-m") or not args[0].startswith("-")) else f"option {args[:1]}"
    return _start("python", _turn % 2, [str(a) for a in args], env, cwd, f"python {str(args[:2])[:80]}", why)


def run(args: list, env: dict, cwd, timeout: float) -> subprocess.CompletedProcess:
    """``start``, waited for (``subprocess.TimeoutExpired`` after ``timeout`` seconds, the process
    killed): what ``subprocess.run(..., capture_output=True, text=True)`` gives."""
    proc = start(args, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess([sys.executable, *args], proc.returncode, out, err)


def _start(flavour: str, parity: int, argv: list, env: dict, cwd, what: str, why: str | None = None):
    server = None
    if why is None:
        why = "not Linux" if not USABLE else None
    if why is None:
        server = _server(flavour, parity, env)
        why = server.why_not(env)
    handle = server.fork(argv, env, cwd) if why is None else None
    if handle is None:
        plain_starts.append(f"{what}: {why or server.refused}")
        handle = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    return handle


_servers: dict[tuple, _Server] = {}


def _server(flavour: str, parity: int, env: dict) -> _Server:
    if (flavour, parity) not in _servers:
        _servers[flavour, parity] = _Server(flavour, env)
    return _servers[flavour, parity]


def _per_process(name: str, flavour: str) -> bool:
    """Whether a variable may differ between a child and its server: nothing the server imported
    reads it at import (but ``HOME``, see ``_take_place``); pytest's own marker."""
    if name in ("HOME", "PYTEST_CURRENT_TEST"):
        return True
    if flavour == "ranks":  # the plugin reads its settings when it uses them, but these
        return name.startswith("TRITON_DIST_") and name not in READ_AT_IMPORT
    return (name == "PYTHONPATH" or name.startswith("TRITON_")
            or name.startswith("TDP_") and name != "TDP_TEST_INSTALLED")


class _Server:
    """The client's end of one server: starts it (its first fork waits for its imports), forks
    children, waits for them and kills them."""

    def __init__(self, flavour: str, env: dict):
        self.flavour = flavour
        self.home = tempfile.mkdtemp(prefix=f"tdp-{flavour}-server-")
        self.env = {**{k: v for k, v in env.items() if not _per_process(k, flavour)}, "HOME": self.home}
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.err = os.fdopen(os.memfd_create(f"{flavour}-server-stderr"), "rb")  # what it says if it fails to start
        script = RANK_SCRIPT if flavour == "ranks" else HERE
        self.proc = subprocess.Popen([sys.executable, str(script), "--serve", str(theirs.fileno()), str(os.getpid())],
                                     pass_fds=[theirs.fileno()], env=self.env, cwd=self.home,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err)
        theirs.close()
        self.ready = False
        self.refused: str | None = None
        self.exited: dict[int, int] = {}  # pid -> return code, as the server reports them
        atexit.register(self.close)

    def why_not(self, env: dict) -> str | None:
        """Why a child with this environment cannot be forked from this server, or None."""
        differ = sorted(k for k in env.keys() | self.env.keys()
                        if not _per_process(k, self.flavour) and env.get(k) != self.env.get(k))
        return f"environment differs from the server's in {differ}" if differ else None

    def fork(self, argv: list, env: dict, cwd) -> _Forked | None:
        """A forked child, or None where the server refuses (``refused`` says why)."""
        if not self.ready and self.refused is None:
            reply = self._reply(time.monotonic() + STARTUP_S, f"the {self.flavour} server's start")
            self.ready = "ready" in reply
            if not self.ready:
                self.err.seek(0)
                self.refused = f"{reply['refused']}: {self.err.read().decode(errors='replace')[-3000:]}"
        if self.refused is not None:
            return None
        out, err = (os.fdopen(os.memfd_create(f"child-{name}"), "rb") for name in ("stdout", "stderr"))
        request = {"argv": argv, "env": dict(env), "cwd": str(cwd)}
        socket.send_fds(self.sock, [json.dumps(request).encode()], [out.fileno(), err.fileno()])
        reply = self._reply(time.monotonic() + 60, "a fork")
        if "refused" in reply:
            self.refused = reply["refused"]
            return None
        return _Forked(self, reply["forked"], out, err)

    def wait(self, pid: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exited:
            self._receive(deadline, f"process {pid}")
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
            raise RuntimeError(f"the {self.flavour} server exited, with its children, during {what}:\n{tail}")
        message = json.loads(data)
        if "exited" in message:
            self.exited[message["exited"]] = message["returncode"]
        return message

    def close(self) -> None:
        """Closing the socket ends the server (and kills any child still running)."""
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        shutil.rmtree(self.home, ignore_errors=True)


class _Forked:
    """A forked child, with what the tests use of ``subprocess.Popen``."""

    def __init__(self, server: _Server, pid: int, out, err):
        self.server, self.pid, self.out, self.err = server, pid, out, err
        self.returncode: int | None = None
        self.texts: tuple[str, str] | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.wait(self.pid, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        if self.texts is None:
            texts = []
            for f in (self.out, self.err):
                f.seek(0)
                texts.append(f.read().decode(errors="replace"))
                f.close()
            self.texts = texts[0], texts[1]
        return self.texts

    def kill(self) -> None:
        if self.returncode is None:
            self.server.kill(self.pid)


# The server's side: ``dist_worker.py --serve FD PARENT`` after dist_worker's imports (``ranks``), or
# ``fork_server.py --serve FD PARENT`` after torch's (``python``).


def serve(main=None) -> None:
    """Fork a child for each request on the socket ``FD`` until it closes: one that runs ``main``
    (a rank), or with no ``main`` its arguments as the interpreter would."""
    global _BASE_PATH
    _BASE_PATH = _base_path()
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
    gc.freeze()  # what the imports made stays shared with the children, not copied on their first collection
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    children: dict[int, int] = {}  # pidfd -> pid, until reaped
    while True:
        for ready, _ in poll.poll():
            if ready in children:
                pid = children.pop(ready)
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
                for pid in children.values():
                    os.kill(pid, signal.SIGKILL)
                return
            request = json.loads(data)
            if "kill" in request:
                if request["kill"] in children.values():
                    os.kill(request["kill"], signal.SIGKILL)
                continue
            refused = _threads()
            server = os.getpid()
            pid = os.fork() if refused is None else -1
            if pid == 0:
                try:
                    _die_with(server)
                    os.close(sock.fileno())
                    for pidfd in children:
                        os.close(pidfd)
                    _child(main, request, *fds)
                finally:
                    os._exit(70)
            for f in fds:
                os.close(f)
            if refused:
                sock.send(json.dumps({"refused": refused}).encode())
                continue
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
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
    """Why this server must not fork children, or None: checked once, after the imports."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_initialized() or dist.is_initialized():
        return "CUDA or torch.distributed was initialised at import"
    probe = os.fork()
    if probe == 0:  # a child's set-up in a throwaway one: a fresh generator, and no trace of the server's places
        try:
            fresh = torch.equal(torch.get_rng_state(), torch.Generator().manual_seed(torch.initial_seed()).get_state())
            _take_place({**os.environ, "HOME": "/"}, "/")
            left = _copies_of(home)
            sys.stderr.write(f"the probe child still holds the server's home in {left}\n" if left else "")
            sys.stderr.write("" if fresh else "torch's generator was used at import\n")
            sys.stderr.flush()
            os._exit(0 if fresh and not left else 1)
        finally:
            os._exit(70)
    status = os.waitstatus_to_exitcode(os.waitpid(probe, 0)[1])
    if status != 0:
        return f"the probe child failed ({status}; the server's stderr says why)"
    return _threads()


def _copies_of(text: str) -> list[str]:
    """Where a string holding ``text`` is kept (container items, object attributes): the probe child
    looks for the server's home, which is its working directory too, since a copy made at import
    would be wrong in a child."""
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


def _child(main, request: dict, out: int, err: int) -> None:
    """In the forked child: become the process asked for, run ``main`` or the arguments, and leave as
    the interpreter would (non-daemon threads joined, ``atexit`` run, the streams flushed)."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    _take_place(request["env"], request["cwd"])
    sys.orig_argv = [sys.executable, *request["argv"]]
    code = 1
    try:
        if main is not None:
            sys.argv = request["argv"]
            main()
        else:
            _interpret(request["argv"], request["env"].get("PYTHONPATH"))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # as the interpreter reports it, without this file's frames
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        sys.excepthook(type(exc), exc, exc.with_traceback(tb).__traceback__)
    finally:
        try:
            threading._shutdown()
            import atexit as exits

            exits._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        finally:
            os._exit(code)


_BASE_PATH: list[str] = []


def _base_path() -> list[str]:
    """The server's ``sys.path`` without what its start put first (its script's directory) and what
    came from its ``PYTHONPATH``: what every child's starts from."""
    ours = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)] \
        if os.environ.get("PYTHONPATH") else []
    return [p for p in sys.path[1:] if p not in ours]


def _interpret(argv: list, pythonpath: str | None) -> None:
    """Run ``python ARGV`` (``-c CODE``, ``-m MODULE`` or ``SCRIPT``, then its arguments) here, as the
    interpreter would: ``sys.argv``, ``sys.path`` and a new ``__main__``."""
    import builtins
    import importlib
    import importlib.machinery
    import importlib.util
    import runpy
    import types

    entries = [os.path.abspath(p) for p in pythonpath.split(os.pathsep)] if pythonpath else []
    rest = list(dict.fromkeys(entries + _BASE_PATH))  # site drops duplicates
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __spec__=None)
    sys.modules["__main__"] = main
    importlib.invalidate_caches()
    if argv[0] == "-c":
        sys.argv, sys.path[:] = ["-c", *argv[2:]], ["", *rest]
        main.__loader__ = importlib.machinery.BuiltinImporter
        exec(compile(argv[1], "<string>", "exec", dont_inherit=True), main.__dict__)  # not this file's __future__
    elif argv[0] == "-m":
        sys.argv, sys.path[:] = ["-m", *argv[2:]], [os.getcwd(), *rest]
        runpy._run_module_as_main(argv[1])
    else:
        script = os.path.abspath(argv[0])
        sys.argv, sys.path[:] = list(argv), [os.path.dirname(os.path.realpath(script)), *rest]
        main.__dict__.update(__file__=script, __cached__=None,
                             __loader__=importlib.machinery.SourceFileLoader("__main__", script))
        with open(script, "rb") as f:
            source = importlib.util.decode_source(f.read())
        exec(compile(source, script, "exec", dont_inherit=True), main.__dict__)


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    import numpy  # noqa: F401  (torch loads it; named so a change there cannot slip a start-up cost back in)
    import torch  # noqa: F401

    serve()
