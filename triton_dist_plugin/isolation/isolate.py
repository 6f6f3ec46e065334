"""Run each candidate once in a separate, spawned process before it may run in the user's.

A candidate that writes out of bounds poisons the CUDA context, and one that never finishes hangs
the process. With isolation on, every candidate first runs once in a worker process (its own CUDA
context) on its own copies of the arguments, under a timeout; one that crashes the worker, raises
there or does not finish in time is a failed candidate with that reason, never run in the user's
process, and a new worker takes the rest.

One worker serves every tuning of the process. It starts when a kernel that will be isolated is
decorated, off the first call's path; it makes its CUDA context with its first job (made ahead,
the context contended with the program's own start on the GPU and cost more than it saved), and
gives it back once tuning has been idle a while (``idle``). Each tuning sends it the kernel and the arguments
(``transfer``) before compiling, and each candidate as it compiles. It is forked from this
process while that is safe, else a plain ``python -I -c`` process (``worker_start``), never a
``multiprocessing`` spawn (which would import the user's main script again); it dies with this
process (Linux's parent-death signal, and a watch on its socket and parent, even mid-candidate).

On (``TRITON_DIST_AUTOTUNE_ISOLATE``) by default for generated candidates (``configs=[]``), which
nobody has run before; ``1`` for every tuned kernel; ``0`` never. A kernel in the main script,
inside a function or in the working directory is rebuilt in the worker from its source
(``isolate_source``); one whose globals or arguments cannot be sent is tuned unisolated, with a
note in the report.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import threading
import time
from typing import Any, Optional

from .. import _compat, frozen, settings
from . import channel, idle, isolate_source, transfer, worker_start
from .isolate_source import Unisolated, locate

ENV = "TRITON_DIST_AUTOTUNE_ISOLATE"
TIMEOUT_ENV = "TRITON_DIST_AUTOTUNE_ISOLATE_TIMEOUT"
_START_TIMEOUT = 120.0  # seconds a new worker gets to import torch and Triton and find the kernel


def enabled(generated: bool) -> bool:
    choice = settings.value(ENV)
    return generated if choice is None else choice


_shared: Optional[Worker] = None
_shared_lock = threading.Lock()


def worker() -> Worker:
    """The process's worker, ready for a new tuning (started on first use, or again after it died)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _new_shared()
        _shared.reset()
        _shared.tuning = True  # no idle release until ``done``
        return _shared


def _new_shared() -> Worker:
    """The process's worker, stopped when the process exits (it would also go of itself, once its
    socket closes, but no process is left behind either way)."""
    import atexit

    worker = Worker()
    atexit.register(worker.stop)
    return worker


def prestart(fn: Any = None, generated: bool = False) -> None:
    """Start the process's worker ahead of the first tuning that needs it: at activation when
    every kernel is isolated (``fn`` None), or when a kernel that will be isolated is decorated
    (the worker then imports ``fn``'s module too, where it can), and computes Triton's source
    hash, which its first job needs; no GPU context before that job. Not in a ``multiprocessing``
    child (a data loader's, say), which seldom tunes; never raises: whatever goes wrong here is
    met again, and reported, by the tuning."""
    global _shared
    try:
        import multiprocessing

        wanted = settings.value(ENV) is True if fn is None else enabled(generated)
        if not wanted or frozen.mode() or multiprocessing.parent_process() is not None:
            return
        module = isolate_source.module_of(fn) if fn is not None else None
        with _shared_lock:
            if _shared is None:
                _shared = _new_shared()
            if module is not None and module not in _shared.preloaded:
                _shared.preloaded.add(module)
                _shared._send(pickle.dumps(("preload", module)))
    except Exception:
        return


def _forget_after_fork() -> None:
    """A forked child has no worker: the lock may have been held at the fork, and the parent's is not its to stop."""
    global _shared, _shared_lock
    if _shared is not None:
        _shared.proc = None
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def done(worker: Worker) -> None:
    """The tuning that used ``worker`` is over: its arguments are let go of now, its GPU context
    once tuning stays idle."""
    worker.let_go()
    worker.tuning = False
    idle.after_tuning(worker, _shared_lock, lambda: _shared)


class Worker:
    """A worker process; per tuning: ``prepare`` the kernel and arguments, ``submit`` each
    candidate as it compiles, ``finish`` to run the rest and collect every verdict."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.job: Optional[list] = None  # the job's messages, for a new worker after a crash
        self.packed: Optional[transfer.Packed] = None  # its arguments, which the worker asks for
        self.unisolated: Optional[str] = None
        self.sent: list[int] = []  # candidates the live worker has, in the order it runs them
        self.runs: dict[int, tuple] = {}  # candidate -> (meta, grid), for a new worker after a crash
        self.heuristics: Optional[tuple] = None  # (layers, args, kwargs) over a rebuilt kernel
        self.sent_at = self.ready_at = 0.0
        self.phases: Any = {}  # what the worker's start took, as it says when ready
        self.lock = threading.Lock()  # compile threads submit concurrently
        self.generation = self.released = 0  # tunings begun; idle releases (``idle``)
        self.tuning = False  # between ``worker()`` and ``done``
        self.start()

    def start(self, refusal: Optional[str] = None) -> None:
        ours, theirs = socket.socketpair()
        self.proc, self.began = worker_start.launch(theirs, ours, refusal)
        theirs.close()
        self.channel = channel.Channel(ours, lambda: self.packed)
        self.started_at = time.monotonic()
        self.given_work = False  # sent a job (so made its GPU context): what an idle release gives back
        self.sent = []
        self.preloaded: set[str] = set()  # modules it was asked to import ahead of any job
        self.awaiting = False  # a job was sent and its "ready" not read yet
        # What any job needs but the GPU context, made while it waits: Triton's source hash, this
        # process's where known (a fresh interpreter would spend 0.3-0.7 s hashing it again).
        self._send(pickle.dumps(("warm", _compat.known_triton_key())))

    def reset(self) -> None:
        """Forget the last tuning; a worker left with unanswered candidates (a tuning that ended
        early) or no longer running is replaced, so no stale reply is ever read."""
        if (self.sent or self.awaiting or self.proc is None or self.proc.poll() is not None
                or not self.channel.inbox.empty()):
            self.stop()
            self.start()
        self.generation += 1
        self.let_go()
        self.unisolated, self.runs, self.phases = None, {}, {}
        self.sent_at = self.ready_at = 0.0

    def stop(self) -> None:
        if self.proc is not None:
            self.channel.quiet()
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass  # dies with its socket's end, closed now
            self.channel.close()
        self.proc = None

    def prepare(self, fn: Any, kind: str, args: tuple, kwargs: dict) -> None:
        """Send the kernel and copies of the arguments now, so the worker loads them while we compile."""
        try:
            found, layers = locate(fn)
        except Exception as exc:  # Unisolated, or source the rebuild cannot read
            self.unisolated = str(exc) if isinstance(exc, Unisolated) else (
                f"it could not be prepared for the isolation worker ({type(exc).__name__}: {exc})")
            return
        try:
            packed = transfer.Packed(args, kwargs)
            job = {**found, "args": packed.args, "kwargs": packed.kwargs, "shared": packed.sizes,
                   "device": packed.device}
            message = [pickle.dumps(("job", job, [b.nbytes for b in packed.inline])), *packed.inline]
        except Exception as exc:
            self.unisolated = f"its arguments cannot be copied to a worker ({type(exc).__name__})"
            return
        self.job, self.packed = message, packed
        self.heuristics = (layers, args, kwargs) if layers else None  # evaluated here, per candidate
        self.awaiting = self.given_work = True
        self.sent_at = time.monotonic()
        self._send(message)

    def submit(self, index: int, meta: dict, grid: Any) -> None:
        """Hand candidate ``index`` to the worker (from any thread), which runs it at once."""
        if self.job is None:
            return
        if self.heuristics is not None:
            try:
                meta = isolate_source.with_heuristics(*self.heuristics, meta, grid)
            except Exception as exc:
                self.unisolated = f"its heuristics raised, evaluated for the worker ({type(exc).__name__}: {exc})"
                return
        try:
            run = pickle.loads(pickle.dumps((meta, grid)))
        except Exception as exc:
            self.unisolated = f"its launch (grid, meta-parameters) cannot be copied to a worker ({type(exc).__name__})"
            return
        with self.lock:
            if index in self.runs:
                return
            self.runs[index] = run
            self.sent.append(index)
            self._send(pickle.dumps(("run", [(index, run)])))

    def _send(self, message: Any) -> None:
        if message is not None:  # (None would end the writer)
            self.channel.send(message)

    def let_go(self) -> None:
        """The tuning is over: nothing of its arguments is kept (a user's tensor may be freed)."""
        self.job = self.packed = self.heuristics = None

    def finish(self, runs: dict[int, tuple]) -> dict[int, str]:
        """Run every candidate of ``runs`` (``{index: (meta, grid)}``) not yet submitted, wait for
        each verdict; ``{index: reason}`` for those that failed. Raises ``Unisolated`` when the
        kernel cannot be run in a worker at all."""
        for index, (meta, grid) in runs.items():
            self.submit(index, meta, grid)
        if self.unisolated is not None:
            raise Unisolated(self.unisolated)
        limit = settings.value(TIMEOUT_ENV)
        failed: dict[int, str] = {}
        ready = not self.awaiting  # a search calls this once per step; "ready" comes once per worker
        while True:
            with self.lock:
                pending = list(self.sent)
            if not pending:
                return failed
            if not ready:
                forked = self.began == "forked"
                reply = self._receive(worker_start.FORKED_READY_S if forked else _START_TIMEOUT)
                if forked and (reply is None or reply[0] != "ready"):  # a fresh interpreter takes over
                    why = reply[1] if reply and len(reply) > 1 else \
                        f"not ready within {worker_start.FORKED_READY_S:g}s" if reply is None else "it exited"
                    self._replace(refusal=f"the forked worker failed: {why}")
                    continue
                if reply is None or reply[0] != "ready":  # for the rest of this tuning: no wait again
                    self.unisolated = reply[1] if reply and len(reply) > 1 else "the worker did not start"
                    raise Unisolated(self.unisolated)
                ready, self.awaiting = True, False
                if not self.ready_at:
                    self.ready_at, self.phases = time.monotonic(), reply[1] if len(reply) > 1 else {}
            reply = self._receive(limit)
            # Died or hung on the first unanswered candidate: a new worker takes the rest.
            if reply is None or reply[0] == "gone":
                culprit = pending[0]
                if reply is not None:  # its socket closed: it is exiting, if not yet gone
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(5)
                alive = self.proc is not None and self.proc.poll() is None
                code = None if alive else self.proc.returncode
                failed[culprit] = (f"did not finish within {limit:g}s in the isolation worker ({TIMEOUT_ENV})"
                                   if alive else f"crashed the isolation worker (exit code {code}); "
                                   "it was not run in this process")
                with self.lock:
                    self.sent.remove(culprit)
                self._replace()
                ready = False
                continue
            status, index, reason = reply
            with self.lock:
                if index in self.sent:
                    self.sent.remove(index)
            if status in ("error", "fatal"):
                failed[index] = f"failed in the isolation worker: {reason}"
            if status == "fatal":  # it broke the worker's CUDA context: a new worker takes the rest
                self._replace()
                ready = False

    def timeline(self) -> str:
        """When the worker started and became ready, relative to this tuning's job, and what its
        start took (for the report)."""
        if not self.sent_at:
            return "the worker was never sent this kernel"
        ahead = self.sent_at - self.started_at
        started = f"{ahead:.2f}s before the job" if ahead >= 0 else f"{-ahead:.2f}s after it"
        ready = f"ready {self.ready_at - self.sent_at:.2f}s after the job" if self.ready_at else "never ready"
        phases = dict(self.phases) if isinstance(self.phases, dict) else {}
        moved = phases.pop("device to device", 0)
        steps = [f"{name} {seconds:.2f}s" for name, seconds in phases.items() if isinstance(seconds, float)]
        if moved:
            steps.append(f"{moved} tensors device to device, answered in {self.channel.shared_in:.2f}s")
        return f"worker {self.began} {started}, {ready}" + (f" ({'; '.join(steps)})" if steps else "")

    def _replace(self, refusal: Optional[str] = None) -> None:
        """A new worker for the candidates the last one did not answer (``refusal``: why it is
        not to be forked)."""
        with self.lock:
            rest = list(self.sent)
            self.stop()
            self.start(refusal)
            if self.job is not None:  # every later step's candidates run on it too
                self.awaiting = self.given_work = True
                self._send(self.job)
            if rest:
                self.sent = rest
                self._send(pickle.dumps(("run", [(i, self.runs[i]) for i in rest])))

    def _receive(self, limit: float) -> Optional[tuple]:
        """The worker's next reply; ``("gone",)`` when its end closed; None after ``limit`` seconds."""
        return self.channel.receive(limit, lambda: self.proc is not None and self.proc.poll() is None)
