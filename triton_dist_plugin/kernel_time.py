"""Kernel-only device time: profiler sessions on CUDA (CUPTI through ``torch.profiler``), the
records they hold, and the quantiles every timer reports. ``timing`` and the engine's rounds time
with these; nothing here decides when."""

from __future__ import annotations

import contextlib
import statistics
import warnings
from typing import Callable

#: The profiler's untimed and timed calls per candidate where the caller asks for none.
DEFAULT_RUNS = (5, 30)


class MethodUnavailable(RuntimeError):
    """This machine cannot time with the requested method; the caller falls back."""


def profiler_busy() -> bool:
    """Whether a profiler session is running already (the user's own): a session of ours inside it
    would end it."""
    import torch

    enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    return bool(enabled()) if enabled is not None else False


def quantiles_of(samples: list[float], quantiles: tuple) -> list[float]:
    samples = sorted(samples)
    if len(samples) == 1:
        return [samples[0]] * len(quantiles)
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return [samples[0] if q <= 0 else samples[-1] if q >= 1 else cuts[round(q * 100) - 1] for q in quantiles]


def cuda_profiler(call: Callable, name: str, n_warmup: int, n_repeat: int, quantiles: tuple) -> list[float]:
    """One candidate's kernel time over ``n_repeat`` calls, each after an L2 flush, in a session of its own
    (the kernels one call launches under ``name`` summed)."""
    import torch
    from triton.runtime.driver import driver

    cache = driver.active.get_empty_cache_for_benchmark()
    for _ in range(n_warmup):
        call()
    torch.cuda.synchronize()
    with _cuda_session() as prof:
        for _ in range(n_repeat):
            cache.zero_()  # an L2 flush before each call, as the event timer and upstream time
            call()
        torch.cuda.synchronize()
    times = kernel_times(prof, name)
    if not times:
        raise MethodUnavailable(f"the CUDA profiler recorded no kernel named {name!r} (is CUPTI available?)")
    per_call = len(times) // n_repeat or 1
    sums = [sum(times[i : i + per_call]) for i in range(0, per_call * (len(times) // per_call), per_call)]
    return quantiles_of(sums, quantiles)


@contextlib.contextmanager
def _cuda_session():
    """A CUDA profiler session, less torch's notice that it keeps events per cycle (a session of
    one cycle loses none), which would otherwise reach the user's output."""
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Profiler clears events")
        prof = profile(activities=[ProfilerActivity.CUDA])
        try:
            prof.start()
        except Exception as exc:  # another session (another thread's), no CUPTI: not the candidate's fault
            raise MethodUnavailable(f"the profiler did not start ({type(exc).__name__}: {exc})") from None
        try:
            yield prof
        finally:
            prof.stop()


def kernel_times(prof, name: str) -> list[float]:
    """The device time (ms) of each kernel a CUDA profiler session recorded under ``name``, in
    launch order: by the kernel's own name, or by a part of it only where none has it whole (the
    L2 flush's kernel never counts, whatever the tuned kernel is called)."""
    from torch.autograd import DeviceType

    device = _current_cuda_device()
    try:  # the raw records: torch's tree of events takes tens of milliseconds to build
        rows = [(e.start_ns(), e.duration_ns() / 1e6, e.name()) for e in prof.profiler.kineto_results.events()
                if e.device_type() == DeviceType.CUDA and not e.is_user_annotation()
                and (device < 0 or e.device_index() in (device, -1))]
    except (AttributeError, TypeError):  # a torch without them
        rows = []
    if not rows:
        rows = [(e.time_range.start, e.device_time / 1e3, e.name) for e in prof.events()
                if e.device_type == DeviceType.CUDA]
    found = [r for r in rows if r[2] == name] or [r for r in rows if name in r[2] and "Fill" not in r[2]]
    return [ms for _, ms, _ in sorted(found, key=lambda r: r[0])]


def _current_cuda_device() -> int:
    """The device this process launches on (another thread's launches on another GPU never count)."""
    import torch

    return torch.cuda.current_device() if torch.cuda.is_available() else -1


def profile_rounds(calls: list, name: str, n_warmup: int, n_repeat: int, rounds: int,
                   quantiles: tuple) -> list[list[float]]:
    """CUDA: each of ``calls`` timed by its kernel's device time alone, in one profiler session
    (a session costs milliseconds, and the first in a process far more: one per candidate and round
    would cost more than the timing), over ``rounds`` interleaved rounds (the given order, then
    backwards, ...) of ``n_repeat`` calls each, an L2 flush before every call, after ``n_warmup``
    untimed calls each. Each quantile is the median over the rounds. Raises ``MethodUnavailable``
    where the records cannot be told apart (a call that launched no such kernel, or more than
    one), and what a call raises: the caller then times each alone, which says which failed."""
    import torch
    from triton.runtime.driver import driver

    cache = driver.active.get_empty_cache_for_benchmark()
    for call in calls:
        for _ in range(n_warmup):
            call()
    turns = [list(range(len(calls)))[:: 1 if r % 2 == 0 else -1] for r in range(rounds)]
    torch.cuda.synchronize()
    with _cuda_session() as prof:
        for turn in turns:
            for i in turn:
                for _ in range(n_repeat):
                    cache.zero_()
                    calls[i]()
        torch.cuda.synchronize()
    times = kernel_times(prof, name)
    if len(times) != rounds * len(calls) * n_repeat:
        raise MethodUnavailable(f"the CUDA profiler recorded {len(times)} kernels named {name!r} for "
                                f"{rounds * len(calls) * n_repeat} calls")
    per: list = [[] for _ in calls]
    at = 0
    for turn in turns:
        for i in turn:
            per[i].append(quantiles_of(times[at : at + n_repeat], quantiles))
            at += n_repeat
    return [[statistics.median(r[q] for r in found) for q in range(len(quantiles))] for found in per]


