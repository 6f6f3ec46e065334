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


def record(request: TuningRequest, outcome: Optional[Outcome], best: Any, timings: dict, *, method: str,
           cache_hit: bool, measured: Optional[list] = None) -> TuningRecord:
    """Build the record of a finished tuning and hand it to every ``tdp_on_tuned`` observer; what
    the tuning found out (its notes, the model's verdict) comes from ``request.found``.
    ``measured``: without an outcome (a cache hit), the candidates the stored entry measured fully."""
    rec = TuningRecord(
        kernel_name=request.kernel_name, key=request.key, best_config=best, timings=dict(timings or {}),
        failures=dict(outcome.failures) if outcome else {}, bench_time=outcome.bench_time if outcome else None,
        cache_hit=cache_hit, method=method, device=request.device, autotuner=request.autotuner,
        notes=list(request.found.notes), measured=list(outcome.measured) if outcome else list(measured or []),
        model=request.found.model, decision=outcome.decision if outcome else None,
    )
    bus.notify(rec)
    return rec
