"""Which benchmarker times an ``Autotuner``'s candidates, and whether screening may stand in.

A kernel's own ``do_bench=`` wins over every hook. Otherwise the plugin's timing goes through
``tdp_time_candidate``: ``DoBench`` replaces Triton 3.4+'s ``do_bench`` property while the plugin
is active, and ``init_wrapper`` hands Triton 3.2's eager ``__init__`` a stand-in, so neither asks
for a GPU driver where none is needed.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .. import _compat, bus, engine, settings, timing
from . import kernel_state
from .kernel_state import state_of

SEARCH_ENV = "TRITON_DIST_AUTOTUNE_SEARCH"  # "halving" (default) or "exhaustive"


def user_do_bench(instance: Any):
    """The kernel's own ``do_bench=`` (it wins over every hook), or None.

    The benchmarker upstream builds from the deprecated ``warmup=``/``rep=``/``use_cuda_graph=``
    counts as the kernel's own on a device; under the interpreter, where it would ask for a
    driver that does not exist, the plugin's own timing stands in.
    """
    # ``tuner.do_bench = f`` (allowed upstream: 3.4+'s ``do_bench`` is a cached property, 3.2's an
    # attribute) wins over ``do_bench=`` given at construction, as an instance attribute does there.
    bench = instance.__dict__.get("do_bench")
    if bench is None or isinstance(bench, HookBench) or bench is _eager_marker or _is_default(bench):
        bench = instance.__dict__.get("_do_bench") if _compat.LAZY_BENCH else None
    if bench is not None and _compat.interpret() and _from_deprecated_counts(bench):
        return None
    return bench


def _from_deprecated_counts(bench: Any) -> bool:
    """The benchmarker upstream's ``__init__`` builds from ``warmup=``/``rep=``/``use_cuda_graph=``."""
    return getattr(bench, "__module__", None) == _compat.Autotuner.__module__ and \
        getattr(bench, "__name__", None) == "<lambda>"


def screen_for(instance: Any, do_bench: Optional[Callable]) -> Optional[engine.Screen]:
    """The screening rounds for this kernel, or None to time every candidate fully.

    Screening times with device events, as Triton's ``do_bench`` does, so it stands in only for
    that: the default benchmarker, or the one upstream builds from the deprecated ``warmup=`` and
    ``rep=`` (``do_bench`` with other budgets; the finalists are still timed by it). A kernel's
    own timer, or ``use_cuda_graph=True``, measures what events may not: it times every candidate.
    """
    if own_timer(instance, do_bench):
        return None
    return engine.Screen() if settings.value(SEARCH_ENV) != "exhaustive" else None


def own_timer(instance: Any, do_bench: Optional[Callable]) -> bool:
    """``do_bench`` (``user_do_bench``'s) is the kernel's own timer, not upstream's default one
    with other budgets (``warmup=``/``rep=``, unless with ``use_cuda_graph=True``)."""
    if do_bench is None:
        return False
    return not _from_deprecated_counts(do_bench) or bool(getattr(instance, "use_cuda_graph", False))


def _is_default(bench: Any) -> bool:
    """The driver's own benchmarker, resolved (and kept) before the plugin was active."""
    try:
        return bench is _compat.default_benchmarker()
    except Exception:
        return False


class HookBench:
    """Stands in for the driver's benchmarker: times through ``tdp_time_candidate``.

    Used for code that calls ``self.do_bench(kernel_call, quantiles)`` itself. Once the plugin
    is deactivated it defers to the driver's own benchmarker again.
    """

    def __init__(self, tuner: Any):
        self.tuner = tuner

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8), **kwargs):
        if not kernel_state.active:
            return _compat.default_benchmarker()(kernel_call, quantiles=quantiles, **kwargs)
        device = _compat.active_device()
        name = state_of(self.tuner).name if self.tuner is not None else "kernel"
        cand = engine.CandidateRequest(call=kernel_call, config=None, kernel_name=name, key=(), device=device,
                                       method=timing.resolve_method(device), quantiles=tuple(quantiles or (0.5,)))
        value = bus.first_result("tdp_time_candidate", bus.as_timing, request=cand)
        return value if quantiles else value[0]


def _eager_marker(kernel_call, quantiles=(0.5, 0.2, 0.8), **kwargs):
    """Passed as ``do_bench`` to Triton 3.2's eager ``__init__`` so it does not ask for a driver."""
    return HookBench(None)(kernel_call, quantiles=quantiles, **kwargs)


class DoBench:
    """Replaces 3.4+'s ``do_bench`` cached property while active: the kernel's own benchmarker,
    else one that times through the hooks. Like the property it replaces it defines only
    ``__get__``, so ``tuner.do_bench = f`` stores ``f`` on the instance, where it wins."""

    def __init__(self, doc: Optional[str] = None):
        self.__doc__ = doc

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        own = instance.__dict__.get("_do_bench")
        return own if own is not None else HookBench(instance)


def init_wrapper(wrapped, instance, args, kwargs):
    """Triton < 3.4 resolves the benchmarker in ``__init__``: hand it ours so no driver is needed."""
    import inspect

    bound = inspect.signature(wrapped).bind(*args, **kwargs)
    if bound.arguments.get("do_bench") is None and "do_bench" in inspect.signature(wrapped).parameters:
        bound.arguments["do_bench"] = _eager_marker
    wrapped(*bound.args, **bound.kwargs)
    if instance.__dict__.get("do_bench") is _eager_marker:
        instance.do_bench = HookBench(instance)
