"""A pick for a key nobody tuned, from the keys tuned around it (frozen mode's ``nearest``).

The nearest tuned key's pick is right where the best config changes slowly with the shape. Where
the neighbours disagree, a config good at all of them is often better: ``weighted`` takes the one
with the lowest slowdown (its full measurement over that key's best) averaged over the
neighbours, each weighed by its closeness (``keys.distance``), among the configs measured fully
at more than half of them. Where the launch says how many programs each config starts at a key
(``fill``), ``filled`` first carries each slowdown to the key asked for: a config whose programs
fill the machine's last wave at a neighbour but leave most of it idle at the key asked for (or
the reverse) is slower (faster) there by that much. A rule other than the nearest key's pick is
used only where the data says so (``choose``): each neighbour in turn is held out and predicted
from the others by every rule, and the rule that lost least there, on average, must lose less
than the nearest key's pick by more than ``MARGIN``; otherwise the nearest key's pick stands.
Ties go to the first in the given order, so every process and rank that reads the same entries
launches the same config.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any, Callable, Optional

from . import keys

MARGIN = 0.005  # how much less the weighted pick must lose, held out, to be trusted
LEAST = 3  # neighbours needed before the weighted pick is even tried
MOST = 5  # neighbours read at most (the nearest): a miss reads a few entries, not the folder


def weighted(target: Any, neighbours: list, order: list) -> Optional[str]:
    """The config (of ``order``) with the lowest closeness-weighted slowdown over ``neighbours``
    (``[(key, {config: ms}, pick)]``), or None where none was measured at more than half of them."""
    return _lowest(target, neighbours, order, lambda config, key, times: times[config] / min(times.values()))


def filled(target: Any, neighbours: list, order: list, fill: Callable[[Any, str], Optional[float]]) -> Optional[str]:
    """As ``weighted``, in log space, with each neighbour's slowdown carried to ``target`` by the
    share of the machine the config's programs keep busy at both keys (``fill(key, config)``: in
    (0, 1], None where unknown, and then that neighbour's slowdown is taken as it is)."""
    def carried(config: str, key: Any, times: dict) -> float:
        at_target, there = fill(target, config), fill(key, config)
        shift = math.log(there / at_target) if at_target and there else 0.0
        return math.log(times[config] / min(times.values())) + shift

    return _lowest(target, neighbours, order, carried)


def _lowest(target: Any, neighbours: list, order: list, score: Callable[[str, Any, dict], float]) -> Optional[str]:
    """The config of ``order`` with the lowest ``score(config, key, times)`` averaged over the
    neighbours that measured it, each weighed by its closeness to ``target``; only configs measured
    at more than half of them; ties to the first in ``order``."""
    scores = {}
    for config in order:
        parts = [(1.0 / (keys.distance(target, key) + 1e-3), score(config, key, times))
                 for key, times, _ in neighbours if config in times]
        weights = math.fsum(w for w, _ in parts)  # exact sums: the same score in any order of the neighbours
        if 2 * len(parts) > len(neighbours) and weights > 0:
            scores[config] = math.fsum(w * s for w, s in parts) / weights
    return min(scores, key=lambda c: (scores[c], order.index(c))) if scores else None


def _informs(fill: Any, target: Any, neighbours: list, order: list) -> bool:
    """Whether ``fill`` knows anything at ``target`` and at a neighbour: else ``filled`` would only
    be another average of the same slowdowns, and the rules stay as they were without it."""
    return fill is not None and any(fill(target, c) is not None for c in order) and \
        any(fill(key, c) is not None for key, _, _ in neighbours for c in order)


def _nearest(target: Any, neighbours: list) -> Optional[str]:
    found = min(neighbours, key=lambda n: (keys.distance(target, n[0]), repr(n[0])), default=None)
    return found[2] if found is not None else None


def choose(target: Any, neighbours: list, order: list,
           fill: Optional[Callable[[Any, str], Optional[float]]] = None) -> tuple[Optional[str], bool]:
    """``(config, trusted)``: the pick for ``target`` from ``neighbours`` (nearest first), and
    whether it is another rule's (the held-out check trusted it) rather than the nearest key's."""
    nearest = _nearest(target, neighbours)
    if len(neighbours) < LEAST:
        return nearest, False
    rules: list = [weighted] + ([functools.partial(filled, fill=fill)] if _informs(fill, target, neighbours, order)
                                else [])
    lost: list = [[] for _ in range(len(rules) + 1)]  # the nearest key's pick last
    for i, (key, times, _) in enumerate(neighbours):
        others = neighbours[:i] + neighbours[i + 1:]
        guesses = [rule(key, others, order) for rule in rules] + [_nearest(key, others)]
        if all(guess in times for guess in guesses):
            best = min(times.values())
            for losses, guess in zip(lost, guesses):
                losses.append(times[guess] / best)
    if len(lost[-1]) < 2:
        return nearest, False
    means = [statistics.fmean(losses) for losses in lost]
    chosen = min(range(len(rules)), key=lambda r: (means[r], r))
    if not means[chosen] < means[-1] - MARGIN:
        return nearest, False
    guess = rules[chosen](target, neighbours, order)
    return (guess, True) if guess is not None else (nearest, False)


def measured(record: dict) -> dict:
    """``{config: ms}``: a stored entry's full measurements (finite, positive)."""
    return {c["config"]: c["ms"] for c in record["candidates"] if c.get("measured") is True
            and isinstance(c.get("ms"), (int, float)) and not isinstance(c["ms"], bool)
            and math.isfinite(c["ms"]) and c["ms"] > 0}
