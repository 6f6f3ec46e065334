"""The isolation worker's side (see ``isolate.py``): it runs in its own process, imports torch and
Triton at once (and the kernels' modules it is told of), creates its CUDA context with the first
job, then runs each candidate it is sent and reports each. Messages are plain pickles over a
socket, both ways (``put``/``get``)."""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection
from typing import Any


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


def serve(fd: int) -> None:  # pragma: no cover - runs in the worker process
    """The worker: import torch and Triton before any kernel arrives, then, for each job, rebuild
    the arguments, run each candidate as it comes, and report each."""
    import importlib

    import torch
    import triton  # noqa: F401  (the kernels' modules import it: ahead of them, off their path)

    conn = Connection(fd)
    fn = args = kwargs = None
    while True:
        try:
            message = get(conn)
        except (EOFError, OSError):
            return
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
                return
            try:
                if torch.cuda.is_available():
                    torch.cuda.init()
                obj: Any = importlib.import_module(job["module"])
                for part in job["name"].split("."):
                    obj = getattr(obj, part)
                for _ in range(8):  # Autotuner -> Heuristics -> JITFunction, at most, in practice
                    if type(obj).__name__ == job["kind"]:
                        break
                    obj = getattr(obj, "fn", None)
                if obj is None or type(obj).__name__ != job["kind"]:
                    raise LookupError(f"{job['name']} does not lead to a {job['kind']}")
                fn = obj
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
