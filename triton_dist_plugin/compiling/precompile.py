"""Compile every candidate before timing, so tuning waits for the slowest compile, not the sum.

Two stages, both optional:

1. **Processes** (``forked_compile.py``): forked workers compile the candidates into Triton's
   disk cache while the parent loads each as it arrives. Used on a GPU with Triton's default
   file cache, for 2 or more candidates, where ``fork`` exists. It only fills the cache: any
   trouble (a worker failing or dying, the time limit) leaves the work to stage 2.
2. **Threads.** ``warmup`` in the parent, in threads, for whatever stage 1 did not deliver (all
   candidates when stage 1 does not run).

Under a tuning group, the ranks of one host that share Triton's cache split the candidates
between them, then load each other's from that cache (``warm_all``).

Failures are recorded per candidate and never stop tuning. ``TRITON_AUTOTUNE_PARALLEL_COMPILE=0``
turns both stages off (candidates compile when first timed);
``TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES=0`` turns stage 1 off, a number sets its workers.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from .. import _compat, distributed, settings
from . import forked_compile
from .forked_compile import GAVE_UP, size, warm_one, workers
from .stream import SKIPPED

PARALLEL_COMPILE_ENV = "TRITON_AUTOTUNE_PARALLEL_COMPILE"
COMPILE_WORKERS_ENV = "TRITON_DIST_AUTOTUNE_COMPILE_WORKERS"  # threads (default: CPUs)
MIN_FOR_PROCESSES = 2  # threads hardly overlap Triton's compiles (the GIL), even for two

#: How the last ``warm_all`` went: stage -> (candidates, seconds), and why stage 1 ended early.
last: dict = {}


def warm_all(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], device: Any = None,
             inputs: Optional[dict] = None, group: Any = None, cache_id: Optional[str] = None,
             on_ready: Optional[Callable[[int], None]] = None,
             wanted: Optional[Callable[[int], bool]] = None, give_up: bool = True) -> dict[int, str]:
    """Compile candidate ``i`` as ``warm(*args, **meta, **launch_kwargs[i])`` for every ``i``.

    ``device`` is the parent's current device for stage 1 (``None`` skips it). ``inputs`` gives
    some candidates their own ``(args, meta)`` (those shaped by a config ``pre_hook``). Under a
    ``group``, the ranks that share a compile cache (``cache_id``: the same directory on the same
    host) split the candidates, each compiles its share, and then loads the others' from that
    cache; a candidate that failed on any rank is failed on every rank. Returns ``{i: reason}``
    for the candidates that failed. ``on_ready(i)`` runs (in any thread) as soon as candidate
    ``i`` is compiled and loaded here. Without a group, ``wanted(i)`` is asked before candidate
    ``i`` goes to a forked worker; those turned down are left out, as ``stream.SKIPPED``, and, with
    ``give_up``, a compile far slower than the rest of its step is given up (``forked_compile``).
    """
    inputs = inputs or {}
    count = len(launch_kwargs)
    on = settings.value(PARALLEL_COMPILE_ENV)
    last.clear()
    if count < 2:
        return {}
    if group is None or distributed.world_size(group) < 2:
        return _compile(warm, args, meta, launch_kwargs, list(range(count)), device, inputs, on_ready=on_ready,
                        wanted=wanted, give_up=give_up) if on else {}
    # Every rank of the group takes part in both exchanges, whatever its own settings, so that none
    # waits in vain; a rank that compiles nothing up front shares its cache with no one.
    position, peers = distributed.host_peers(group, cache_id if on else None)
    largest_first = sorted(range(count), key=lambda i: -size(launch_kwargs[i]))
    mine = sorted(largest_first[position::peers])  # round-robin by size: shares of equal work
    failed = _compile(warm, args, meta, launch_kwargs, mine, device, inputs, peers, on_ready) if on else {}
    started = time.perf_counter()
    for i, rank in distributed.failed_anywhere(list(failed), count, group).items():
        failed.setdefault(i, f"failed to compile on rank {rank}")
    waited = time.perf_counter() - started
    theirs = [i for i in range(count) if i not in mine and i not in failed]
    if on and theirs:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, min(len(theirs), workers(COMPILE_WORKERS_ENV, peers)))) as pool:
            for i, reason in zip(theirs, pool.map(lambda i: _compile_one(warm, args, meta, launch_kwargs, inputs, i,
                                                                         True, on_ready), theirs)):
                if reason is not None:
                    failed[i] = reason
        last["shared"] = (f"{len(mine)} of {count} compiled here ({peers} ranks share the cache), waited "
                          f"{waited:.2f}s for the others, loaded {len(theirs)} in {time.perf_counter() - started:.2f}s")
    return failed


def _compile_one(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], inputs: dict, i: int,
                 load: bool = False, on_ready: Optional[Callable[[int], None]] = None) -> Optional[str]:
    kernel, reason = warm_one(warm, *inputs.get(i, (args, meta)), launch_kwargs[i])
    if load and reason is None:
        try:
            kernel.run  # noqa: B018 - Triton loads the module (and builds its launcher) on first access
        except Exception:
            pass  # e.g. too much shared memory: the timing round records it
    if reason is None and on_ready is not None:
        on_ready(i)
    return reason


def _compile(warm: Callable, args: tuple, meta: dict, launch_kwargs: list[dict], todo: list[int], device: Any,
             inputs: dict, share: int = 1, on_ready: Optional[Callable[[int], None]] = None,
             wanted: Optional[Callable[[int], bool]] = None, give_up: bool = False) -> dict[int, str]:
    """Compile the candidates ``todo`` (stage 1, then stage 2); ``{i: reason}`` for failures.
    Those stage 1 skipped or gave up on are not compiled again."""

    def compile_one(i: int, load: bool = False) -> Optional[str]:
        return _compile_one(warm, args, meta, launch_kwargs, inputs, i, load, on_ready)

    failed: dict[int, str] = {}
    rest = list(todo)
    forking = device is not None and len(rest) >= MIN_FOR_PROCESSES and forked_compile.processes_usable()
    if rest and not (forking and forked_compile.caches_ready(warm, device)):
        # The first compiles alone so that per-device caches exist before workers fork or threads race.
        started = time.perf_counter()
        first = compile_one(rest[0])
        if first is not None:
            failed[rest[0]] = first
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
        done = forked_compile.in_processes(warm, args, meta, launch_kwargs, rest, device, on_compiled=load,
                                           inputs=inputs, share=share, notes=last, wanted=wanted, give_up=give_up)
        last["processes"] = (len(rest) - len(done) if done is not None else 0, time.perf_counter() - started)
        skipped = {i: r for i, r in (done or {}).items() if never_timed(r)}
        if skipped:
            failed.update(skipped)
            last["left uncompiled"] = len(skipped)
        rest = [i for i in rest if i not in loaded and i not in skipped]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(len(rest), workers(COMPILE_WORKERS_ENV, share)))) as pool:
        for i, reason in zip(rest, pool.map(compile_one, rest)):
            if reason is not None:
                failed[i] = reason
    last["threads"] = (len(rest), time.perf_counter() - started)
    return failed


def never_timed(reason: Optional[str]) -> bool:
    """A candidate stage 1 left uncompiled as hopeless, or gave up compiling: it is not timed."""
    return reason is not None and (reason == SKIPPED or reason.startswith(GAVE_UP.split(":")[0]))


def summary() -> str:
    """The last ``warm_all``'s stages, for the tuning report's notes."""
    return ", ".join(f"{k} {v[0]} in {v[1]:.2f}s" if isinstance(v, tuple) else f"{k}: {v}" for k, v in last.items())


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
               arg_names: Optional[list] = None, group: Any = None,
               on_ready: Optional[Callable[[int], None]] = None,
               wanted: Optional[Callable[[int], bool]] = None, give_up: bool = True) -> dict:
    """Compile ``configs`` of ``fn`` for a launch with ``args`` and ``kwargs``; ``{config: reason}``
    for those that failed. Under ``group``, ranks sharing a compile cache split the work.
    ``give_up=False`` waits for every compile, however slow (see ``warm_all``)."""
    warm = getattr(fn, "warmup", None)
    if warm is None:
        return {}
    meta = {k: v for k, v in kwargs.items() if k != "warmup"}
    kwargs_of = [launch_kwargs(c) for c in configs]
    inputs = hooked_inputs(configs, args, meta, kwargs_of, arg_names or [])
    device = current_device()
    cache_id = forked_compile.shared_cache_dir() if device is not None else None
    failed = warm_all(warm, args, meta, kwargs_of, device, inputs, group, cache_id, on_ready, wanted, give_up)
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
