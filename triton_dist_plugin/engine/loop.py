"""``run_candidates``: the loop every front end's candidates go through once readied as calls:
screened (when a ``Screen`` is given, steered by the search), the survivors measured in longer
rounds, the finalists fully, a close call settled, and every candidate accounted for.

Every decision depends only on what every rank shares (the candidates and the reduced timings),
never on what failed where, so the ranks of a group always take the same path.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Optional

from .. import bus, distributed, settle, timing
from ..compiling.stream import SKIPPED, Stream
from ..failures import NOT_SEARCHED, NoValidConfig, let_through, reason_of
from ..hook_objects import INF3, TuningRequest
from ..policy import current as current_policy
from ..reporting import pick_reason
from ..search import model
from ..search.space import Space
from .outcome import Outcome, timer_of
from .rounds import answering, finalists_of, per_round, profiled_from_here, round_, rounds, scores_of
from .screen import Screen
from .steps import Steps


def run_candidates(
    request: TuningRequest,
    configs: Iterable[Any],
    make_call: Callable[[Any], Callable[[], Any]],
    *,
    method: str,
    do_bench: Optional[Callable] = None,
    n_warmup: Optional[int] = None,
    n_repeat: Optional[int] = None,
    group: Any = None,
    on_candidate: Optional[Callable[[Any, list, Optional[str]], None]] = None,
    screen: Optional[Screen] = None,
    known_failures: Optional[dict] = None,
    upstream_errors: bool = False,
    prepare: Optional[Callable[[list], dict]] = None,
    features: Optional[Callable[[Any], dict]] = None,
    settled: bool = True,
    anchor: Optional[Callable[[], Any]] = None,
    profile_shorts: bool = True,
) -> Outcome:
    """Time the candidates, reduce over ``group``, pick the fastest; raise if none is valid.

    With ``screen``, the search (``tdp_search``, ``search.py``) decides which candidates get a
    short screening round, in what order, and which of them go on: the survivors get a longer
    round, and only the best of those the full measurement, by ``do_bench`` where given (the
    pick is always among those measured fully). Without it, every candidate is measured fully.
    ``prepare(subset, stream)`` readies candidates just before their first run (compiles them,
    runs them in the isolation worker, checks their results) and returns ``{config: reason}``
    for those that failed (``stream.SKIPPED`` for those it left uncompiled); the search calls it
    only for the candidates it screens, so a large space is never compiled whole. It may hand
    each candidate to ``stream`` (``stream.py``, or None) as it compiles, to be screened at once.
    ``features(config)`` gives a candidate's parameters, the coordinates a search moves along.
    With ``settled`` (and no ``do_bench``), finalists too close to call are measured again and a tie
    is decided by the given order (``settle.py``); without it each candidate runs exactly the
    counts given (the function-level tuner's promise).
    ``anchor()``, asked once the first step is ready (on every rank: it may be a collective),
    names a candidate every screening must hold, the same on every rank (the accuracy check's
    reference: a candidate known to be right is never left out, so a search whose steps held only
    wrong ones still has a pick).
    ``known_failures`` are candidates already known not to work: never timed. With
    ``upstream_errors`` (the ``Autotuner`` front ends), a tuning in which no candidate works
    raises the first failure upstream would have let through, if any (see ``failures.let_through``),
    rather than ``NoValidConfig``. ``profile_shorts`` False keeps a short kernel's later rounds on
    the method given (a front end that compares them with times taken apart from this loop).
    """
    run = _Run(request, list(configs), make_call, method, do_bench, group, on_candidate, prepare, known_failures,
               screen, profile_shorts)
    steady, interleave = _steadiness(settled, do_bench, screen, method, n_warmup, n_repeat)
    finalists = run.configs
    if screen is not None and len(run.configs) >= run.policy.min_candidates:
        finalists = run.search(screen, features, anchor, steady, interleave)
    final = run.measure(finalists, screen if steady else None, interleave, n_warmup, n_repeat)
    run.account()
    best, decision = run.pick(finalists, final, settled and do_bench is None, upstream_errors)
    return Outcome(best=best, timings=run.timings, failures=run.failures,
                   bench_time=time.perf_counter() - run.start, measured=[c for c in finalists if c in run.calls],
                   decision=decision)


def _steadiness(settled, do_bench, screen, method, n_warmup, n_repeat) -> tuple[bool, bool]:
    """Whether settling follows (a device, the plugin's own timing and counts), so that the longer
    rounds may be shorter than the benchmarker's, after a warm-up (``Policy.full_ms``, ``warm_ms``);
    and whether they interleave: where the timer runs the counts it is given (a CUDA graph's
    replays do not) at little cost per call (a profiler session each would not)."""
    steady = settled and do_bench is None and screen is not None and method != "wall" and \
        (n_warmup, n_repeat) == (None, None)
    return steady, steady and method == "event"


class _Run:
    """One call of ``run_candidates``: each candidate's call, timings and failure so far."""

    def __init__(self, request, configs, make_call, method, do_bench, group, on_candidate, prepare,
                 known_failures, screen, profile_shorts=True):
        self.start = time.perf_counter()
        # The question as this loop asks it, over ``group``: a request is fixed once made, so a copy,
        # sharing its findings (what the loop finds reaches the caller's request too).
        request = request if request.group is group else replace(request, group=group)
        self.request, self.configs, self.make_call, self.method = request, configs, make_call, method
        self.shorts = profile_shorts and timing.shorts_profiled(request.device, method)
        self.do_bench, self.group, self.on_candidate, self.prepare = do_bench, group, on_candidate, prepare
        self.alone = group is None or distributed.world_size(group) < 2
        # Resolved once: every phase of this tuning goes by the same numbers.
        self.policy = screen.policy if screen is not None else current_policy()
        self.failures: dict = dict(known_failures or {})
        self.timings: dict = {c: list(INF3) for c in configs if c in self.failures}
        self.calls: dict = {}
        self.ready: set = set()
        self.uncompiled: list = []  # left uncompiled by a stream as hopeless (and never asked for again)

    def set_up(self, config: Any) -> None:
        if config in self.calls or config in self.failures:
            return
        try:
            self.calls[config] = self.make_call(config)
        except bus.PluginError:
            raise
        except Exception as exc:  # a candidate that cannot even be set up is a failed candidate
            self.timings[config], self.failures[config] = list(INF3), reason_of(exc)

    def ready_up(self, subset: list, stream: Optional[Stream] = None) -> list:
        """Prepare and set up the calls of those of ``subset`` not yet ready; returns those the
        stream left uncompiled (ready to be asked for again)."""
        todo = [c for c in subset if id(c) not in self.ready]
        self.ready.update(id(c) for c in todo)
        found = self.prepare(todo, stream) if self.prepare is not None and todo else {}
        skipped = [c for c in todo if found.get(c) == SKIPPED]
        self.uncompiled.extend(skipped)
        for config in skipped:
            del found[config]
            self.ready.discard(id(config))
        self.failures.update(found)
        left = {id(c) for c in skipped}
        for config in todo:
            if config in self.failures:
                self.timings[config] = list(INF3)
            elif id(config) not in left:
                self.set_up(config)
        return skipped

    def round(self, configs: list, n_warmup: int, n_repeat: int, timed: Optional[dict] = None) -> dict:
        """One screening round of ``configs``, reduced over the group; its failures kept."""
        got, failed = round_(self.request, configs, self.calls, self.method, None, n_warmup, n_repeat,
                             self.group, self.on_candidate, timed)
        self.failures.update(failed)
        return got

    def search(self, screen: Screen, features, anchor, steady: bool, interleave: bool) -> list:
        """Screen what the search asks for, then narrow its survivors: the finalists."""
        request, configs, policy = self.request, self.configs, self.policy
        screen.order = {id(c): i for i, c in enumerate(configs)}
        step = Steps(self, screen, Space(configs, features), anchor)
        request.found.ranking = bus.first_result("tdp_rank_candidates", scores_of(configs), request=request,
                                                 candidates=configs) if model.enabled() else None
        if not self.alone:  # ranks of other machines (or settings) might rank apart: every rank takes rank 0's
            request.found.ranking = distributed.from_first(self.group, request.found.ranking,
                                                           f"sharing the ranking of {request.kernel_name}")
        finalists = bus.first_result("tdp_search", finalists_of(configs), request=request, candidates=configs,
                                     evaluate=step, space=step.space, screen=screen)
        note = f"screened {len(step.screened)} of {len(configs)} candidates in {time.perf_counter() - self.start:.2f}s"
        if step.early or step.hopeless:
            note += f" ({step.early} as they compiled; {step.hopeless} left uncompiled as hopeless)"
        if steady:
            self.profile_if_short(finalists)
            screen.warm_up(self.calls, self.timings, finalists)
        if len(finalists) > policy.final_count:
            started, before = time.perf_counter(), dict(request.found.timers)
            count = policy.second_rounds if interleave else 1  # forwards, then backwards: a drift is undone
            second, failed = rounds(request, finalists, self.calls, self.method, None, policy.screen_warmup,
                                    policy.second_repeat, count, self.group, self.on_candidate)
            self.timings.update(second)
            self.failures.update(failed)
            said = [f"{count} interleaved rounds"] if count > 1 else []
            runs = f"{per_round(policy.second_repeat, count) * count} runs" + _said(said, request, before)
            note += f", then the best {len(finalists)} for {runs} in {time.perf_counter() - started:.2f}s"
            finalists = screen.narrow(second) or finalists
        request.found.notes.append(f"{note}; measuring the best {len(finalists)} fully")
        return finalists

    def profile_if_short(self, finalists: list) -> None:
        """The rounds after the screening by the profiler, for a short kernel (``rounds.profiled_from_here``)."""
        if self.shorts and self.alone and profiled_from_here(self.request, self.timings, finalists, self.policy):
            self.method = "profiler"

    def measure(self, finalists: list, steady: Optional[Screen], interleave: bool, n_warmup, n_repeat) -> dict:
        """The full measurement of ``finalists``: the counts given, or (``steady``: settling
        follows) about ``Policy.full_ms`` each, in interleaved rounds where the timer allows."""
        self.ready_up(finalists)
        started, before = time.perf_counter(), dict(self.request.found.timers)
        full = steady.full_runs(self.timings, finalists) if steady is not None else (n_warmup, n_repeat)
        if steady is not None and self.method == "profiler" and full[1] is not None:  # a device time has no launch
            most = self.policy.profiled_runs_most  # gap to average away: fewer runs say as much, flushes cost
            full = (min(full[0], most // 4), min(full[1], most))
        count = self.policy.full_rounds if interleave and full[1] is not None and len(finalists) > 1 else 1
        final, failed = rounds(self.request, finalists, self.calls, self.method, self.do_bench, *full, count,
                               self.group, self.on_candidate)
        if finalists is not self.configs:
            said = [] if full == (n_warmup, n_repeat) or self.method == "cudagraph" else \
                [f"{full[1]} runs each"] if count == 1 else \
                [f"{per_round(full[1], count) * count} runs each", f"in {count} interleaved rounds"]
            runs = _said(said, self.request, before)
            self.request.found.notes.append(f"measured {len(finalists)} finalists{runs} in "
                                            f"{time.perf_counter() - started:.2f}s")
        self.request.found.shown_by = answering(self.request.found, before)  # what timed the times shown
        self.timings.update(final)
        self.failures.update(failed)
        return final

    def account(self) -> None:
        """Every candidate it was given is accounted for, as upstream's configs_timings holds each:
        one the search never screened (or left uncompiled) as infinity, with the reason."""
        left = set(map(id, self.uncompiled))
        for config in self.configs:
            if config not in self.timings:
                self.timings[config] = list(INF3)
                self.failures.setdefault(config, SKIPPED if id(config) in left else NOT_SEARCHED)
        self.timings = {c: self.timings[c] for c in self.configs}

    def pick(self, finalists: list, final: dict, settled: bool, upstream_errors: bool) -> tuple[Any, Optional[dict]]:
        """The fastest finalist that ran, the close ones settled; raise when none ran."""
        valid = {config: final[config] for config in finalists if math.isfinite(final[config][0])}
        if not valid:
            raise self.no_valid(upstream_errors)
        if not settled or len(valid) == 1:  # a kernel's own do_bench decides as upstream
            return min(valid, key=valid.get), None
        counts = self.policy.wall_settle if self.method == "wall" else \
            (self.policy.settle_warmup, settle.round_runs(self.policy, min(t[0] for t in valid.values())))
        def measure(subset: list) -> dict:  # settling's rounds: their failures show as infinity alone
            return round_(self.request, subset, self.calls, self.method, None, *counts, self.group, None)[0]

        best, decision = settle.settle(valid, self.configs, measure, self.policy)
        self.request.found.notes.append(pick_reason.sentence(decision))
        return best, decision

    def no_valid(self, upstream_errors: bool) -> BaseException:
        failures = {c: self.failures.get(c, "timed as infinity on another rank") for c in self.configs
                    if c in self.timings}
        self.failures = failures
        error = NoValidConfig(self.request.kernel_name, self.request.key, failures)
        original = let_through(failures) if upstream_errors else None
        if original is None:
            return error
        if hasattr(original, "add_note"):
            original.add_note(str(error))
        # Raised from here, not from deep in the timing loop: the traceback keeps the caller's
        # frames and the cause (the kernel's own line), not the plugin's timing machinery.
        return original.with_traceback(None)


def _said(parts: list, request: TuningRequest, before: dict) -> str:
    """A note's parenthesis: ``parts``, and, where a plugin's timer timed this round (its timings
    since ``before``), that the runs were asked of it (it may time its own way)."""
    timer = timer_of(answering(request.found, before))
    parts = parts + ([f"asked of {timer}"] if timer else [])
    return f" ({'; '.join(parts)})" if parts else ""
