"""The one tuning loop every front end uses: time each candidate, reduce, select.

Front ends (the patched ``Autotuner``, the function-level ``autotune``, the contextual tuner)
turn their own candidates into ``make_call(config)`` closures; the engine times them through
``tdp_time_candidate`` (or the kernel's own ``do_bench``), records why any failed, reduces the
timings through ``tdp_reduce_timings`` and picks the fastest valid one. What a failure is and
what upstream would have raised for it live in ``failures``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from . import bus, distributed, settle
from .compiling.stream import SKIPPED, Stream
from .failures import NOT_SEARCHED, NoValidConfig, Timing, let_through, reason_of
from .hook_objects import INF3, CandidateRequest, TuningRecord, TuningRequest
from .policy import Policy
from .policy import current as current_policy
from .search import model
from .search.space import Space


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


def time_one(cand: CandidateRequest, do_bench: Optional[Callable] = None) -> tuple[list[float], Optional[str]]:
    """Time one candidate; a failure is ``([inf]*3, reason)``, never an exception.

    A plugin that breaks a hook's contract is the exception: its ``PluginError`` propagates.
    """
    try:
        if do_bench is not None:
            returned = do_bench(cand.call, quantiles=cand.quantiles)
            timing = Timing(bus.as_timing(returned))
            timing.raw = returned
            return timing, None
        value = bus.first_result("tdp_time_candidate", bus.as_timing, request=cand)
        if value is None:
            raise RuntimeError("no tdp_time_candidate implementation timed it")
        return value, None
    except bus.PluginError:
        raise
    except Exception as exc:
        return list(INF3), reason_of(exc)


def same_keys(timings: dict) -> Callable[[Any], dict]:
    def check(result: Any) -> dict:
        if not isinstance(result, dict) or result.keys() != timings.keys():
            raise TypeError("expected a dict with exactly the candidates it was given")
        checked = {config: bus.as_timing(value) for config, value in result.items()}
        # A kernel's own do_bench result passes through as it was (upstream keeps it raw).
        return {config: value if isinstance(value, Timing) else checked[config] for config, value in result.items()}

    return check


@dataclass
class Screen:
    """A cheap first round for every candidate; only those near the best are measured fully. Every
    number it goes by is its ``policy``'s (``policy.py``)."""

    policy: Policy = field(default_factory=current_policy)
    #: each candidate's place in the given order (``id`` -> position), set by ``run_candidates``
    order: dict = field(default_factory=dict)

    def full_runs(self, timings: dict, finalists: list) -> tuple[Optional[int], Optional[int]]:
        """``(n_warmup, n_repeat)`` for the finalists' full measurement: about ``full_ms`` of the
        fastest of their earlier times (``full_runs_least`` to ``full_runs_most`` runs); ``(None, None)`` (the
        benchmarker's own budget) where none was timed yet."""
        fastest = _fastest(timings, finalists)
        if fastest is None or not self.policy.full_ms:
            return None, None
        p = self.policy
        runs = max(p.full_runs_least, min(p.full_runs_most, round(p.full_ms / timings[fastest][0])))
        return max(5, runs // 4), runs

    def warm_up(self, calls: dict, timings: dict, finalists: list) -> None:
        """Run the fastest of ``finalists`` for about ``warm_ms`` (by its screening time), untimed."""
        fastest = _fastest(timings, finalists)  # timed, so it has a call
        if fastest is None or not self.policy.warm_ms:
            return
        try:
            for _ in range(max(1, min(1000, round(self.policy.warm_ms / timings[fastest][0])))):
                calls[fastest]()
        except Exception:  # it ran before; if it fails now, its own timing says so
            pass

    def narrow(self, timings: dict) -> list:
        """The ``final_count`` best of the second round (by its median), and those too close to them
        to leave out on a short round's evidence."""
        fastest = _ranked(timings)
        p = self.policy
        stable, _ = self._stable(fastest, timings, p.second_tie, p.second_repeat)
        # The first of those it cannot tell apart, in the given order, and the fastest by its times.
        kept = list({id(r[2]): r for r in stable[: p.final_count] + fastest[: p.final_count]}.values())
        if kept:
            edge = max(t for t, _, _ in kept) * (1 + p.tie)
            kept += [r for r in fastest if r[0] <= edge and all(r[2] is not k[2] for k in kept)][
                : max(0, p.final_most - len(kept))]
        return [c for _, _, c in kept]

    def survivors(self, timings: dict) -> list:
        valid = _ranked(timings)
        if not valid:
            return []
        p = self.policy
        cap = max(p.keep_at_least, math.ceil(len(timings) * p.fraction))
        best = valid[0][0]
        near = [c for t, _, c in valid if t <= best * (1 + p.margin)]
        kept = near[:cap] if len(near) >= p.keep_at_least else [c for _, _, c in valid[: p.keep_at_least]]
        # ...and the first in the given order of those the round cannot tell from its best, so that
        # every process keeps them whatever the noise did (the longer rounds separate them).
        stable, tied = self._stable(valid, timings, p.screen_tie, p.screen_repeat)
        return list({id(c): c for c in kept + [c for _, _, c in stable[: min(tied, p.tied_most)]]}.values())

    def band(self, timings: dict, tie: Optional[float] = None, runs: Optional[int] = None) -> float:
        """How far apart (relative) two of a round's medians may be by noise alone: ``tie``, or
        about ``noise_spreads`` of the round's typical spreads (p80 - p20) over the square root of its runs."""
        p = self.policy
        floor = p.screen_tie if tie is None else tie
        spreads = sorted(settle.spread(t) for t in timings.values() if math.isfinite(t[0]))
        if not spreads:
            return floor
        noise = p.noise_spreads * spreads[len(spreads) // 2] / math.sqrt(runs or p.screen_repeat)
        return max(floor, min(2 * p.noise_cap, noise))

    def leaders(self, timings: dict) -> list:
        """The screened candidates fastest first, those a screening cannot tell from the fastest
        first and in the given order (a search that climbs from its leaders then takes the same
        path in every process)."""
        p = self.policy
        return [c for _, _, c in self._stable(_ranked(timings), timings, p.screen_tie, p.screen_repeat)[0]]

    def _stable(self, ranked: list, timings: dict, tie: float, runs: int) -> tuple[list, int]:
        """``ranked`` (``_ranked(timings)``: ``(median, position, config)``, fastest first), but those
        the round cannot tell from the fastest first and in the given order; and how many those are."""
        if not ranked:
            return ranked, 0
        edge = ranked[0][0] * (1 + self.band(timings, tie, runs))
        tied = sum(r[0] <= edge for r in ranked)
        return sorted(ranked, key=lambda r: (0, self.order.get(id(r[2]), r[1]), 0.0) if r[0] <= edge
                      else (1, 0, r[0])), tied


def _fastest(timings: dict, configs: list) -> Any:
    """The one of ``configs`` with the smallest positive finite time in ``timings``, or None."""
    timed = [c for c in configs if c in timings and 0 < timings[c][0] < math.inf]
    return min(timed, key=lambda c: timings[c][0]) if timed else None


def _rounds(request, configs, calls, method, do_bench, n_warmup, n_repeat, rounds, group,
            on_candidate) -> tuple[dict, dict]:
    """``_round`` of ``n_warmup + n_repeat`` runs each; with ``rounds`` over 1, as that many rounds
    of about ``n_repeat / rounds`` runs (after the whole warm-up in the first, ``1 / rounds`` of it
    later), in the given order and then backwards, by turns: a steady drift of the device's clock
    puts each config as far along it as every other. Each quantile is the median over the rounds.
    One that fails (on any rank: the reduced times say so) is not run again and ends as infinity."""
    if rounds <= 1:
        return _round(request, configs, calls, method, do_bench, n_warmup, n_repeat, group, on_candidate)
    per, later = _per_round(n_repeat, rounds), max(1, n_warmup // rounds)
    samples: dict = {id(c): [] for c in configs}
    failures: dict = {}
    live = list(configs)
    for i in range(rounds):
        if not live:
            break
        turn = live if i % 2 == 0 else live[::-1]
        timed, failed = _round(request, turn, calls, method, None, n_warmup if i == 0 else later, per, group,
                               on_candidate)
        failures.update(failed)
        for config in turn:
            samples[id(config)].append(timed[config])
        live = [c for c in live if math.isfinite(timed[c][0])]
    return {c: list(INF3) if not all(math.isfinite(t[0]) for t in samples[id(c)]) else
            [statistics.median(t[q] for t in samples[id(c)]) for q in range(3)] for c in configs}, failures


def _per_round(n_repeat: int, rounds: int) -> int:
    return max(3, -(-n_repeat // rounds))  # at least 3: a median


def _ranked(timings: dict) -> list:
    """``(median, position, config)`` of the candidates with a finite time, fastest first."""
    return sorted((t[0], i, c) for i, (c, t) in enumerate(timings.items()) if math.isfinite(t[0]))


def _round(request, configs, calls, method, do_bench, n_warmup, n_repeat, group, on_candidate,
           timed: Optional[dict] = None) -> tuple[dict, dict]:
    """Time ``configs`` once each and reduce over ``group``. A config without a call (a known
    failure) is not run but still takes part in the reduction as infinity, so every rank
    reduces the same list whatever failed where. Those in ``timed`` were timed already (as they
    compiled: ``stream.py``) and take part as they are."""
    timings, failures = {}, {}
    for config in configs:
        if timed and config in timed:
            timings[config] = timed[config]
            continue
        timings[config], reason = _time(request, config, calls, method, do_bench, n_warmup, n_repeat, on_candidate)
        if reason is not None:
            failures[config] = reason
    reduced = bus.first_result("tdp_reduce_timings", same_keys(timings), request=request, timings=timings, group=group)
    return (reduced if reduced is not None else timings), failures


def _time(request, config, calls, method, do_bench, n_warmup, n_repeat, on_candidate) -> tuple[list, Optional[str]]:
    if config not in calls:
        return list(INF3), None
    cand = CandidateRequest(
        call=calls[config], config=config, kernel_name=request.kernel_name, key=request.key, device=request.device,
        method=method, n_warmup=n_warmup, n_repeat=n_repeat, tuning=request,
    )
    timing, reason = time_one(cand, do_bench)
    if on_candidate is not None:
        on_candidate(config, timing, reason)
    return timing, reason


def _scores(candidates: list) -> Callable[[Any], list]:
    """What ``tdp_rank_candidates`` must return: a number per candidate (NaN reads as "no opinion")."""

    def check(result: Any) -> list:
        if not isinstance(result, (list, tuple)) or len(result) != len(candidates):
            raise TypeError(f"expected a list of {len(candidates)} numbers, one per candidate")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in result):
            raise TypeError("expected numbers (a predicted time per candidate; inf: predicted not to run)")
        return model.unknown_last(list(result))

    return check


def _finalists(candidates: list) -> Callable[[Any], list]:
    """What ``tdp_search`` must return: a list of the candidates it was given."""
    given = {id(c) for c in candidates}

    def check(result: Any) -> list:
        if not isinstance(result, (list, tuple)):
            raise TypeError("expected a list of the candidates to measure fully")
        if any(id(r) not in given for r in result):
            raise TypeError("expected only candidates it was given")
        return list(result)

    return check


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
    rather than ``NoValidConfig``.
    """
    start = time.perf_counter()
    request.group = group
    alone = group is None or distributed.world_size(group) < 2
    configs = list(configs)
    failures: dict = dict(known_failures or {})
    timings: dict = {c: list(INF3) for c in configs if c in failures}
    calls: dict = {}
    ready: set = set()
    uncompiled: list = []  # left uncompiled by a stream as hopeless (and never asked for again)

    def set_up(config: Any) -> None:
        if config in calls or config in failures:
            return
        try:
            calls[config] = make_call(config)
        except bus.PluginError:
            raise
        except Exception as exc:  # a candidate that cannot even be set up is a failed candidate
            timings[config], failures[config] = list(INF3), reason_of(exc)

    def ready_up(subset: list, stream: Optional[Stream] = None) -> list:
        """Prepare and set up the calls of those of ``subset`` not yet ready; returns those the
        stream left uncompiled (ready to be asked for again)."""
        todo = [c for c in subset if id(c) not in ready]
        ready.update(id(c) for c in todo)
        found = prepare(todo, stream) if prepare is not None and todo else {}
        skipped = [c for c in todo if found.get(c) == SKIPPED]
        uncompiled.extend(skipped)
        for config in skipped:
            del found[config]
            ready.discard(id(config))
        failures.update(found)
        left = {id(c) for c in skipped}
        for config in todo:
            if config in failures:
                timings[config] = list(INF3)
            elif id(config) not in left:
                set_up(config)
        return skipped

    # Every decision below depends only on what every rank shares (the candidates and the reduced
    # timings), never on what failed where, so the ranks of a group always take the same path.
    finalists = configs
    # Settling follows (a device, the plugin's own timing and counts): the longer rounds may be
    # shorter than the benchmarker's, after a warm-up (``Screen.full_ms``, ``Screen.warm_ms``).
    steady = settled and do_bench is None and screen is not None and method != "wall" and \
        (n_warmup, n_repeat) == (None, None)
    # ...in interleaved rounds where the timer runs the counts it is given (a CUDA graph's replays
    # do not) at little cost per call (a profiler session each would not).
    interleave = steady and method == "event"
    policy = screen.policy if screen is not None else current_policy()
    if screen is not None and len(configs) >= policy.min_candidates:
        screen.order = {id(c): i for i, c in enumerate(configs)}
        screened: dict = {}
        space = Space(configs, features)
        anchored: list = []
        early, hopeless = [0], [0]

        def time_early(config: Any) -> list:  # a candidate just compiled, screened by the stream
            set_up(config)
            timing, reason = _time(request, config, calls, method, None, policy.screen_warmup, policy.screen_repeat,
                                   on_candidate)
            if reason is not None:
                failures[config] = reason
            return timing

        def evaluate(subset: list) -> dict:
            done = {id(s) for s in screened}
            subset = [c for c in dict.fromkeys(subset) if id(c) not in done]
            stream = Stream(subset, configs, space, screened, time_early, skip=alone, policy=policy)
            left = ready_up(subset, stream)
            # Judged again once the whole step is in: one skipped on early evidence that now has a
            # promising neighbour is compiled after all.
            while again := [c for c in left if stream.wanted(c)]:
                chosen = {id(c) for c in again}
                left = [c for c in left if id(c) not in chosen] + ready_up(again, stream)
            skipped = {id(c) for c in left}
            subset = [c for c in subset if id(c) not in skipped]
            if anchor is not None and not anchored:
                anchored.append(True)  # asked once, on every rank alike (a collective under a group)
                pinned = anchor()
                held = any(c is pinned for c in configs) and id(pinned) not in done
                if held and all(c is not pinned for c in subset):
                    ready_up([pinned])
                    subset.append(pinned)
            first, failed = _round(request, subset, calls, method, None, policy.screen_warmup,
                                   policy.screen_repeat, group, on_candidate, stream.timings)
            early[0] += len(stream.timings)
            hopeless[0] += len(skipped)
            screened.update(first)
            timings.update(first)
            failures.update(failed)
            return first

        request.ranking = bus.first_result("tdp_rank_candidates", _scores(configs), request=request,
                                           candidates=configs) if model.enabled() else None
        if not alone:  # ranks of other machines (or settings) might rank apart: every rank takes rank 0's
            request.ranking = distributed.from_first(group, request.ranking,
                                                     f"sharing the ranking of {request.kernel_name}")
        finalists = bus.first_result("tdp_search", _finalists(configs), request=request, candidates=configs,
                                     evaluate=evaluate, space=space, screen=screen)
        note = f"screened {len(screened)} of {len(configs)} candidates in {time.perf_counter() - start:.2f}s"
        if early[0] or hopeless[0]:
            note += f" ({early[0]} as they compiled; {hopeless[0]} left uncompiled as hopeless)"
        if steady:
            screen.warm_up(calls, timings, finalists)
        if len(finalists) > policy.final_count:
            started = time.perf_counter()
            # Forwards, then backwards: what a drifting clock favours is undone.
            rounds = policy.second_rounds if interleave else 1
            second, failed = _rounds(request, finalists, calls, method, None, policy.screen_warmup,
                                     policy.second_repeat, rounds, group, on_candidate)
            timings.update(second)
            failures.update(failed)
            runs = f"{policy.second_repeat} runs" if rounds == 1 else \
                f"{_per_round(policy.second_repeat, rounds) * rounds} runs ({rounds} interleaved rounds)"
            note += f", then the best {len(finalists)} for {runs} in {time.perf_counter() - started:.2f}s"
            finalists = screen.narrow(second) or finalists
        request.notes.append(f"{note}; measuring the best {len(finalists)} fully")
    ready_up(finalists)
    started = time.perf_counter()
    full = screen.full_runs(timings, finalists) if steady else (n_warmup, n_repeat)
    rounds = policy.full_rounds if interleave and full[1] is not None and len(finalists) > 1 else 1
    final, failed = _rounds(request, finalists, calls, method, do_bench, *full, rounds, group, on_candidate)
    if finalists is not configs:
        runs = "" if full == (n_warmup, n_repeat) or method == "cudagraph" else \
            f" ({full[1]} runs each)" if rounds == 1 else \
            f" ({_per_round(full[1], rounds) * rounds} runs each, in {rounds} interleaved rounds)"
        request.notes.append(f"measured {len(finalists)} finalists{runs} in {time.perf_counter() - started:.2f}s")
    timings.update(final)
    failures.update(failed)
    # Every candidate it was given is accounted for, as upstream's configs_timings holds each: one
    # the search never screened (or left uncompiled) as infinity, with the reason it was not timed.
    left = set(map(id, uncompiled))
    for config in configs:
        if config not in timings:
            timings[config] = list(INF3)
            failures.setdefault(config, SKIPPED if id(config) in left else NOT_SEARCHED)
    timings = {c: timings[c] for c in configs}
    valid = {config: final[config] for config in finalists if math.isfinite(final[config][0])}
    if not valid:
        failures = {c: failures.get(c, "timed as infinity on another rank") for c in configs if c in timings}
        error = NoValidConfig(request.kernel_name, request.key, failures)
        original = let_through(failures) if upstream_errors else None
        if original is None:
            raise error
        if hasattr(original, "add_note"):
            original.add_note(str(error))
        # Raised from here, not from deep in the timing loop: the traceback keeps the caller's
        # frames and the cause (the kernel's own line), not the plugin's timing machinery.
        raise original.with_traceback(None)
    best, decision = min(valid, key=valid.get), None
    if settled and len(valid) > 1 and do_bench is None:  # a kernel's own do_bench decides as upstream
        counts = policy.wall_settle if method == "wall" else (policy.settle_warmup, policy.second_repeat)

        def measure(subset: list) -> dict:
            return _round(request, subset, calls, method, None, *counts, group, None)[0]

        best, decision = settle.settle(valid, configs, measure, policy)
        request.notes.append(settle.sentence(decision))
    return Outcome(best=best, timings=timings, failures=failures, bench_time=time.perf_counter() - start,
                   measured=[c for c in finalists if c in calls], decision=decision)


def record(request: TuningRequest, outcome: Optional[Outcome], best: Any, timings: dict, *, method: str,
           cache_hit: bool, measured: Optional[list] = None) -> TuningRecord:
    """Build the record of a finished tuning and hand it to every ``tdp_on_tuned`` observer.
    ``measured``: without an outcome (a cache hit), the candidates the stored entry measured fully."""
    rec = TuningRecord(
        kernel_name=request.kernel_name, key=request.key, best_config=best, timings=dict(timings or {}),
        failures=dict(outcome.failures) if outcome else {}, bench_time=outcome.bench_time if outcome else None,
        cache_hit=cache_hit, method=method, device=request.device, autotuner=request.autotuner,
        notes=list(request.notes), measured=list(outcome.measured) if outcome else list(measured or []),
        model=getattr(request, "model", None), decision=outcome.decision if outcome else None,
    )
    bus.notify(rec)
    return rec
