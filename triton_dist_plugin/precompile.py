"""Compile every candidate before timing, so tuning waits for the slowest compile, not the sum.

Two stages, both optional:

1. **Processes.** Much of Triton's compiler holds the GIL (code generation, Python passes), so
   threads overlap only partly. Forked workers compile the candidates into Triton's on-disk
   cache, one candidate per task, with no GPU call (the device is the parent's, known in
   advance); as each candidate arrives, the parent takes it from the disk cache and loads it.
   Used on a GPU with Triton's default file cache, for 2 or more candidates, where ``fork``
   exists. It only fills the cache: any trouble (a worker failing or dying, the time limit)
   leaves the work to stage 2.
2. **Threads.** ``warmup`` in the parent, in threads, for whatever stage 1 did not deliver (all
   candidates when stage 1 does not run).

Failures are recorded per candidate and never stop tuning. ``TRITON_AUTOTUNE_PARALLEL_COMPILE=0``
turns both stages off (candidates compile when first timed);
``TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0`` turns stage 1 off, a number sets its workers.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import threading
import time
import warnings
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from . import _compat, engine, settings

PARALLEL_COMPILE_ENV = "TRITON_AUTOTUNE_PARALLEL_COMPILE"
COMPILE_WORKERS_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_WORKERS"  # threads (default: CPUs)
COMPILE_PROCESSES_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES"  # forked workers (default: CPUs; 0: off)
PROCESS_TIMEOUT_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_TIMEOUT"  # seconds for stage 1 (default 300)
MIN_FOR_PROCESSES = 2  # threads hardly overlap Triton's compiles (the GIL), even for two

#: How the last ``warm_all`` went: stage -> (candidates, seconds), and why stage 1 ended early.
last: dict = {}
#: The work forked workers read (set just before the fork, so it needs no pickling).
_job: Optional[tuple] = None
_fork_lock = threading.Lock()


def _workers(env: str) -> int:
    count = settings.value(env)
    return count if count is not None else (os.cpu_count() or 4)


def warm_all(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], device: Any = None,
             inputs: Optional[dict] = None) -> dict[int, str]:
    """Compile candidate ``i`` as ``warm(*args, **meta, **launch_kwargs[i])`` for every ``i``.

    ``device`` is the parent's current device for stage 1 (``None`` skips it). ``inputs`` gives
    some candidates their own ``(args, meta)`` (those shaped by a config ``pre_hook``). Returns
    ``{i: reason}`` for the candidates that failed.
    """
    inputs = inputs or {}
    if not settings.value(PARALLEL_COMPILE_ENV) or len(launch_kwargs) < 2:
        return {}

    def compile_one(i: int, load: bool = False) -> Optional[str]:
        kernel, reason = _warm_one(warm, *inputs.get(i, (args, meta)), launch_kwargs[i])
        if load and reason is None:
            try:
                kernel.run  # noqa: B018 - Triton loads the module (and builds its launcher) on first access
            except Exception:
                pass  # e.g. too much shared memory: the timing round records it
        return reason

    failed: dict[int, str] = {}
    last.clear()
    rest = list(range(len(launch_kwargs)))
    forking = device is not None and len(rest) >= MIN_FOR_PROCESSES and processes_usable()
    if not (forking and caches_ready(warm, device)):
        # The first compiles alone so that per-device caches exist before workers fork or threads race.
        started = time.perf_counter()
        first = compile_one(0)
        if first is not None:
            failed[0] = first
        rest = rest[1:]
        last["first"] = (1, time.perf_counter() - started)
    if forking and len(rest) >= MIN_FOR_PROCESSES:
        started = time.perf_counter()
        loaded: set = set()

        def load(i: int) -> None:
            # While workers compile the others, take this one from the disk cache and load it, so
            # that one-time work at a first launch (building Triton's launcher) overlaps them too.
            loaded.add(i)
            reason = compile_one(i, load=True)
            if reason is not None:
                failed[i] = reason

        # A worker's failure is not the candidate's verdict (the worker may lack something the
        # parent has); the thread stage below compiles it again and records its own reason.
        done = in_processes(warm, args, meta, launch_kwargs, rest, device, on_compiled=load, inputs=inputs)
        last["processes"] = (len(rest) - len(done) if done is not None else 0, time.perf_counter() - started)
        rest = [i for i in rest if i not in loaded]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(len(rest), _workers(COMPILE_WORKERS_ENV)))) as pool:
        for i, reason in zip(rest, pool.map(compile_one, rest)):
            if reason is not None:
                failed[i] = reason
    last["threads"] = (len(rest), time.perf_counter() - started)
    return failed


def _warm_one(warm: Callable, args: tuple, meta: dict, launch_kwargs: dict) -> tuple[Any, Optional[str]]:
    """Compile one candidate: ``(kernel, None)``, or ``(None, reason)`` if it failed."""
    try:
        return warm(*args, **meta, **launch_kwargs), None
    except Exception as exc:
        return None, engine.describe(exc)


def summary() -> str:
    """The last ``warm_all``'s stages, for the tuning report's notes."""
    return ", ".join(f"{k} {v[0]} in {v[1]:.2f}s" if isinstance(v, tuple) else f"{k}: {v}" for k, v in last.items())


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
    for step in (lambda: jit.cache_key, backend.hash, _triton_key):
        try:
            step()
        except Exception:
            pass


def _triton_key() -> Any:
    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # older releases keep it beside the compiler
        from triton.compiler.compiler import triton_key
    return triton_key()


def processes_usable() -> bool:
    """Stage 1 helps only if workers' compiles land where the parent will find them."""
    if _workers(COMPILE_PROCESSES_ENV) < 2 or _compat.interpret():
        return False
    if _compat.IS_ASCEND and settings.value(COMPILE_PROCESSES_ENV) is None:
        return False  # not yet run on an NPU host: opt in with a worker count
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    if os.environ.get("TRITON_CACHE_MANAGER") or _compat.env_flag("TRITON_ALWAYS_COMPILE"):
        return False
    knobs = _compat.knobs
    if knobs is not None:
        from triton.runtime.cache import FileCacheManager

        if getattr(knobs.cache, "manager_class", None) not in (None, FileCacheManager):
            return False
        if getattr(knobs.compilation, "always_compile", False):
            return False
    return True


def in_processes(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], todo: list[int],
                 device: Any, on_compiled: Optional[Callable[[int], None]] = None,
                 inputs: Optional[dict] = None) -> Optional[dict[int, str]]:
    """Stage 1: compile ``todo`` in forked workers; ``{i: reason}`` of failures, or None if the
    stage itself could not finish (the caller then compiles the rest in threads).

    ``on_compiled(i)`` runs here, in the parent, as soon as a worker has compiled candidate ``i``.
    ``inputs`` maps a candidate to its own ``(args, meta)`` (see ``hooked_inputs``).
    """
    inputs = inputs or {}
    if not _fork_lock.acquire(blocking=False):  # another thread is in stage 1: use threads
        return None
    try:
        return _in_processes(warm, args, meta, launch_kwargs, todo, device, on_compiled, inputs)
    finally:
        _fork_lock.release()


def _in_processes(warm, args, meta, launch_kwargs, todo, device, on_compiled, inputs):
    global _job
    deadline = time.perf_counter() + settings.value(PROCESS_TIMEOUT_ENV)
    _job = (warm, args, meta, launch_kwargs, device, inputs)
    pool = None
    started = time.perf_counter()
    results: dict = {}
    try:
        workers = min(len(todo), _workers(COMPILE_PROCESSES_ENV))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "fork() in a multi-threaded process"
            pool = multiprocessing.get_context("fork").Pool(workers)
        forked = time.perf_counter() - started
        # Largest candidates first: they compile longest, and the small ones then fill the gaps.
        order = sorted(todo, key=lambda i: -_size(launch_kwargs[i]))
        arrivals = pool.imap_unordered(_compile_in_worker, order, chunksize=1)
        for _ in order:
            i, reason, begin, end = arrivals.next(max(0.0, deadline - time.perf_counter()))
            results[i] = (reason, begin, end)
            if reason is None and on_compiled is not None:
                on_compiled(i)
    except Exception as exc:
        last["stage 1 ended"] = engine.describe(exc)
        return None
    finally:
        _job = None
        if pool is not None:
            pool.terminate()
            pool.join()
    # Where stage 1's time went (perf_counter is the same monotonic clock in every process).
    wall = max(end for _, _, end in results.values()) - started
    busy = sum(end - begin for _, begin, end in results.values())
    last["workers"] = (f"{workers} forked in {forked:.2f}s, first compile began after "
                       f"{min(begin for _, begin, _ in results.values()) - started:.2f}s, "
                       f"{busy / (workers * wall):.0%} busy")
    return {i: reason for i, (reason, _, _) in results.items() if reason is not None}


def _size(kwargs: dict) -> int:
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
    _, reason = _warm_one(warm, args, meta, launch_kwargs[i])
    # Plain text: the exception itself may not pickle, and the parent re-checks failures anyway.
    return i, None if reason is None else str(reason), begin, time.perf_counter()


def current_device() -> Any:
    """The parent's current device, for stage 1 (None where there is no GPU driver)."""
    if _compat.interpret():
        return None
    try:
        from triton.runtime.driver import driver

        return driver.active.get_current_device()
    except Exception:
        return None


def precompile(fn: Any, args: tuple, kwargs: dict, configs: list, launch_kwargs: Callable[[Any], dict],
               arg_names: Optional[list] = None) -> dict:
    """Compile ``configs`` of ``fn`` for a launch with ``args`` and ``kwargs``; ``{config: reason}``
    for those that failed."""
    warm = getattr(fn, "warmup", None)
    if warm is None:
        return {}
    meta = {k: v for k, v in kwargs.items() if k != "warmup"}
    kwargs_of = [launch_kwargs(c) for c in configs]
    inputs = hooked_inputs(configs, args, meta, kwargs_of, arg_names or [])
    failed = warm_all(warm, args, meta, kwargs_of, current_device(), inputs)
    return {configs[i]: reason for i, reason in failed.items()}


def hooked_inputs(configs: list, args: tuple, meta: dict, kwargs_of: list[dict], arg_names: list) -> dict:
    """``{i: (args, meta)}``: each config with a ``pre_hook``, compiled on the arguments its hook shapes.

    A config's ``pre_hook`` runs before each of its launches and may change what the compiler
    sees (Liger-Kernel's set a TMA ``TensorDescriptor``'s block shape). Each hook runs here, in
    this thread, one config at a time, on the launch's own arguments, as upstream runs it before
    the launch that compiles; then a snapshot of the arguments it may have changed (copies of
    every non-tensor object, tensors shared) is what that candidate compiles with, so the
    compiles themselves still run in parallel. A hook that raises leaves its candidate on the
    shared arguments; its timed launch runs the hook again and reports the failure.
    """
    inputs: dict = {}
    named = dict(zip(arg_names, args))
    for i, config in enumerate(configs):
        hook = getattr(config, "pre_hook", None)
        if hook is None:
            continue
        try:
            hook({**named, **meta, "warmup": False, **kwargs_of[i]})
        except Exception:
            continue
        inputs[i] = (tuple(_snapshot(a) for a in args),
                     {k: (_snapshot(v) if k in arg_names else v) for k, v in meta.items()})
    return inputs


def _snapshot(value: Any) -> Any:
    """A copy of a launch argument as it is now: objects copied (their list attributes too),
    tensors and plain values shared."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)) or hasattr(value, "data_ptr"):
        return value
    try:
        clone = copy.copy(value)
    except Exception:
        return value
    attrs = getattr(clone, "__dict__", None)
    if isinstance(attrs, dict):
        for name, attr in list(attrs.items()):
            if isinstance(attr, (list, dict)):
                attrs[name] = copy.copy(attr)
    return clone
