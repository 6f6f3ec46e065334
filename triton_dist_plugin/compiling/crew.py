"""Forked workers fed one task at a time, each over a pipe of its own.

Unlike a ``multiprocessing`` pool, whose workers all exist before the first task is given, each
worker here starts on a task the moment it is forked: a fork of a process holding CUDA takes
~10 ms, so with 16 workers a pool's first compile would wait ~0.16 s, on the critical path of every
first call. A worker that dies is seen at once (its pipe closes) rather than at a timeout. On Linux
none outlives its parent, even mid-task: each dies with it; elsewhere one leaves once its pipe
closes, after the task in hand.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from multiprocessing import connection
from typing import Any, Callable

from .._lifetime import die_with_parent


class Crew:
    """Workers that each run ``work(task)`` on the tasks given them, in a fork of this process."""

    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.workers: dict = {}  # our end of each worker's pipe -> [its process, its task or None]
        self.context = multiprocessing.get_context("fork")

    def fork(self) -> Any:
        """A new worker (our end of its pipe), idle."""
        ours, theirs = self.context.Pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "fork() in a multi-threaded process"
            process = self.context.Process(target=_serve, args=(self.work, theirs, [*self.workers, ours], os.getpid()),
                                           daemon=True, name="tdp-compile")
            process.start()
        theirs.close()
        self.workers[ours] = [process, None]
        return ours

    def give(self, worker: Any, task: Any) -> None:
        worker.send(task)
        self.workers[worker][1] = task

    def idle(self) -> list:
        return [worker for worker, (_, task) in self.workers.items() if task is None]

    def arrivals(self, timeout: float) -> list[tuple[Any, Any]]:
        """``(worker, result)`` of each worker done within ``timeout`` seconds, now idle. A worker
        that died raises ``RuntimeError`` naming its task."""
        got = []
        for worker in connection.wait(list(self.workers), timeout):
            process, task = self.workers[worker]
            try:
                got.append((worker, worker.recv()))
            except (EOFError, OSError):
                process.join(1.0)
                code = process.exitcode
                del process  # the error's traceback keeps this frame: not the process's pipes with it
                raise RuntimeError(f"a compile worker died on task {task!r} (exit code {code})") from None
            self.workers[worker][1] = None
        return got

    def close(self) -> None:
        """End every worker, whatever it is doing, and wait for it."""
        for worker, (process, _) in self.workers.items():
            worker.close()
            process.kill()
        for process, _ in self.workers.values():
            process.join()
        self.workers.clear()


def _serve(work: Callable[[Any], Any], conn: Any, parents: list, parent: int) -> None:  # pragma: no cover - a worker
    """A worker's loop: ``work`` each task the parent sends, until its pipe closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the parent's to handle
    if not die_with_parent(parent):  # (its pipe closing ends it too)
        return
    for end in parents:  # the parent's ends (its own, earlier workers'): only the parent holds them now
        end.close()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(work(task))
