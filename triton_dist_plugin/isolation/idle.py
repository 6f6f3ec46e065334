"""Giving the isolation worker's GPU memory back once tuning has gone idle.

A worker that ran candidates holds a CUDA context (some hundreds of MB of GPU memory on an H200)
for as long as it lives, and a serving process may tune a few keys at start-up and never again.
``TRITON_DIST_AUTOTUNE_ISOLATE_IDLE`` seconds after the last tuning that used the worker, if no
other tuning has begun since, it is replaced by a fresh one: started at once (so the next tuning
finds it imported, the kernels' modules loaded and Triton's source hash computed, as at
decoration), holding no GPU memory until that tuning sends it work. ``0`` keeps the worker and
its context for the life of the process.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any, Callable

from .. import settings

ENV = "TRITON_DIST_AUTOTUNE_ISOLATE_IDLE"


def after_tuning(worker: Any, lock: threading.Lock, current: Callable[[], Any]) -> None:
    """The tuning that used ``worker`` is over: release it after the idle time, unless another
    tuning took it meanwhile (``worker.generation`` moved on) or it is no longer the process's
    worker (``current()``, read under ``lock``, the lock ``isolate.worker()`` takes)."""
    seconds = settings.value(ENV)
    if not seconds or not worker.given_work:  # kept for good, or never made a context (none before a job)
        return
    timer = threading.Timer(seconds, _release, args=(worker, worker.generation, lock, current))
    timer.daemon = True  # never keeps the process alive
    timer.name = "tdp-isolation-idle"  # a fork may go on beside it (``worker_start``)
    timer.start()


def _release(worker: Any, generation: int, lock: threading.Lock, current: Callable[[], Any]) -> None:
    with lock:
        if current() is not worker or worker.generation != generation or worker.tuning:
            return
        modules = set(worker.preloaded)
        worker.stop()
        worker.start()
        worker.let_go()
        worker.sent_at = 0.0  # (start() left given_work False: it holds no context)
        for module in sorted(modules):  # imported ahead again, as when the kernels were decorated
            worker.preloaded.add(module)
            worker._send(pickle.dumps(("preload", module)))
        worker.released += 1
