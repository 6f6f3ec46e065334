"""Timing candidates: one candidate (``tdp_time_candidate`` or the kernel's own ``do_bench``), a
round of several reduced over the group (``tdp_reduce_timings``), several rounds interleaved, and
the checks on what the ranking and search hooks return."""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable, Optional

from .. import bus, distributed, kernel_time
from ..failures import Timing, reason_of
from ..hook_objects import INF3, CandidateRequest
from ..search import model
from .outcome import OWN_DO_BENCH
from .screen import fastest_of

BUILT_IN_TIMERS = frozenset({"tdp.timing", "tdp.leader"})  # bus: the built-in timer, and the leader's skip
QUANTILES = CandidateRequest.__dataclass_fields__["quantiles"].default


def time_one(cand: CandidateRequest, do_bench: Optional[Callable] = None) -> tuple[list[float], Optional[str]]:
    """Time one candidate; a failure is ``([inf]*3, reason)``, never an exception.

    A plugin that breaks a hook's contract is the exception: its ``PluginError`` propagates.
    """
    try:
        if do_bench is not None:
            _timed_by(cand, OWN_DO_BENCH)
            returned = do_bench(cand.call, quantiles=cand.quantiles)
            timed = Timing(bus.as_timing(returned))
            timed.raw = returned
            return timed, None
        value, timer = bus.first_answer("tdp_time_candidate", bus.as_timing, request=cand)
        if value is None:
            raise RuntimeError("no tdp_time_candidate implementation timed it")
        if timer not in BUILT_IN_TIMERS:
            _timed_by(cand, timer)
        return value, None
    except bus.PluginError:
        raise
    except Exception as exc:
        return list(INF3), reason_of(exc)


def _timed_by(cand: CandidateRequest, name: str) -> None:
    """Count a timing given by ``name`` (not the built-in timer): the views name what timed."""
    found = getattr(getattr(cand, "tuning", None), "found", None)
    if found is not None:
        found.timers[name] = found.timers.get(name, 0) + 1


def answering(found, before: dict) -> set:
    """The timers of ``found.timers`` that gave a timing since ``before`` (a copy of it)."""
    return {name for name, count in found.timers.items() if count > before.get(name, 0)}


def same_keys(timings: dict) -> Callable[[Any], dict]:
    def check(result: Any) -> dict:
        if not isinstance(result, dict) or result.keys() != timings.keys():
            raise TypeError("expected a dict with exactly the candidates it was given")
        checked = {config: bus.as_timing(value) for config, value in result.items()}
        # A kernel's own do_bench result passes through as it was (upstream keeps it raw).
        return {config: value if isinstance(value, Timing) else checked[config] for config, value in result.items()}

    return check


def rounds(request, configs, calls, method, do_bench, n_warmup, n_repeat, rounds, group,
            on_candidate) -> tuple[dict, dict]:
    """``_round`` of ``n_warmup + n_repeat`` runs each; with ``rounds`` over 1, as that many rounds
    of about ``n_repeat / rounds`` runs (after the whole warm-up in the first, ``1 / rounds`` of it
    later), in the given order and then backwards, by turns: a steady drift of the device's clock
    puts each config as far along it as every other. Each quantile is the median over the rounds.
    One that fails (on any rank: the reduced times say so) is not run again and ends as infinity."""
    if rounds <= 1:  # (a round by the profiler is tried there)
        return round_(request, configs, calls, method, do_bench, n_warmup, n_repeat, group, on_candidate)
    found, method = _by_profiler(request, configs, calls, method, do_bench, n_warmup, n_repeat, rounds, group,
                                 on_candidate)
    if found is not None:
        return found
    per, later = per_round(n_repeat, rounds), max(1, n_warmup // rounds)
    samples: dict = {id(c): [] for c in configs}
    failures: dict = {}
    live = list(configs)
    for i in range(rounds):
        if not live:
            break
        turn = live if i % 2 == 0 else live[::-1]
        timed, failed = round_(request, turn, calls, method, None, n_warmup if i == 0 else later, per, group,
                               on_candidate)
        failures.update(failed)
        for config in turn:
            samples[id(config)].append(timed[config])
        live = [c for c in live if math.isfinite(timed[c][0])]
    return {c: list(INF3) if not all(math.isfinite(t[0]) for t in samples[id(c)]) else
            [statistics.median(t[q] for t in samples[id(c)]) for q in range(3)] for c in configs}, failures


def _by_profiler(request, configs, calls, method, do_bench, n_warmup, n_repeat, count, group, on_candidate,
                 session: bool = True) -> tuple[Optional[tuple], str]:
    """``(found, method)``: the rounds' ``(timings, failures)`` from one profiler session where the
    method is the profiler and ``_profiled`` can (``session``: none of them was timed already), else
    None and the method to time each by (events once a session has timed nothing in this tuning)."""
    method = _unless_refused(request, method)
    if method == "profiler" and do_bench is None and session:
        found = _profiled(request, configs, calls, n_warmup, n_repeat, count, group, on_candidate)
        if found is not None:
            return found, method
        method = _unless_refused(request, method)
    return None, method


def _profiled(request, configs, calls, n_warmup, n_repeat, count, group, on_candidate) -> Optional[tuple]:
    """``rounds`` by the profiler in one session (``kernel_time.profile_rounds``), where the built-in
    timer is the one that would time each and this process tunes alone (ranks must each take the
    same collectives, whatever failed where); None where it cannot, and the caller times each alone:
    a candidate that fails, or launches what the session cannot tell apart, is found there."""
    live = [c for c in configs if c in calls]
    if request.device != "cuda" or not live or distributed.world_size(group) > 1 or kernel_time.profiler_busy() or \
            not bus.implementers("tdp_time_candidate") <= BUILT_IN_TIMERS:
        return None
    runs = n_repeat if n_repeat is not None else kernel_time.DEFAULT_RUNS[1]
    try:
        found = kernel_time.profile_rounds([calls[c] for c in live], request.kernel_name,
                                           kernel_time.DEFAULT_RUNS[0] if n_warmup is None else n_warmup,
                                           per_round(runs, count) if count > 1 else max(1, runs), max(1, count),
                                           QUANTILES)
    except bus.PluginError:
        raise
    except kernel_time.MethodUnavailable as exc:  # it recorded nothing it could attribute: events from here on
        request.found.unprofiled = str(exc)
        request.found.notes.append(f"the profiler timed nothing ({exc}): the later rounds by device events")
        return None
    except Exception:
        return None
    timings = {c: list(INF3) for c in configs}
    timings.update(zip(live, found))
    if on_candidate is not None:
        for config in live:
            on_candidate(config, timings[config], None)
    reduced = bus.first_result("tdp_reduce_timings", same_keys(timings), request=request, timings=timings, group=group)
    return (reduced if reduced is not None else timings), {}


def profiled_from_here(request, timings: dict, finalists: list, policy) -> bool:
    """Whether a tuning that profiles short kernels (``timing.shorts_profiled``, this process
    alone: a session that fails on one rank would change that rank's collectives) times the
    rounds after its screening by the profiler: where its fastest finalist screened under
    ``Policy.profile_below`` ms. Device events there add a launch gap whose jitter is as large as
    what separates the finalists, and processes would pick apart by it. Not inside a profiler
    session of the user's own, which one of ours would end."""
    fastest = fastest_of(timings, finalists)
    if fastest is None or timings[fastest][0] >= policy.profile_below or kernel_time.profiler_busy():
        return False
    request.found.notes.append(f"the fastest screened ran {timings[fastest][0]:.4f} ms: the later rounds time "
                               "the kernel alone, by the profiler")
    return True


def _unless_refused(request, method: str) -> str:
    """``event`` for a tuning whose profiler session timed nothing (``found.unprofiled``), else ``method``."""
    return "event" if method == "profiler" and getattr(request.found, "unprofiled", None) else method


def per_round(n_repeat: int, rounds: int) -> int:
    return max(3, -(-n_repeat // rounds))  # at least 3: a median


def round_(request, configs, calls, method, do_bench, n_warmup, n_repeat, group, on_candidate,
           timed: Optional[dict] = None) -> tuple[dict, dict]:
    """Time ``configs`` once each and reduce over ``group``. A config without a call (a known
    failure) is not run but still takes part in the reduction as infinity, so every rank
    reduces the same list whatever failed where. Those in ``timed`` were timed already (as they
    compiled: ``stream.py``) and take part as they are."""
    found, method = _by_profiler(request, configs, calls, method, do_bench, n_warmup, n_repeat, 1, group,
                                 on_candidate, session=not timed)
    if found is not None:
        return found
    timings, failures = {}, {}
    for config in configs:
        if timed and config in timed:
            timings[config] = timed[config]
            continue
        timings[config], reason = time_candidate(request, config, calls, method, do_bench, n_warmup, n_repeat,
                                                 on_candidate)
        if reason is not None:
            failures[config] = reason
    reduced = bus.first_result("tdp_reduce_timings", same_keys(timings), request=request, timings=timings, group=group)
    return (reduced if reduced is not None else timings), failures


def time_candidate(request, config, calls, method, do_bench, n_warmup, n_repeat,
                   on_candidate) -> tuple[list, Optional[str]]:
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


def scores_of(candidates: list) -> Callable[[Any], list]:
    """What ``tdp_rank_candidates`` must return: a number per candidate (NaN reads as "no opinion")."""

    def check(result: Any) -> list:
        if not isinstance(result, (list, tuple)) or len(result) != len(candidates):
            raise TypeError(f"expected a list of {len(candidates)} numbers, one per candidate")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in result):
            raise TypeError("expected numbers (a predicted time per candidate; inf: predicted not to run)")
        return model.unknown_last(list(result))

    return check


def finalists_of(candidates: list) -> Callable[[Any], list]:
    """What ``tdp_search`` must return: a list of the candidates it was given."""
    given = {id(c) for c in candidates}

    def check(result: Any) -> list:
        if not isinstance(result, (list, tuple)):
            raise TypeError("expected a list of the candidates to measure fully")
        if any(id(r) not in given for r in result):
            raise TypeError("expected only candidates it was given")
        return list(result)

    return check
