"""The tuning job of a tuner subclass with its own ``run()``: one of its loops, as ``job.run`` runs it.

The subclass keeps its picks in its own ``cache`` (and, in some libraries, its own store) and its
loop decides what to do with the timings it asked for, so this job reads and persists nothing, and
what it hands back is those timings. ``job.run`` brings the rest, as for every front end: the
settings checked, a capture refused before anything runs, the ranks agreeing on the key, the
candidates and every check, frozen mode answered without timing, and the record.

In frozen mode the loop still decides: the candidate frozen mode chose (``frozen.on_miss``: the
nearest tuned key's pick, else the first) is handed a zero timing and every other one infinity, so
the loop's own ``min`` keeps it; ``strict`` raises before the loop has any timing. A subclass that
stores its picks keeps that one as it keeps any.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .. import _compat, distributed, engine, frozen, job, timing
from ..failures import raw
from ..hook_objects import INF3, TuningRequest
from ..store import describe
from .accuracy import accuracy_check_enabled
from .benchmarker import user_do_bench
from .candidates import split_launch
from .kernel_state import KernelState


class LoopJob(job.Job):
    """The candidates one ``prune_configs`` of a subclass's loop kept (``configs``), timed by
    ``time_them(job) -> engine.Outcome`` and handed back as ``shape(timings)``. ``alone``: one
    candidate timed by itself, as upstream's ``_bench`` times it (under a group, the ranks agree
    on it and take the slowest rank's time, so their loops' ``min`` keeps the same one)."""

    def __init__(self, instance: Any, state: KernelState, args: tuple, meta: dict, configs: list,
                 time_them: Callable[[LoopJob], engine.Outcome], shape: Optional[Callable[[dict], dict]] = None,
                 device_required: bool = True, alone: bool = False):
        _, launch, named, rest = split_launch(state, args, meta)
        device = _compat.active_device(required=device_required and user_do_bench(instance) is None)
        self.group = distributed.kernel_group()  # only inside tuning_group(): the user asked for it
        self.request = TuningRequest(state.name, state.key(args, launch), device, named, rest, autotuner=instance,
                                     grid=meta.get("grid"), group=self.group)
        self.instance, self.state, self.args, self.meta, self.named = instance, state, args, meta, named
        self.configs, self.time_them, self.alone = configs, time_them, alone
        self.shape = shape or (lambda timings: {c: raw(t) for c, t in timings.items()})
        self.name, self.key, self.labels = state.name, self.request.key, [str(c) for c in configs]
        self.checks = {"accuracy": accuracy_check_enabled(instance)}
        self.method = timing.resolve_method(device)

    def frozen_miss(self) -> Any:
        pool = loop_pool(self.instance, self.configs[0]) if self.alone else self.configs
        if len(pool) == 1:  # nothing to choose (upstream never tunes one candidate): no miss, nothing timed
            return self.shape({c: [0.0] * 3 for c in self.configs})
        chosen = frozen_pick(self.instance, self.state, self.key, pool, self.request.device, self.group)
        return self.shape({c: [0.0] * 3 if c is chosen else list(INF3) for c in self.configs})

    def tune(self) -> engine.Outcome:
        return self.time_them(self)

    def keep(self, outcome: engine.Outcome) -> Any:
        best = outcome.best
        ms = outcome.timings[best][0] if best is not None else float("inf")
        held = self.state.loop_picks.get(self.key)
        if ms < float("inf") and (held is None or ms < held[0]):  # what the loop's own min will keep
            self.state.loop_picks[self.key] = (ms, best)
        return self.shape(outcome.timings)

    def record(self, outcome: Optional[engine.Outcome], best: Any, found: Optional[job.Found]) -> None:
        # A loop that timed fewer than two candidates decided nothing (one timed alone among them).
        if outcome is not None and len(outcome.timings) > 1:
            engine.record(self.request, outcome, outcome.best, outcome.timings, method=self.method, cache_hit=False)


def loop_pool(instance: Any, config: Any) -> list:
    """The candidates of the loop that times ``config`` alone (its first, when the loop's frozen
    pick is not chosen yet): what its last ``prune_configs`` kept, where that holds ``config``,
    else the kernel's configs; ``config`` first, as the one the loop surely asks about."""
    pruned = instance.__dict__.get("_tdp_pruned") or []
    pool = pruned if any(c is config for c in pruned) else list(instance.configs)
    return [config, *(c for c in pool if c is not config)]


def frozen_pick(instance: Any, state: KernelState, key: Any, pool: list, device: str, group: Any) -> Any:
    """The one of ``pool`` frozen mode launches for ``key``, chosen once per loop (a loop that
    times its candidates one by one asks once per candidate; the miss is recorded once): the pick of
    the nearest tuned key among those whose pick ``pool`` holds, else ``pool``'s first."""
    held = instance.__dict__.get("_tdp_frozen")
    if held is not None and held[0] == key:
        return held[1]
    names = {describe.describe(c): c for c in reversed(pool)}  # the first of equal ones
    # Keys tuned in this process (by the subclass's own key, and by this plugin's), not those given
    # a substitute in frozen mode (no chain of guesses), whose pick this loop can launch.
    tuned = {k: names[describe.describe(c)]
             for k, c in [*instance.cache.items(), *((k, c) for k, (_, c) in state.loop_picks.items())]
             if k not in state.substituted and describe.describe(c) in names}
    chosen = frozen.on_miss(state.name, key, tuned, pool[0], instance, device, ahead=(
        "its tuner keeps its own picks, which this plugin does not store: launch it once in this process "
        f"without {frozen.FROZEN_ENV}"))
    chosen = frozen.shared_pick(group, chosen, pool, state.name)
    state.substituted.add(key)
    instance.__dict__["_tdp_frozen"] = (key, chosen)
    return chosen
