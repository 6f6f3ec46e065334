"""Parallel compilation and screening for tuner subclasses that run their own tuning loop.

FlagGems' ``LibTuner`` and Triton-Ascend's ``AutoTilingTuner`` replace ``Autotuner.run`` with
their own, which calls ``self.prune_configs(kwargs)`` and then ``self._bench(*args, config=c,
**kwargs)`` for each survivor, one at a time. Timed one at a time, each candidate compiles when
first timed and nothing is screened. So the patched ``prune_configs`` remembers its survivors
for this thread (``expect``); the first ``_bench`` of one of them compiles all of them in
parallel and times all of them through the engine, screening included (``answer``); every
``_bench`` of that loop then returns its candidate's timing from that one run. Candidates the
screening dropped report their screening time; any that would undercut the pick is measured
fully too (``settle``), so the subclass's own ``min`` lands on a fully measured candidate.

Anything else (a ``_bench`` of a config that was not pruned just before, other arguments,
``TRITON_AUTOTUNE_PARALLEL_COMPILE=0``) is timed alone, as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .. import settings

_local = threading.local()


@dataclass
class Batch:
    tuner: Any
    configs: list
    pending: set = field(default_factory=set)  # ids of the configs whose timing was not asked yet
    timings: Optional[dict] = None  # id(config) -> timing, once run
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def enabled() -> bool:
    return settings.value("TRITON_AUTOTUNE_PARALLEL_COMPILE")


def expect(tuner: Any, configs: list) -> None:
    """``prune_configs`` of ``tuner`` returned ``configs`` outside the plugin's own tuning."""
    _local.batch = Batch(tuner, list(configs), {id(c) for c in configs}) if len(configs) > 1 and enabled() else None


def forget() -> None:
    _local.batch = None


def answer(tuner: Any, config: Any, args: tuple, kwargs: dict,
           run: Callable[[list], dict]) -> Optional[list]:
    """The timing of ``config`` from its batch, running the batch first if needed; None when
    ``config`` is not part of a batch of this tuner with these arguments."""
    batch: Optional[Batch] = getattr(_local, "batch", None)
    if batch is None or batch.tuner is not tuner or id(config) not in batch.pending:
        _local.batch = None
        return None
    if batch.timings is None:
        batch.args, batch.kwargs = args, dict(kwargs)
        try:
            timings = run(batch.configs)
        except BaseException:
            _local.batch = None
            raise
        batch.timings = {id(c): t for c, t in timings.items()}
    elif not _same(args, kwargs, batch):
        _local.batch = None
        return None
    batch.pending.discard(id(config))
    if not batch.pending:
        _local.batch = None
    return list(batch.timings[id(config)])


def _same(args: tuple, kwargs: dict, batch: Batch) -> bool:
    return same_launch(args, kwargs, batch.args, batch.kwargs)


def same_launch(args: tuple, kwargs: dict, then_args: tuple, then_kwargs: dict) -> bool:
    """The same launch: the very same argument objects (a new tensor means another launch)."""
    return (len(args) == len(then_args) and all(a is b for a, b in zip(args, then_args))
            and kwargs.keys() == then_kwargs.keys() and all(kwargs[k] is then_kwargs[k] for k in kwargs))


def settle(timings: dict, measured: set, remeasure: Callable[[list], dict]) -> dict:
    """Measure fully every candidate whose screening time is below the best full measurement,
    until the fastest reported timing is a full one. ``measured`` holds those measured fully."""
    timings = dict(timings)
    for _ in range(len(timings)):
        full = [c for c in timings if c in measured]
        if not full:
            break
        best = min(timings[c][0] for c in full)
        under = [c for c in timings if c not in measured and timings[c][0] < best]
        if not under:
            break
        timings.update(remeasure(under))
        measured.update(under)
    return timings
