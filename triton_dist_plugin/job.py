"""One tuning job: what a miss does, the same for every front end.

Every front end (the patched ``Autotuner``, a subclass's own tuning loop, the function-level
``autotune``, the contextual tuner) hands ``run`` a ``Job`` that says only what differs: how its
stored pick is read and written, how a pick is applied where its users look for it, and how its
candidates are readied and timed. ``run`` does the rest once, in this order, so that a guarantee
added here holds for all of them:

1. every setting checked, before any work or collective;
2. during a CUDA graph capture, the miss answered before anything is read, run, timed or
   exchanged (``frozen``: raise, or a fixed config where the front end can launch one);
3. the stored pick looked up (every record passed ``store.records`` where it entered);
4. the ranks of a group agreeing on the key, the candidates and every check (the effort
   included: it decides which collectives a tuning makes), and on a stored pick: one rank's hit
   is every rank's; where no rank has one, on frozen mode too (a frozen rank would time nothing
   while the others tune) (``distributed.agree``);
5. a hit applied, timing nothing; else, in frozen mode, the miss answered without timing
   (``frozen``); else the candidates tuned, the pick applied and kept on disk by the group's
   writer;
6. the record handed to every ``tdp_on_tuned`` observer, for a hit as for a tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from . import distributed, frozen, settings
from .engine import Outcome
from .hook_objects import TuningRequest


@dataclass
class Found:
    """A pick read from a store: its position among the candidates, its stored timings, where it
    was read from, and the candidates that entry measured fully."""

    index: int
    timings: dict = field(default_factory=dict)
    where: str = ""
    measured: list = field(default_factory=list)
    decision: Optional[dict] = None  # how the stored pick was decided, and what timed it (for the views)
    timer: Optional[str] = None
    stored_in: Optional[str] = None  # the store that answered, where it was not the file store


class Job:
    """What a front end hands ``run``. Subclasses set the fields and override the methods."""

    name: str  # the kernel or function, as messages name it
    key: Any
    labels: list  # the candidates as ranks compare them (their descriptions)
    group: Any = None
    request: TuningRequest
    checks: dict  # the settings that decide which collectives a tuning makes

    def read(self) -> Optional[Found]:
        """The stored pick for this key, or None."""
        return None

    def hit(self, index: int, found: Optional[Found]) -> Any:
        """Apply the stored (or a rank's shared) pick ``index``; ``found``: this rank's entry, when
        it holds that pick. Returns the pick."""
        raise NotImplementedError

    def during_capture(self) -> Any:
        """A CUDA graph is being captured: answer without running anything. By default the miss
        is refused (``frozen.refuse``); a front end that can launch a fixed config untuned
        overrides this with ``frozen.fallback``."""
        frozen.refuse(self.name)

    def frozen_miss(self) -> Any:
        """Frozen mode: answer the miss without timing anything (``frozen.on_miss``)."""
        raise NotImplementedError

    def tune(self) -> Outcome:
        """Ready and time the candidates (``engine.run_candidates``)."""
        raise NotImplementedError

    def keep(self, outcome: Outcome) -> Any:
        """Apply the tuned pick in memory; returns what the front end hands back (the pick, or
        the timings a subclass's loop asked for)."""
        raise NotImplementedError

    def persist(self, outcome: Outcome) -> None:
        """Keep the tuned pick on disk (called on the group's writer only)."""

    def record(self, outcome: Optional[Outcome], best: Any, found: Optional[Found]) -> None:
        """Hand the record to the observers: ``outcome`` None for a hit (``found``: its entry)."""


def run(job: Job) -> Any:
    """The miss of ``job``'s key, as the module's docstring says; returns the pick."""
    settings.validate()
    if frozen.capturing():  # nothing may be timed, synchronised or exchanged inside a capture
        return job.during_capture()
    found = job.read()
    index = found.index if found is not None else None
    if job.group is not None:
        index = distributed.agree(job.group, job.name, job.key, job.labels, index, job.checks, frozen.mode())
    if index is not None:
        mine = found if found is not None and found.index == index else None
        best = job.hit(index, mine)
        job.record(None, best, mine)
        return best
    if frozen.mode():
        return job.frozen_miss()
    outcome = job.tune()
    best = job.keep(outcome)
    if distributed.writes_cache(job.group):
        job.persist(outcome)
    job.record(outcome, best, None)
    return best
