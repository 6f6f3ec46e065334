"""A pick for a key nobody tuned, from the keys tuned around it (frozen mode's ``nearest``).

The nearest tuned key's pick is right where the best config changes slowly with the shape. Where
the neighbours disagree, a config good at all of them is often better: ``weighted`` takes the one
with the lowest slowdown (its full measurement over that key's best) averaged over the
neighbours, each weighed by its closeness (``keys.distance``), among the configs measured fully
at more than half of them. It is used only where the data says so (``choose``): each neighbour in
turn is held out and predicted from the others both ways, and the weighted pick must lose less
there, on average, than the nearest key's pick, by more than ``MARGIN``; otherwise the nearest
key's pick stands, as before. Ties go to the first in the given order, so every process and rank
that reads the same entries launches the same config.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Optional

from . import keys

MARGIN = 0.005  # how much less the weighted pick must lose, held out, to be trusted
LEAST = 3  # neighbours needed before the weighted pick is even tried
MOST = 5  # neighbours read at most (the nearest): a miss reads a few entries, not the folder


def weighted(target: Any, neighbours: list, order: list) -> Optional[str]:
    """The config (of ``order``) with the lowest closeness-weighted slowdown over ``neighbours``
    (``[(key, {config: ms}, pick)]``), or None where none was measured at more than half of them."""
    scores = {}
    for config in order:
        parts = [(1.0 / (keys.distance(target, key) + 1e-3), times[config] / min(times.values()))
                 for key, times, _ in neighbours if config in times]
        weights = math.fsum(w for w, _ in parts)  # exact sums: the same score in any order of the neighbours
        if 2 * len(parts) > len(neighbours) and weights > 0:
            scores[config] = math.fsum(w * s for w, s in parts) / weights
    return min(scores, key=lambda c: (scores[c], order.index(c))) if scores else None


def _nearest(target: Any, neighbours: list) -> Optional[str]:
    found = min(neighbours, key=lambda n: (keys.distance(target, n[0]), repr(n[0])), default=None)
    return found[2] if found is not None else None


def choose(target: Any, neighbours: list, order: list) -> tuple[Optional[str], bool]:
    """``(config, weighted)``: the pick for ``target`` from ``neighbours`` (nearest first), and
    whether it is the weighted one (the held-out check trusted it) rather than the nearest key's."""
    nearest = _nearest(target, neighbours)
    if len(neighbours) < LEAST:
        return nearest, False
    lost_weighted, lost_nearest = [], []
    for i, (key, times, _) in enumerate(neighbours):
        others = neighbours[:i] + neighbours[i + 1:]
        guess, near = weighted(key, others, order), _nearest(key, others)
        if guess in times and near in times:
            best = min(times.values())
            lost_weighted.append(times[guess] / best)
            lost_nearest.append(times[near] / best)
    if len(lost_weighted) < 2 or not statistics.fmean(lost_weighted) < statistics.fmean(lost_nearest) - MARGIN:
        return nearest, False
    guess = weighted(target, neighbours, order)
    return (guess, True) if guess is not None else (nearest, False)


def measured(record: dict) -> dict:
    """``{config: ms}``: a stored entry's full measurements (finite, positive)."""
    return {c["config"]: c["ms"] for c in record["candidates"] if c.get("measured") is True
            and isinstance(c.get("ms"), (int, float)) and not isinstance(c["ms"], bool)
            and math.isfinite(c["ms"]) and c["ms"] > 0}
