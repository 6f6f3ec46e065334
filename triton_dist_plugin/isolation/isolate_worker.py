"""The isolation worker's side (see ``isolate.py``): it runs in its own process, imports torch and
Triton at once (and the kernels' modules it is told of), takes Triton's source hash from its parent
or computes it (``warm``, at its start), creates its CUDA context with its first job, takes in each job's arguments
(``transfer``), then runs each candidate it is sent and reports each. Messages are plain pickles
over a socket, both ways (``put``/``get``). It exits as soon as its parent is gone, even
mid-candidate.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import Any, Optional

from . import transfer

#: The worker's ``python -I -c`` program (``-I``: nothing of the working directory on its path).
#: First of all it leaves ^C to its parent and asks Linux to kill it when its parent dies, then
#: checks that the parent did not die before; it is handed its ``sys.path``, and loads this package
#: from where its parent has it.
BOOTSTRAP = """
import os, sys
fd, parent, pdeathsig, package, *path = sys.argv[1:]
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is its parent's to handle; it dies with it
if sys.platform.startswith("linux"):
    try:
        import ctypes
        if pdeathsig == "1":
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        ctypes.CDLL(None).prctl(15, b"tdp-isolation")  # PR_SET_NAME, as a forked worker has it
    except (OSError, AttributeError):
        pass  # its socket and its parent are watched as well
if os.getppid() != int(parent):
    os._exit(0)
sys.path[:] = path
import importlib.util
spec = importlib.util.spec_from_file_location("triton_dist_plugin", os.path.join(package, "__init__.py"),
                                              submodule_search_locations=[package])
sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from triton_dist_plugin.isolation.isolate_worker import serve
serve(int(fd), int(parent))
"""


def put(conn: Connection, message: tuple) -> None:
    # Plain pickle: tensors travel as their data (``Connection.send`` would share CPU storage
    # through torch's file-descriptor passing, which needs a ``multiprocessing`` parent).
    conn.send_bytes(pickle.dumps(message))


def get(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def rebuild(spec: dict) -> Any:
    """The ``@triton.jit`` function ``isolate_source.source_of`` described, rebuilt from the source
    its parent sent: nothing is imported but the modules it names, and nothing is read from disk."""
    import builtins
    import functools
    import importlib
    import linecache

    import triton
    import triton.language as tl

    def value(item: tuple) -> Any:
        kind = item[0]
        if kind in ("module", "import"):
            found: Any = importlib.import_module(item[1])
            for part in item[2].split(".") if kind == "import" else ():
                found = getattr(found, part)
            return found
        if kind == "constexpr":
            return tl.constexpr(value(item[1]))
        return tl.dtype(item[1]) if kind == "dtype" else item[1]

    namespaces = [{"__builtins__": builtins, "__name__": "__tdp_isolated__"} for _ in spec["namespaces"]]
    for namespace, items in zip(namespaces, spec["namespaces"]):
        namespace.update({name: value(item) for name, item in items.items() if item[0] != "function"})
    built = []
    for fn in spec["functions"]:
        namespace, name, missing = namespaces[fn["namespace"]], fn["name"], object()
        jit = functools.partial(triton.jit, **fn["options"])
        # A file name of its own, registered for ``inspect`` (Triton reads the source back through
        # it); a ``<...>`` name is never looked for on disk.
        filename = f"<isolated {name} of {fn['file']}>"
        linecache.cache[filename] = (len(fn["source"]), None, fn["source"].splitlines(keepends=True), filename)
        before = namespace.get(name, missing)
        namespace["__tdp_jit__"] = jit
        exec(compile(fn["source"], filename, "exec", flags=fn["flags"], dont_inherit=True), namespace)
        built.append(namespace[name] if fn["decorated"] else jit(namespace[name]))
        del namespace["__tdp_jit__"]
        if before is missing:
            del namespace[name]
        else:
            namespace[name] = before
    for namespace, items in zip(namespaces, spec["namespaces"]):
        namespace.update({name: built[item[1]] for name, item in items.items() if item[0] == "function"})
    return built[spec["root"]]


def _watch(fd: int, parent: int) -> None:  # pragma: no cover - runs in the worker process
    """Exit as soon as the parent is gone or has closed its end of the socket. The main thread
    notices only when it next reads, which a candidate that never finishes never does: it would
    spin on, at full speed, long after its parent."""
    import select
    import time

    poller = select.poll() if hasattr(select, "poll") else None
    if poller is not None:
        poller.register(fd, select.POLLHUP)  # hang-ups and errors only: incoming data does not wake it
    while True:
        closed = poller.poll(500) if poller is not None else time.sleep(0.5)
        if closed or os.getppid() != parent:
            os._exit(0)


def _load(job: dict, rebuilt: dict) -> Any:  # pragma: no cover - runs in the worker process
    """The job's kernel: imported by module and name, or rebuilt from its source (once per source)."""
    import importlib

    if "source" in job:
        key = pickle.dumps(job["source"])
        if key not in rebuilt:
            rebuilt[key] = rebuild(job["source"])
        return rebuilt[key]
    obj: Any = importlib.import_module(job["module"])
    for part in job["name"].split("."):
        obj = getattr(obj, part)
    for _ in range(8):  # Autotuner -> Heuristics -> JITFunction, at most, in practice
        if type(obj).__name__ == job["kind"]:
            return obj
        obj = getattr(obj, "fn", None)
    raise LookupError(f"{job['name']} does not lead to a {job['kind']}")


def serve(fd: int, parent: int) -> None:  # pragma: no cover - runs in the worker process
    """The worker: watch its parent, import torch and Triton before any kernel arrives (and
    Triton's source hash, ``warm``), then, for each job, take in the arguments, run each
    candidate as it comes, and report each."""
    import importlib
    import threading

    threading.Thread(target=_watch, args=(fd, parent), name="tdp-isolation-watch", daemon=True).start()
    import torch
    import triton  # noqa: F401  (the kernels' modules import it: ahead of them, off their path)

    conn = Connection(fd)
    job = Job(conn, torch)
    while True:
        try:
            message = get(conn)
            if message[0] == "job":
                job.begin(message[1], _receive(conn, message[2]))
            elif message[0] == "filled":  # what could not be written into its buffers comes as bytes
                job.ready(message[1], _receive(conn, message[2]), *message[3:])
        except (EOFError, OSError):
            os._exit(0)  # the parent is gone: nothing to report to, nothing to clean up
        if message[0] == "warm":  # what a job will need, made ahead (every worker is told at its start)
            job.warmed = warm(torch, message[1] if len(message) > 1 else None)
        elif message[0] == "preload":  # a kernel of this module will be isolated: import it while idle
            try:
                importlib.import_module(message[1])
            except BaseException:  # noqa: BLE001 - its job reports the same failure, with a reason
                pass
        elif message[0] == "run":
            job.run(message[1])


def _receive(conn: Connection, sizes: list) -> list:  # pragma: no cover - runs in the worker process
    """The raw bytes sent after a message, each straight into a buffer of its size."""
    buffers = []
    for size in sizes:
        buffers.append(bytearray(size))
        conn.recv_bytes_into(buffers[-1])
    return buffers


def warm(torch: Any, key: Any = None) -> Optional[float]:  # pragma: no cover - runs in the worker process
    """Make what a job will need, ahead of it, but its GPU context: Triton's sources' hash, taken
    from ``key`` (the parent's, where it had computed it) or computed here. Seconds it took; None
    without a GPU (nothing to make: the interpreter looks no binary up). The context waits for the
    job: made here, while the program made its inputs on the GPU, it cost first calls more than it
    saved (``failure-modes.md``)."""
    import time

    from .. import _compat

    began = time.perf_counter()
    try:
        if isinstance(key, str) and key:
            _compat.take_triton_key(key)
        if not torch.cuda.is_available():  # (the driver's device count: no context, no GPU memory)
            return None
        _compat.triton_key()  # each candidate's first run looks its binary up by it (0.3-0.7 s)
    except Exception:  # noqa: BLE001 - the job makes it, and reports what fails
        pass
    return time.perf_counter() - began


class Job:  # pragma: no cover - runs in the worker process
    """The worker's current job: its kernel and arguments, and the candidates it is sent."""

    def __init__(self, conn: Connection, torch: Any) -> None:
        self.conn, self.torch = conn, torch
        self.fn = self.arriving = self.args = self.kwargs = None
        self.waiting: list = []  # candidates sent before the arguments had all arrived
        self.phases: dict = {}  # seconds each step of the job's start took, for its parent's report
        self.rebuilt: dict = {}  # kernels rebuilt from their source, for every job
        self.warmed: Any = None  # seconds the warm-up ahead of this job took

    def begin(self, job: dict, inline: list) -> None:
        """The GPU context, this job's buffers offered to its parent, then its kernel loaded
        while the parent writes into them; ready at once where nothing is shared."""
        import time

        torch, began, offers = self.torch, time.perf_counter(), None
        self.job, self.fn, self.args, self.kwargs, self.waiting = job, None, None, None, []
        self.phases = {} if self.warmed is None else {"source hash ahead": self.warmed}
        self.warmed = None
        try:
            if job.get("device") is not None:  # the parent's current device: Triton launches on it
                torch.cuda.set_device(job["device"])
            self.arriving = transfer.Arriving(job, inline)
            offers = self.arriving.offers() if job["shared"] else None
            self.phases["context and buffers"] = time.perf_counter() - began
            if offers is not None:
                put(self.conn, ("share", offers))
            began = time.perf_counter()
            self.fn = _load(job, self.rebuilt)
            self.phases["kernel"] = time.perf_counter() - began
        except Exception as exc:  # (buffers already offered stay until the parent's answer: it may be writing)
            put(self.conn, ("unisolated", f"the worker could not load {job['name']}: {type(exc).__name__}: {exc}"))
            if offers is None:
                self.arriving = None
            return
        if not job["shared"]:
            self.ready([], [])

    def ready(self, left: Any, buffers: list, reason: str = "") -> None:
        import time

        if self.arriving is None:
            return
        if left is None or self.fn is None:  # not sent, or the kernel did not load: nothing runs on this job
            self.arriving = None
            if left is None:
                put(self.conn, ("unisolated", reason))
            return
        began = time.perf_counter()
        try:
            self.args, self.kwargs = self.arriving.arguments(left, buffers)
        except Exception as exc:
            put(self.conn, ("unisolated", f"the worker could not rebuild the arguments: {type(exc).__name__}: {exc}"))
            return
        finally:
            self.arriving = None
        self.phases["arguments"] = time.perf_counter() - began
        self.phases["device to device"] = len(self.job["shared"]) - len(left)  # tensors: the rest came as bytes
        put(self.conn, ("ready", self.phases))
        waiting, self.waiting = self.waiting, []
        self.run(waiting)

    def run(self, runs: list) -> None:
        torch = self.torch
        if self.args is None:
            self.waiting += runs
            return
        for index, (meta, grid) in runs:
            try:
                self.fn.run(*self.args, grid=grid, warmup=False, **self.kwargs, **meta)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                put(self.conn, ("ok", index, None))
            except Exception as exc:
                text = str(exc).strip().splitlines()
                reason = f"{type(exc).__name__}: {text[0][:300] if text else ''}"
                if _context_lost(torch):  # a sticky CUDA error: every later launch here would fail too
                    put(self.conn, ("fatal", index, reason))
                    os._exit(1)
                put(self.conn, ("error", index, reason))


def _context_lost(torch: Any) -> bool:  # pragma: no cover - runs in the worker process
    if not torch.cuda.is_available():
        return False
    try:
        (torch.ones(1, device="cuda") + 1).item()
        return False
    except Exception:
        return True
