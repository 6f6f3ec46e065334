"""Run each candidate once in a separate, spawned process before it may run in the user's.

A candidate that writes out of bounds poisons the CUDA context ("illegal memory access"), and one
that never finishes hangs the process: either way the user's process is lost with it. With
isolation on, every candidate first runs once in a worker process (spawned, so it has its own
CUDA context) on its own copies of the arguments, under a timeout. One that crashes the worker,
raises there, or does not finish in time is a failed candidate with that reason: it is never run
in the user's process, and tuning goes on with the others (a new worker takes the rest).

When it is on (``TRITON_DIST_AUTOTUNE_ISOLATE``): by default for candidates the plugin generated
itself (``configs=[]``), which nobody has run before; ``1`` for every tuned kernel; ``0`` never.
Explicit configs are the kernel author's and usually known good, and a worker costs a process
start, overlapped with compilation. The worker finds the kernel by its module and name, so a
kernel defined inside a function, or arguments that cannot be copied (objects other than tensors
and plain values), leave the kernel unisolated, with a note in the report.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
from typing import Any, Optional

from . import _compat, settings

ENV = "TRITON_DIST_AUTOTUNE_ISOLATE"
TIMEOUT_ENV = "TRITON_DIST_AUTOTUNE_ISOLATE_TIMEOUT"
_START_TIMEOUT = 120.0  # seconds a new worker gets to import torch and Triton and find the kernel


def enabled(generated: bool) -> bool:
    choice = settings.value(ENV)
    return generated if choice is None else choice


class Unisolated(Exception):
    """This kernel or these arguments cannot be run in a worker; the reason says why."""


def where(fn: Any) -> tuple[str, str]:
    """How a worker finds ``fn``: the module and name of the outermost object defined with it (the
    worker then follows ``.fn`` down to an object of ``fn``'s class)."""
    base = _compat.base_function(fn)
    module, name = getattr(base, "__module__", None), getattr(base, "__qualname__", "")
    if not module or "<locals>" in name:
        raise Unisolated(f"{name or fn!r} is not defined at module level, so a worker cannot import it")
    return module, name


def _copy(value: Any) -> Any:
    """What travels to the worker: a tensor as CPU data with its device, shape and strides."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().cpu(), str(value.device), tuple(value.shape), value.stride())
    return ("value", value)


def _restore(item: tuple) -> Any:
    import torch

    if item[0] == "tensor":
        _, data, device, shape, stride = item
        out = torch.empty_strided(shape, stride, dtype=data.dtype, device=device)
        out.copy_(data)
        return out
    return item[1]


class Worker:
    """One spawned process that runs candidates for one tuning; started early so its start-up
    (importing torch and Triton) overlaps compilation."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.proc: Any = None
        self.conn: Any = None
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_serve, args=(child,), daemon=True, name="tdp-isolate")
        self.proc.start()
        child.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        self.proc = None

    def check(self, fn: Any, kind: str, args: tuple, kwargs: dict, runs: list[tuple[Any, dict, Any]]) -> dict:
        """Run each ``(config, launch keywords, grid)`` once; ``{config: reason}`` for those that
        failed. Raises ``Unisolated`` when the kernel cannot be run in a worker at all."""
        module, name = where(fn)
        job = {"module": module, "name": name, "kind": kind, "args": [_copy(a) for a in args],
               "kwargs": {k: _copy(v) for k, v in kwargs.items()}}
        try:
            pickle.dumps(job)
            todo = [(i, pickle.loads(pickle.dumps((meta, grid)))) for i, (_, meta, grid) in enumerate(runs)]
        except Exception as exc:
            raise Unisolated(f"its arguments cannot be copied to a worker ({type(exc).__name__})") from None
        limit = settings.value(TIMEOUT_ENV)
        failed: dict = {}
        while todo:
            if self.proc is None:
                self.start()
            self.conn.send(("job", job))
            reply = self._receive(_START_TIMEOUT)
            if reply is None or reply[0] != "ready":
                raise Unisolated(reply[1] if reply else "the worker did not start")
            pending = list(todo)
            self.conn.send(("run", pending))
            while pending:
                i, _ = pending[0]
                config = runs[i][0]
                reply = self._receive(limit)
                if reply is None:  # died or hung on candidate i: a new worker takes the rest
                    alive = self.proc is not None and self.proc.is_alive()
                    code = None if alive else self.proc.exitcode
                    self.stop()
                    failed[config] = (f"did not finish within {limit:.0f}s in the isolation worker "
                                      f"({TIMEOUT_ENV})" if alive else
                                      f"crashed the isolation worker (exit code {code}); "
                                      "it was not run in this process")
                    pending.pop(0)
                    break
                status, index, reason = reply
                if status == "error":
                    failed[runs[index][0]] = f"failed in the isolation worker: {reason}"
                pending.pop(0)
            todo = pending
        return failed

    def _receive(self, limit: float) -> Optional[tuple]:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.conn.poll(min(0.2, max(0.0, deadline - time.monotonic()))):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    return None
            if self.proc is None or not self.proc.is_alive():
                return None
        return None


def _serve(conn: Any) -> None:  # pragma: no cover - runs in the spawned worker
    """The worker: import the kernel, rebuild the arguments, run each candidate, report each."""
    import importlib
    import os

    os.environ["TRITON_DIST_PLUGIN_DISABLE"] = "1"  # plain Triton here: no tuning inside the worker
    fn = args = kwargs = None
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "job":
            job = message[1]
            try:
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
                args = [_restore(a) for a in job["args"]]
                kwargs = {k: _restore(v) for k, v in job["kwargs"].items()}
                conn.send(("ready",))
            except Exception as exc:
                conn.send(("unisolated", f"the worker could not load {job['name']}: {type(exc).__name__}: {exc}"))
        elif message[0] == "run":
            import torch

            for index, (meta, grid) in message[1]:
                try:
                    fn.run(*args, grid=grid, warmup=False, **kwargs, **meta)
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    conn.send(("ok", index, None))
                except Exception as exc:
                    text = str(exc).strip().splitlines()
                    conn.send(("error", index, f"{type(exc).__name__}: {text[0][:300] if text else ''}"))
