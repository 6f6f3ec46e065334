"""The isolation worker's side (see ``isolate.py``): it runs in its own process, imports torch and
Triton at once (and the kernels' modules it is told of), creates its CUDA context with the first
job, then runs each candidate it is sent and reports each. Messages are plain pickles over a
socket, both ways (``put``/``get``). It exits as soon as its parent is gone, even mid-candidate.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import Any

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


def copy(value: Any, buffers: list) -> Any:
    """What travels to the worker: a tensor as its dtype, device, shape and strides, its data as
    raw bytes appended to ``buffers`` (sent as they are: no pickled copy on either side)."""
    import torch

    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous().reshape(-1)
        at = None
        if data.numel():
            at = len(buffers)
            buffers.append(memoryview(data.view(torch.uint8).numpy()))
        return ("tensor", at, str(value.dtype).removeprefix("torch."), str(value.device), tuple(value.shape),
                value.stride())
    return ("value", value)


def restore(item: tuple, buffers: list) -> Any:
    """An argument as the worker runs it: a tensor rebuilt on its device from its raw bytes."""
    import torch

    if item[0] == "tensor":
        _, at, dtype, device, shape, stride = item
        dtype = getattr(torch, dtype)
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        if at is not None:
            out.copy_(torch.frombuffer(buffers[at], dtype=torch.uint8).view(dtype).reshape(shape))
        return out
    return item[1]


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
    """The worker: watch its parent, import torch and Triton before any kernel arrives, then, for
    each job, rebuild the arguments, run each candidate as it comes, and report each."""
    import importlib
    import threading

    threading.Thread(target=_watch, args=(fd, parent), name="tdp-isolation-watch", daemon=True).start()
    import torch
    import triton  # noqa: F401  (the kernels' modules import it: ahead of them, off their path)

    conn = Connection(fd)
    fn = args = kwargs = None
    rebuilt: dict = {}
    while True:
        try:
            message = get(conn)
        except (EOFError, OSError):
            os._exit(0)  # the parent is gone: nothing to report to, nothing to clean up
        if message[0] == "preload":  # a kernel of this module will be isolated: import it while idle
            try:
                importlib.import_module(message[1])
            except BaseException:  # noqa: BLE001 - its job reports the same failure, with a reason
                pass
        elif message[0] == "job":
            job, sizes = message[1], message[2]
            try:
                buffers = []
                for size in sizes:  # the tensors' data, each straight into a buffer of its size
                    buffers.append(bytearray(size))
                    conn.recv_bytes_into(buffers[-1])
            except (EOFError, OSError):
                os._exit(0)
            try:
                if torch.cuda.is_available():
                    torch.cuda.init()
                fn = _load(job, rebuilt)
                args = [restore(a, buffers) for a in job["args"]]
                kwargs = {k: restore(v, buffers) for k, v in job["kwargs"].items()}
                del buffers
                put(conn, ("ready",))
            except Exception as exc:
                put(conn, ("unisolated", f"the worker could not load {job['name']}: {type(exc).__name__}: {exc}"))
        elif message[0] == "run":
            for index, (meta, grid) in message[1]:
                try:
                    fn.run(*args, grid=grid, warmup=False, **kwargs, **meta)
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    put(conn, ("ok", index, None))
                except Exception as exc:
                    text = str(exc).strip().splitlines()
                    reason = f"{type(exc).__name__}: {text[0][:300] if text else ''}"
                    if _context_lost(torch):  # a sticky CUDA error: every later launch here would fail too
                        put(conn, ("fatal", index, reason))
                        os._exit(1)
                    put(conn, ("error", index, reason))


def _context_lost(torch: Any) -> bool:  # pragma: no cover - runs in the worker process
    if not torch.cuda.is_available():
        return False
    try:
        (torch.ones(1, device="cuda") + 1).item()
        return False
    except Exception:
        return True
