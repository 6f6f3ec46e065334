"""Deciding between finalists too close to tell apart, the same way in every process.

Two configs a fraction of a percent apart swap places from one run to the next: the last digit of
a noisy median decides, and a process (or a rank) that picks the other one gets another tile order,
hence other roundings, for no speed gained. So after the full measurement, the finalists within the
noise of the best (``Policy.tie``, or their own spread where that is wider) are measured again, in rounds
that alternate their order (so that clocks and caches drifting during tuning favour none), and
compared by their medians over the rounds: ``settle_rounds`` of them, or only ``settle_rounds_least``
where those already leave no other pick possible. Those still within ``tie`` of the fastest (or within
three standard errors of those medians, where the rounds vary more) are a tie,
and the tie goes to the first of them in the given order: the same in every process and on every
rank, whatever the noise did.

A pick is never slower than the fastest over the rounds by more than that band (``tie`` where the
rounds agree, ``tie_most`` at most; each number is the tuning's ``policy.Policy``); what is recorded
with it (``decision``) says by how much it
won, how noisy the measurements were, how many rounds it took, and how often the pick came out
within the tie of every other. The earlier rounds (``engine.Screen``) let the given order decide
among the candidates they cannot tell apart, too, so that the same ones reach this point.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from .policy import Policy


def spread(timing: list) -> float:
    """The relative width of ``[p50, p20, p80]`` (0 for a single value)."""
    p50, p20, p80 = (list(timing) + [timing[0]] * 2)[:3]
    return (p80 - p20) / p50 if p50 and math.isfinite(p50) and p80 >= p20 else 0.0


def round_runs(policy: Policy, ms: float) -> int:
    """How many timed runs each finalist gets in a settling round, its time being ``ms``: about
    ``settle_ms`` of it, ``second_repeat`` at least and ``settle_runs_most`` at most."""
    if not (ms > 0 and math.isfinite(ms)) or policy.settle_ms <= policy.second_repeat * ms:
        return policy.second_repeat
    runs = policy.settle_ms / ms  # above second_repeat here; compared before rounding, as it may be infinite
    return policy.settle_runs_most if runs >= policy.settle_runs_most else round(runs)


def settle(valid: dict, order: list, measure: Callable[[list], dict], policy: Policy) -> tuple[Any, dict]:
    """The pick among ``valid`` (``{config: [p50, p20, p80]}``, the finalists that ran) and its
    ``decision``. ``order``: every candidate in the given order; ``measure(configs)`` times
    those configs once each, in that order (reduced over the group: the same on every rank)."""
    fastest = min(valid, key=lambda c: valid[c][0])
    best = valid[fastest][0]
    spreads = [spread(t) for t in valid.values()]
    # A timer that answers one number says nothing of its noise: assume some.
    known = any(spreads)
    capped = known and max(spreads) > policy.noise_cap
    noise = min(policy.noise_cap, max(spreads)) if known else policy.unknown_noise
    close = [c for c in order if c in valid and valid[c][0] <= best * (1 + max(policy.tie, noise))]
    if len(close) < 2:
        others = [t[0] for c, t in valid.items() if c is not fastest]
        margin = min(others) / best - 1 if others and best > 0 else math.inf
        return fastest, _decision(margin, noise, 0, 1.0, False, known, capped)
    rounds: list = []
    for i in range(policy.settle_rounds):
        timed = measure(close[i % len(close):] + close[: i % len(close)])  # each starts a round in turn
        rounds.append({id(c): timed[c][0] for c in close})
        verdict = _verdict(close, rounds, policy)
        if verdict is None:  # they stopped working (another rank failed them, say): the full measurement stands
            return fastest, {**_decision(math.inf, noise, len(rounds), 0.0, False, known, capped),
                             "rounds_failed": True}
        if len(rounds) >= policy.settle_rounds_least and _decided(close, rounds, *verdict[:3]):
            break
    pick, medians, band, tied = verdict
    rivals = [medians[id(c)] for c in close if c is not pick and id(c) in medians]
    margin = min(rivals) / medians[id(pick)] - 1 if rivals and medians[id(pick)] > 0 else math.inf
    won = _won(pick, close, medians, band, rounds)
    return pick, _decision(margin, noise, len(rounds), won / len(rounds), len(tied) > 1, known, capped)


def _verdict(close: list, rounds: list, policy: Policy):
    """``(pick, medians, band, tied)`` over the rounds so far (``medians``: ``id`` -> median over
    the rounds, of those that ran), or None when none ran."""
    medians = {id(c): statistics.median(r[id(c)] for r in rounds) for c in close}
    ran = [c for c in close if math.isfinite(medians[id(c)])]
    if not ran:
        return None
    medians = {id(c): medians[id(c)] for c in ran}
    top = min(medians.values())
    # Too close to call: within the tie, or within three standard errors of the rounds' medians (the
    # difference of two such medians varies by about 1.4 of them).
    errors = sorted(_relative_error([r[id(c)] for r in rounds]) for c in ran)
    band = min(policy.tie_most, max(policy.tie, 3 * errors[len(errors) // 2]))
    tied = [c for c in ran if medians[id(c)] <= top * (1 + band)]
    return tied[0], medians, band, tied  # the first in the given order: a stable rule, not the noise's choice


def _won(pick: Any, close: list, medians: dict, band: float, rounds: list) -> int:
    """The rounds in which ``pick`` came out within the band of every other that ran."""
    others = [id(c) for c in close if c is not pick and id(c) in medians]
    return sum(all(r[id(pick)] <= r[i] * (1 + band) for i in others) for r in rounds)


def _decided(close: list, rounds: list, pick: Any, medians: dict, band: float) -> bool:
    """Whether more rounds could hardly change the pick: it was within the band of every other in
    every round (none later in the given order can overtake it), and each of those before it in
    the given order is slower by over twice the band (none can join a tie and take it)."""
    before = [id(c) for c in close[: close.index(pick)] if id(c) in medians]
    return _won(pick, close, medians, band, rounds) == len(rounds) and \
        all(medians[i] > medians[id(pick)] * (1 + 2 * band) for i in before)


def _relative_error(times: list) -> float:
    """The standard error of the mean of ``times``, relative to their median (0 with fewer than two)."""
    finite = [t for t in times if math.isfinite(t)]
    if len(finite) < 2:
        return 0.0
    return statistics.stdev(finite) / statistics.median(finite) / math.sqrt(len(finite))


def _decision(margin: float, noise: float, rounds: int, confidence: float, tie: bool, known: bool,
              capped: bool) -> dict:
    """What is stored with the pick (``reporting.pick_reason`` words it for every view): ``noise_known``
    false where the timer gave one number (the noise is the policy's assumption), ``noise_capped``
    where the runs spread more than ``Policy.noise_cap``, which is what was counted."""
    return {"margin": round(margin, 4) if math.isfinite(margin) else None, "noise": round(noise, 4),
            "noise_known": known, "noise_capped": capped, "rounds": rounds, "confidence": round(confidence, 3),
            "tie": tie}
