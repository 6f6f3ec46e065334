"""What a tuning comes to: the engine's ``Outcome``, and the record every ``tdp_on_tuned``
observer receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .. import bus
from ..hook_objects import TuningRecord, TuningRequest


@dataclass
class Outcome:
    best: Any
    timings: dict
    failures: dict
    bench_time: float
    #: the candidates measured fully (the others' timings are from a screening round)
    measured: list = field(default_factory=list)
    #: how the pick was decided among the finalists (``settle.py``), or None
    decision: Optional[dict] = None


OWN_DO_BENCH = "<the kernel's own do_bench>"  # in ``found.timers``: what timed, where no plugin did


def timer_of(timers: Any) -> Optional[str]:
    """What timed, in words, where it was not the built-in timer; else None. ``timers``: names."""
    names = sorted(str(t) for t in timers or ())
    return ", ".join("the kernel's own do_bench" if n == OWN_DO_BENCH else f"plugin {n!r}" for n in names) or None


def shown_timer(request: TuningRequest) -> Optional[str]:
    """What timed the times a tuning's views show (its full measurement), where the built-in timer
    did not; a plugin that timed only the screening rounds is not it."""
    found = request.found
    return timer_of(found.shown_by if found.shown_by is not None else found.timers)


def record(request: TuningRequest, outcome: Optional[Outcome], best: Any, timings: dict, *, method: str,
           cache_hit: bool, measured: Optional[list] = None, decision: Optional[dict] = None,
           timer: Optional[str] = None, stored_in: Optional[str] = None) -> TuningRecord:
    """Build the record of a finished tuning and hand it to every ``tdp_on_tuned`` observer; what
    the tuning found out (its notes, the model's verdict, what timed) comes from ``request.found``.
    Without an outcome (a cache hit), ``measured``, ``decision`` and ``timer`` are the stored entry's."""
    rec = TuningRecord(
        kernel_name=request.kernel_name, key=request.key, best_config=best, timings=dict(timings or {}),
        failures=dict(outcome.failures) if outcome else {}, bench_time=outcome.bench_time if outcome else None,
        cache_hit=cache_hit, method=method, device=request.device, autotuner=request.autotuner,
        notes=list(request.found.notes), measured=list(outcome.measured) if outcome else list(measured or []),
        model=request.found.model, decision=outcome.decision if outcome else decision,
        timer=shown_timer(request) if outcome else timer, stored_in=None if outcome else stored_in,
    )
    bus.notify(rec)
    return rec
