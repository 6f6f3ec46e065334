"""Stage 1 of compiling ahead: forked workers compile candidates into Triton's disk cache.

Much of Triton's compiler holds the GIL (code generation, Python passes), so threads overlap
only partly. Forked workers compile the candidates into Triton's on-disk cache, one candidate per
task, with no GPU call (the device is the parent's, known in advance); as each candidate arrives,
the parent takes it from the disk cache and loads it. Other processes of the host find the same
files there too (``shared_cache_dir``), which is what lets ranks split the work.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Optional

from .. import _compat, failures, settings
from . import prestart
from .crew import Crew
from .stream import SKIPPED

COMPILE_PROCESSES_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES"  # forked workers (default: CPUs; 0: off)
PROCESS_TIMEOUT_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_TIMEOUT"  # seconds for stage 1 (default 300)
STRAGGLER_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_STRAGGLER"  # times the median compile before giving one up
STRAGGLER_MIN_S = 10.0  # ...and never before this many seconds
GAVE_UP = "gave up compiling it: {:.0f}s, and the rest of its step took {:.2f}s at the median"

#: The work forked workers read (set just before the fork, so it needs no pickling).
_job: Optional[tuple] = None
_fork_lock = threading.Lock()


def workers(env: str, share: int = 1) -> int:
    """The worker count ``env`` sets, else this process's share of the CPUs (``share`` processes
    of one host compile at once)."""
    count = settings.value(env)
    return count if count is not None else max(1, (os.cpu_count() or 4) // share)


def warm_one(warm: Callable, args: tuple, meta: dict, launch_kwargs: dict) -> tuple[Any, Optional[str]]:
    """Compile one candidate: ``(kernel, None)``, or ``(None, reason)`` if it failed."""
    try:
        return warm(*args, **meta, **launch_kwargs), None
    except Exception as exc:
        return None, failures.reason_of(exc)


def caches_ready(warm: Callable, device: Any) -> bool:
    """Create the kernel's per-device caches (target, backend, binder) here in the parent, where
    asking the GPU is allowed; forked workers then find them. False where Triton builds them
    some other way (then the first candidate compiles in the parent first)."""
    jit = _compat.jit_function(getattr(warm, "__self__", None))
    caches = getattr(jit, "device_caches", None)
    if not isinstance(caches, defaultdict):
        return False
    try:
        backend = caches[device][-2]
    except Exception:
        return False
    _prime(jit, backend)
    return True


def _prime(jit: Any, backend: Any) -> None:
    """Compute once here what every compile's cache key needs and Triton memoises per process (the
    hash of Triton's own sources, the backend's tool versions, the kernel's source hash), so that
    forked workers inherit it instead of each computing it again."""
    prestart.prestarted()
    for step in (lambda: jit.cache_key, backend.hash, _compat.triton_key):
        try:
            step()
        except Exception:
            pass


def processes_usable() -> bool:
    """Stage 1 helps only if workers' compiles land where the parent will find them."""
    if workers(COMPILE_PROCESSES_ENV) < 2 or _compat.interpret():
        return False
    if _compat.IS_ASCEND and settings.value(COMPILE_PROCESSES_ENV) is None:
        return False  # not yet run on an NPU host: opt in with a worker count
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    return shared_cache_dir() is not None


def in_processes(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], todo: list[int],
                 device: Any, on_compiled: Optional[Callable[[int], None]] = None,
                 inputs: Optional[dict] = None, share: int = 1,
                 notes: Optional[dict] = None, wanted: Optional[Callable[[int], bool]] = None,
                 give_up: bool = False) -> Optional[dict[int, str]]:
    """Stage 1: compile ``todo`` in forked workers; ``{i: reason}`` of failures, or None if the
    stage itself could not finish (the caller then compiles the rest in threads).

    ``on_compiled(i)`` runs here, in the parent, as soon as a worker has compiled candidate ``i``.
    ``inputs`` maps a candidate to its own ``(args, meta)`` (see ``precompile.hooked_inputs``);
    ``notes`` receives where the stage's time went. Before handing candidate ``j`` to a worker the
    parent asks ``wanted(j)`` (a compile under way always finishes); one turned down comes back as
    ``stream.SKIPPED``, unless a later arrival makes it wanted again: then it goes back to the workers.
    A worker that dies ends the stage (None) at once.
    With ``give_up``, once every other candidate is in, those still compiling after
    ``TRITON_DIST_AUTOTUNE_COMPILE_STRAGGLER`` times the median compile (at least 10 s) are given up
    (their workers killed; Triton writes its cache entries whole, so none is left half-written)
    and come back with a reason starting ``gave up compiling``: such a compile is almost always a
    config that spills, and waiting for it would hold up the whole step.
    """
    inputs = inputs or {}
    if not _fork_lock.acquire(blocking=False):  # another thread is in stage 1: use threads
        return None
    try:
        return _in_processes(warm, args, meta, launch_kwargs, todo, device, on_compiled, inputs, share,
                             {} if notes is None else notes, wanted, give_up)
    finally:
        _fork_lock.release()


def _in_processes(warm, args, meta, launch_kwargs, todo, device, on_compiled, inputs, share, notes, wanted,
                  give_up):
    global _job
    deadline = time.perf_counter() + settings.value(PROCESS_TIMEOUT_ENV)
    factor = settings.value(STRAGGLER_ENV) if give_up else 0.0
    _job = (warm, args, meta, launch_kwargs, device, inputs)
    started = time.perf_counter()
    # Largest candidates first: they compile longest, and the small ones then fill the gaps.
    order = sorted(todo, key=lambda i: -size(launch_kwargs[i]))
    pending = collections.deque(order)
    crew = Crew(_compile_in_worker)
    results: dict = {}  # i -> (reason, begin, end)
    running: dict = {}  # i -> when it was handed to a worker

    def hand_out(worker: Any) -> None:
        """The next wanted candidate to this idle worker; those turned down meanwhile come back skipped."""
        _turn_down(pending, results, wanted, first=True)
        if pending:
            j = pending.popleft()
            crew.give(worker, j)
            running[j] = time.perf_counter()

    try:
        count = min(len(todo), workers(COMPILE_PROCESSES_ENV, share))
        if count < 1:
            raise ValueError("no compile workers to start")
        while len(crew.workers) < count and pending:  # each starts on its candidate as soon as it exists
            hand_out(crew.fork())
        forked = time.perf_counter() - started
        while len(results) < len(order):
            if time.perf_counter() >= deadline:
                raise TimeoutError(f"stage 1 took over {settings.value(PROCESS_TIMEOUT_ENV)}s")
            arrivals = crew.arrivals(min(0.25, max(0.0, deadline - time.perf_counter())))
            if not arrivals:
                if factor:  # only stragglers may hold up the end: the queue is judged anew first
                    _turn_down(pending, results, None if crew.idle() else wanted)
                    _give_up(order, results, running, factor, notes)
                continue
            for worker, (i, reason, begin, end) in arrivals:
                running.pop(i, None)
                results[i] = (reason, begin, end)
                hand_out(worker)  # before the parent's own work on this one, so the worker never idles
            for _, (i, reason, _, _) in arrivals:
                if reason is None and on_compiled is not None:
                    on_compiled(i)
            if wanted is not None and any(r is None for _, (_, r, _, _) in arrivals):  # new evidence:
                for j in order:  # one skipped too early is compiled now, while the workers are still here
                    if j in results and results[j][0] == SKIPPED and wanted(j):
                        del results[j]
                        pending.append(j)
                for worker in crew.idle():
                    hand_out(worker)
    except Exception as exc:
        notes["stage 1 ended"] = failures.reason_of(exc)
        return None
    finally:
        _job = None
        crew.close()
    notes["workers"] = _timeline(results, started, forked, count)
    return {i: reason for i, (reason, _, _) in results.items() if reason is not None}


def _turn_down(pending: Any, results: dict, wanted: Optional[Callable[[int], bool]], first: bool = False) -> None:
    """Record the queued candidates ``wanted`` turns down as skipped (with ``first``, only those ahead
    of the first wanted one; without ``wanted``, none)."""
    for j in list(pending) if wanted is not None else ():
        if wanted(j):
            if first:
                return
            continue
        pending.remove(j)
        results[j] = (SKIPPED, time.perf_counter(), time.perf_counter())


def _timeline(results: dict, started: float, forked: float, count: int) -> str:
    """Where stage 1's time went (perf_counter is the same monotonic clock in every process)."""
    wall = max(end for _, _, end in results.values()) - started
    busy = sum(end - begin for _, begin, end in results.values())
    return (f"{count} forked in {forked:.2f}s, first compile began after "
            f"{min(begin for _, begin, _ in results.values()) - started:.2f}s, "
            f"{busy / (count * wall):.0%} busy, longest compile "
            f"{max(end - begin for _, begin, end in results.values()):.2f}s")


def _give_up(order: list, results: dict, running: dict, factor: float, notes: dict) -> None:
    """If every candidate not yet in is a straggler under way (see ``in_processes``), record them as
    given up in ``results`` and count them in ``notes``. ``running`` maps each under way to when it
    was handed out."""
    pending = [j for j in order if j not in results]
    if not pending or any(j not in running for j in pending):
        return  # some still wait for a worker: not the end of the step yet
    took = sorted(end - begin for reason, begin, end in results.values() if reason is None)
    if not took:
        return
    median = took[len(took) // 2]
    now = time.perf_counter()
    if any(now - running[j] < max(STRAGGLER_MIN_S, factor * median) for j in pending):
        return
    for j in pending:
        results[j] = (GAVE_UP.format(now - running[j], median), running[j], now)
    notes["gave up"] = len(pending)


def size(kwargs: dict) -> int:
    size = 1
    for value in kwargs.values():
        if type(value) is int and value > 1:
            size *= value
    return size


def _compile_in_worker(i: int) -> tuple[int, Optional[str], float, float]:
    """In a forked worker: compile candidate ``i`` into the disk cache without touching the GPU.

    Only ``warmup`` runs here, which needs the current device and stream but never launches; both
    are answered from the parent's values, since CUDA cannot be used again after a fork.
    """
    warm, args, meta, launch_kwargs, device, inputs = _job  # type: ignore[misc]
    try:
        from triton.runtime.driver import driver

        active = driver.active
        active.get_current_device = lambda: device
        active.get_current_stream = lambda *_: 0
    except Exception:  # no GPU driver (Triton 3.2 finds out only here): nothing to answer for
        pass
    begin = time.perf_counter()
    args, meta = inputs.get(i, (args, meta))
    _, reason = warm_one(warm, args, meta, launch_kwargs[i])
    # Plain text: the exception itself may not pickle, and the parent re-checks failures anyway.
    return i, None if reason is None else str(reason), begin, time.perf_counter()


def shared_cache_dir() -> Optional[str]:
    """The directory of Triton's file cache, where other processes of this host find what this
    one compiles; None when compiles are not shared that way (another cache manager, always
    compiling, the interpreter)."""
    if _compat.interpret() or os.environ.get("TRITON_CACHE_MANAGER") or _compat.env_flag("TRITON_ALWAYS_COMPILE"):
        return None
    knobs = _compat.knobs
    if knobs is not None:
        from triton.runtime.cache import FileCacheManager

        if getattr(knobs.cache, "manager_class", None) not in (None, FileCacheManager):
            return None
        if getattr(knobs.compilation, "always_compile", False):
            return None
        directory = getattr(knobs.cache, "dir", None)
    else:  # releases before knobs: the variable, else Triton's default
        directory = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    return os.path.realpath(directory) if directory else None


