"""The cold first step of the built-in searches when a cost model has ranked the candidates
(``request.found.ranking``: ``tdp_rank_candidates``, ``model.py``): compile the model's best few, climb
from what measured best, and fall back to the model-free search whenever the model is not borne out.

1. **Kept**: the model's best (predicted within ``band`` of its best), at least ``keep_min`` and at
   most ``keep`` of the space (``keep_max`` of a large one), are compiled and screened in one wave.
2. **Borne out?** ``probes`` candidates from across the rest of the ranking are screened in the
   same wave. No probe may beat the best of those kept, and those kept must be faster than the
   probes at the median, by more than the screening's noise (without probes, the rank correlation
   of the predicted and screened times must reach ``rho_min``); else the model is no guide for this
   kernel and the search goes on without it (a small space is screened whole). If none of those
   kept worked, the next ranked batch is compiled, until one does.
3. **Climb**: the neighbours (one parameter one step away, ``space.py``) of the best ``guided_leaders``
   screened, but those the model predicts slower than ``1 + climb_band`` times its prediction for
   the best screened (spills) or not to run, are compiled and screened, again and again, until no
   leader has a neighbour left or a step finds nothing faster than the best already screened (each
   step is another round of compiles): a model that misjudges a parameter's best value is
   corrected here, one step at a time.

What is recorded (``request.found.model``): ``kept``, ``screened``, ``of``, ``rho``, ``trusted``, and
``recall``: whether the best screened was among those kept (a miss means the climb found it).
Every number named here is the tuning's ``policy.Policy`` (the engine's ``Screen`` holds it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from .space import Space


def usable(ranking: Any, candidates: list) -> bool:
    return isinstance(ranking, list) and len(ranking) == len(candidates) and \
        any(math.isfinite(s) for s in ranking)


def guided(request: Any, candidates: list, evaluate: Callable[[list], dict], space: Space,
           cap: int, batch: int, screen: Any) -> tuple[dict, bool]:
    """Screen the candidates as the module's docstring says: ``(screened, trusted)``; with
    ``trusted`` False the caller goes on with its own search from what was screened. ``screen``
    (the engine's ``Screen``) orders the leaders the climb starts from and tells the screening's
    noise."""
    scores, p = request.found.ranking, screen.policy
    position = {id(c): i for i, c in enumerate(candidates)}
    order = sorted((i for i, s in enumerate(scores) if math.isfinite(s)), key=lambda i: (scores[i], i))
    best = scores[order[0]]
    within = sum(scores[i] <= best * (1 + p.band) for i in order)
    keep = min(max(within, p.keep_min), max(p.keep_min, math.ceil(p.keep * len(candidates))), p.keep_max, cap)
    screened: dict = {}

    def step(subset: list) -> None:
        subset = [c for c in dict.fromkeys(subset) if c not in screened][: max(0, cap - len(screened))]
        if subset:
            screened.update(evaluate(subset))

    rest = order[keep:]
    # Probes: a few from across the rest of the ranking, compiled in the same wave, so that the model
    # is judged on the whole range it predicts (the best few are often too close to rank).
    # Not the very end: the worst-ranked are those predicted to spill, and compile for many seconds.
    probes = [candidates[rest[len(rest) * (j + 1) // (p.probes + 1)]] for j in range(p.probes)] if rest else []
    probes = list({id(c): c for c in probes}.values())
    step([candidates[i] for i in order[:keep]] + probes)
    at = keep
    while not screen.leaders(screened) and at < len(order) and len(screened) < cap:  # none of them ran: the next few
        step([candidates[i] for i in order[at:at + keep]])
        at += keep
    probed = {id(c) for c in probes}
    kept = {id(c) for c in screened if id(c) not in probed}
    rho = _spearman([scores[position[id(c)]] for c in screened], [t[0] for t in screened.values()])
    tolerance = screen.band(screened, tie=0.0)
    trusted = _borne_out([t[0] for c, t in screened.items() if id(c) in kept],
                         [t[0] for c, t in screened.items() if id(c) in probed], rho, tolerance, p.rho_min)
    if trusted:
        while len(screened) < cap:
            leaders = screen.leaders(screened)[:p.guided_leaders]
            # Not where the model, borne out so far, predicts far worse than the best measured.
            bound = scores[position[id(leaders[0])]] * (1 + p.climb_band) if leaders else math.inf
            frontier = [candidates[j] for c in leaders for j in space.neighbours(position[id(c)])
                        if candidates[j] not in screened and scores[j] <= bound]
            if not frontier:
                break
            fastest = _fastest(screened)
            step(frontier[:batch])
            if _fastest(screened) >= fastest:
                break  # this step found nothing faster: another would be one more round of compiles
    leader = screen.leaders(screened)[:1]
    request.found.model = {"kept": len(kept), "screened": len(screened), "of": len(candidates),
                           "rho": None if rho is None else round(rho, 3), "trusted": trusted,
                           "recall": bool(leader) and id(leader[0]) in kept}
    request.found.notes.append(_note(request.found.model))
    return screened, trusted


def _fastest(screened: dict) -> float:
    return min((t[0] for t in screened.values() if math.isfinite(t[0])), default=math.inf)


def _borne_out(kept: list, probes: list, rho: Optional[float], tolerance: float, rho_min: float) -> bool:
    """The model's best few are faster than the rest it was probed on: no probe beats the best of
    those kept, and the kept are faster at the median, by more than ``tolerance`` (the screening's
    noise: the verdict must not flip with it). Among the best few alone, times are often too close
    for their order to say anything; without probes (a space barely larger than those kept), the
    rank correlation decides."""
    kept = sorted(t for t in kept if math.isfinite(t))
    probes = sorted(t if math.isfinite(t) else math.inf for t in probes)
    if not kept:
        return False
    if not probes:
        return rho is not None and rho >= rho_min
    slack = 1 + tolerance
    return kept[0] <= probes[0] * slack and kept[len(kept) // 2] <= probes[len(probes) // 2] * slack


def _note(model: dict) -> str:
    """In plain words, for the printout and the report's notes (the numbers are in ``model``)."""
    if not model["trusted"]:
        return (f"cost model: its {model['kept']} likeliest of {model['of']} were not faster than the others "
                "it was checked on, so the search went on without it")
    found = "one of them" if model["recall"] else "not one of them"
    return (f"cost model: timed its {model['kept']} likeliest of {model['of']} ({model['screened']} timed in "
            f"all); the fastest timed was {found}")


def _spearman(xs: list, ys: list) -> Optional[float]:
    """The rank correlation of the pairs whose ``y`` is finite; None with fewer than four, or
    when either side is constant."""
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y) and math.isfinite(x)]
    if len(pairs) < 4:
        return None
    rx, ry = _ranks([p[0] for p in pairs]), _ranks([p[1] for p in pairs])
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else None


def _ranks(values: list) -> list:
    """Average ranks (ties share theirs)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks
