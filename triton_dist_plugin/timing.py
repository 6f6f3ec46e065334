"""Timing methods, chosen by ``TRITON_BENCH_METHOD`` and run by the built-in timing plugin.

========== ==================================================================================
event      device events around each call with an L2 flush between calls: the active driver's
           own ``do_bench`` (the default on a GPU or NPU; upstream's behaviour)
profiler   kernel-only device time read from the profiler: CUPTI through ``torch.profiler`` on
           CUDA, ``torch_npu``'s profiler on Ascend. Launch overhead is left out, so short
           kernels are timed accurately. ``npu`` is the same method under Triton-Ascend's name.
cudagraph  replay of a captured CUDA graph (``triton.testing.do_bench_cudagraph``)
wall       host wall clock around synchronised calls; chosen automatically under
           ``TRITON_INTERPRET=1``, where there is no device to time
========== ==================================================================================

A method the machine cannot do falls back (to ``event`` on a device, ``wall`` on the CPU) with
one warning; an unknown name is an error that lists the valid ones.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Callable, Optional

from . import _compat, kernel_time, settings
from .hookspecs import hookimpl
from .kernel_time import MethodUnavailable, quantiles_of

ENV = "TRITON_BENCH_METHOD"
METHODS = settings.METHODS
# settings already turned the other spellings (wallclock, cuda_graph) into these names.
_ALIASES = {"npu": "profiler", "": None}

_warned: set = set()
_warn_lock = threading.Lock()


def warn_once(tag: tuple, message: str) -> None:
    with _warn_lock:
        if tag in _warned:
            return
        _warned.add(tag)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def resolve_method(device: str) -> str:
    """The timing method to use on ``device``, from ``TRITON_BENCH_METHOD``."""
    raw = settings.value(ENV)  # checked there: a bad name lists the valid ones
    method = _ALIASES.get(raw, raw)
    if device == "cpu":
        if method not in (None, "wall"):
            warn_once((method, "wall"), f"{ENV}={raw} needs a GPU or NPU; timing with the wall clock instead")
        return "wall"
    if method is None:
        return "event"  # the engine may time short kernels' later rounds by the profiler (``shorts_profiled``)
    if method == "cudagraph" and device != "cuda":
        warn_once((method, device), f"{ENV}=cudagraph needs CUDA graphs, which {device} lacks; using device events")
        return "event"
    return method


SHORTS = "event+profiler"  # the default on CUDA as stored and shown: short kernels' later rounds profiled


def shorts_profiled(device: str, method: str) -> bool:
    """Whether the later rounds of a short kernel may be timed by the profiler: the method is the
    default (unset) on CUDA, where events add a few microseconds of launch gap, and its jitter,
    to every call."""
    raw = settings.value(ENV)
    return device == "cuda" and method == "event" and _ALIASES.get(raw, raw) is None


def method_named(device: str, method: str) -> str:
    """``method`` as a pick is stored and shown: ``SHORTS`` where short kernels are profiled (such
    picks are never served to a tuning that times by events alone, nor the other way round)."""
    return SHORTS if shorts_profiled(device, method) else method


def _as_list(value, quantiles: tuple) -> list[float]:
    """Triton's benchmarkers return a bare float when asked for a single quantile."""
    return [float(value)] * len(quantiles) if isinstance(value, (int, float)) else [float(v) for v in value]


def _synchronize(device: str) -> Callable[[], None]:
    if device == "cpu":
        return lambda: None
    import torch

    return getattr(torch, device).synchronize


def bench_wall(
    call: Callable, device: str, n_warmup: Optional[int], n_repeat: Optional[int], quantiles: tuple
) -> list[float]:
    sync = _synchronize(device)
    for _ in range(1 if n_warmup is None else n_warmup):
        call()
    sync()
    samples = []
    for _ in range(5 if n_repeat is None else max(1, n_repeat)):
        start = time.perf_counter()
        call()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return quantiles_of(samples, quantiles)


def bench_event(
    call: Callable, device: str, n_warmup: Optional[int], n_repeat: Optional[int], quantiles: tuple
) -> list[float]:
    bench = _compat.default_benchmarker()
    if n_warmup is None and n_repeat is None:
        return _as_list(bench(call, quantiles=quantiles), quantiles)
    # Counts were asked for: time exactly that many calls with events and an L2 flush.
    import torch
    from triton.runtime.driver import driver

    mod = getattr(torch, device)
    cache = driver.active.get_empty_cache_for_benchmark()
    for _ in range(3 if n_warmup is None else n_warmup):
        call()
    n = 10 if n_repeat is None else max(1, n_repeat)
    starts = [mod.Event(enable_timing=True) for _ in range(n)]
    ends = [mod.Event(enable_timing=True) for _ in range(n)]
    _run_ahead(mod, n)
    for s, e in zip(starts, ends):
        cache.zero_()
        s.record()
        call()
        e.record()
    mod.synchronize()
    return quantiles_of([s.elapsed_time(e) for s, e in zip(starts, ends)], quantiles)


#: Device cycles to keep the device busy for, per timed call, before a short timed loop...
RUN_AHEAD_CYCLES = 400_000  # about 0.2 ms at Hopper's clock
#: ...for at most this many calls: once the host is that far ahead it stays ahead, since each
#: timed call's L2 flush alone keeps the device busier than the host's queuing of the next.
RUN_AHEAD_MOST = 16


def _run_ahead(mod, n: int) -> None:
    """Give the host a head start on a short timed loop.

    A few timed calls right after the warm-up find the device idle: each call's events then
    also time the host queuing its hooks and launch, which for a short kernel can be more than
    the kernel, and reorders candidates. ``do_bench`` avoids it with long loops; a short loop
    queues behind a device-side sleep instead, so every call is queued before the first runs.
    """
    sleep = getattr(mod, "_sleep", None)  # torch.cuda._sleep; absent elsewhere
    if sleep is not None:
        sleep(RUN_AHEAD_CYCLES * min(n, RUN_AHEAD_MOST))


def bench_cudagraph(
    call: Callable, device: str, n_warmup: Optional[int], n_repeat: Optional[int], quantiles: tuple
) -> list[float]:
    from triton.testing import do_bench_cudagraph

    try:
        return _as_list(do_bench_cudagraph(call, quantiles=quantiles), quantiles)
    except Exception as exc:  # capture refused (allocations, host syncs in hooks...): not the config's fault
        warn_once(("cudagraph", type(exc).__name__), f"CUDA graph capture failed ({exc}); timing with device events")
        return bench_event(call, device, n_warmup, n_repeat, quantiles)


def _npu_profiler(call: Callable, n_warmup: int, n_repeat: int, quantiles: tuple) -> list[float]:
    do_bench_npu = _compat.do_bench_npu()  # Triton-Ascend's profiler-based timer
    if do_bench_npu is None:
        raise MethodUnavailable("Triton-Ascend's do_bench_npu is missing (needs triton-ascend and torch_npu)")
    ms = do_bench_npu(call, warmup=n_warmup, active=n_repeat)
    if isinstance(ms, (list, tuple)):  # the list form answers one value per callable
        (ms,) = ms
    return [float(ms)] * len(quantiles)


def bench_profiler(
    call: Callable, device: str, name: str, n_warmup: Optional[int], n_repeat: Optional[int], quantiles: tuple
) -> list[float]:
    warmup = kernel_time.DEFAULT_RUNS[0] if n_warmup is None else n_warmup
    repeat = kernel_time.DEFAULT_RUNS[1] if n_repeat is None else max(1, n_repeat)
    try:
        if device == "npu":
            return _npu_profiler(call, warmup, repeat, quantiles)
        if device == "cuda":
            if kernel_time.profiler_busy():
                raise MethodUnavailable("a profiler session is running already")
            return kernel_time.cuda_profiler(call, name, warmup, repeat, quantiles)
        raise MethodUnavailable(f"no profiler timing for device {device!r}")
    except MethodUnavailable as exc:
        warn_once(("profiler", device), f"timing by the profiler is unavailable: {exc}; timing with device events")
        return bench_event(call, device, n_warmup, n_repeat, quantiles)  # the round's own counts, where it gave some


class BuiltinTiming:
    """The built-in ``tdp_time_candidate``: dispatches on ``request.method``."""

    @hookimpl(trylast=True)
    def tdp_time_candidate(self, request):
        args = (request.call, request.device)
        counts = (request.n_warmup, request.n_repeat, request.quantiles)
        if request.method == "wall":
            return bench_wall(*args, *counts)
        if request.method == "profiler":
            return bench_profiler(*args, request.kernel_name, *counts)
        if request.method == "cudagraph":
            return bench_cudagraph(*args, *counts)
        return bench_event(*args, *counts)
