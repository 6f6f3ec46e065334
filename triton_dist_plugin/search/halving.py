"""The built-in ``halving`` search (``TRITON_DIST_AUTOTUNE_SEARCH=halving``, the default), and the
knobs every built-in search shares (see ``strategy.py`` for the hook and the strategies' contract).

A cold key whose candidates a cost model ranked (``request.found.ranking``) takes the guided first step
of ``guided.py``; what follows is what it falls back to when the model is not borne out or abstains.

A space of at most ``TRITON_DIST_AUTOTUNE_SEARCH_WHOLE`` candidates with no tuned key nearby is
screened whole, its candidates compiled up front in parallel. A larger one is never compiled
whole: a seeded sample (``Policy.sample``) is screened, then the neighbours of the best ``leaders``
(one parameter one step away), batch after batch, until those have all been expanded (or
``TRITON_DIST_AUTOTUNE_SEARCH_BUDGET`` is spent). A candidate far from every leader is never
compiled: that is how hopeless shapes are left out. A neighbour that failed (out of resources,
say) is stepped across: its own neighbours join the frontier. At a local best it screens one
more sample, and climbs on from it only if that found better. With a warm start (``request.found.prior``: the
nearest tuned key's candidates, fastest first), whatever the space's size, the first step
screens that ranking's best, the neighbours of its pick and the candidates that key never had
(``request.found.prior_unseen``: ``configs=[]`` generates per shape) in one wave of compiles, and
the search climbs on only while the best moves. The survivors are then halved through longer rounds
by the engine, as for any space.
"""

from __future__ import annotations

import math
import random
import zlib
from typing import Any, Callable, Optional

from .. import settings
from ..policy import Policy
from ..policy import current as current_policy
from . import guided
from .space import Space

SEARCH_ENV = "TRITON_DIST_AUTOTUNE_SEARCH"
WHOLE_ENV = "TRITON_DIST_AUTOTUNE_SEARCH_WHOLE"
BUDGET_ENV = "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET"
WARM_ENV = "TRITON_DIST_AUTOTUNE_WARM_START"


def whole_limit(policy: Optional[Policy] = None) -> int:
    """Spaces up to this many are screened whole: ``TRITON_DIST_AUTOTUNE_SEARCH_WHOLE``, else the policy's."""
    value = settings.value(WHOLE_ENV)
    return (policy or current_policy()).whole if value is None else value


def budget(n: int) -> int:
    value = settings.value(BUDGET_ENV)
    return n if not value else min(n, value)


def seed(request: Any) -> int:
    """The same on every rank and in every process (``hash`` of a string is neither)."""
    return zlib.crc32(f"{request.kernel_name}|{request.key!r}".encode())


def ranked(timings: dict) -> list:
    """The candidates of ``timings`` with a finite time, fastest first (ties: the given order)."""
    order = {id(c): i for i, c in enumerate(timings)}
    return sorted((c for c, t in timings.items() if math.isfinite(t[0])), key=lambda c: (timings[c][0], order[id(c)]))


def halving(request: Any, candidates: list, evaluate: Callable[[list], dict], space: Space, screen: Any) -> list:
    """The built-in ``halving`` strategy (see the module's docstring)."""
    policy = screen.policy
    given = {id(c) for c in candidates}
    prior = [c for c in (request.found.prior or []) if id(c) in given]
    cap = budget(len(candidates))
    screened: dict = {}
    if not prior and guided.usable(request.found.ranking, candidates):
        screened, trusted = guided.guided(request, candidates, evaluate, space, cap, policy.batch, screen)
        if trusted or len(screened) >= cap:
            return screen.survivors(screened)
    if not prior and len(candidates) <= whole_limit(policy):
        screened.update(evaluate(candidates))
        return screen.survivors(screened)
    _climb(request, candidates, evaluate, space, policy, prior, cap, screened)
    request.found.notes.append(f"searched {len(screened)} of {len(candidates)} candidates"
                               + (f", starting from the nearest tuned key {request.found.prior_key}" if prior else ""))
    return screen.survivors(screened)


def _climb(request: Any, candidates: list, evaluate: Callable[[list], dict], space: Space, policy: Any,
           prior: list, cap: int, screened: dict) -> None:
    """Screen into ``screened``: a warm start's first step, or a seeded sample, then the
    neighbours of the best, step by step, until none is left (or ``cap`` candidates)."""
    given = {id(c) for c in candidates}
    position = {id(c): i for i, c in enumerate(candidates)}
    rng = random.Random(seed(request))

    def step(subset: list) -> None:
        subset = [c for c in dict.fromkeys(subset) if c not in screened][: max(0, cap - len(screened))]
        if subset:
            screened.update(evaluate(subset))

    def near(c: Any) -> list:
        return [candidates[j] for j in space.neighbours(position[id(c)])]

    def around(leaders: list) -> list:
        """Not yet screened: the leaders' neighbours, and the neighbours of those that failed (a
        config that ran out of resources is a wall; the way round it is one more step in another
        parameter: more ``BLOCK_K`` with fewer stages, say)."""
        found = []
        for leader in leaders:
            for c in near(leader):
                failed = c in screened and not math.isfinite(screened[c][0])
                found += near(c) if failed else [c]
        return [c for c in dict.fromkeys(found) if c not in screened]

    def sample() -> list:
        rest = [c for c in candidates if c not in screened]
        return rng.sample(rest, min(policy.sample, len(rest)))

    # A warm start screens the nearest key's best, the neighbours of its pick and what that key
    # never had (``request.found.prior_unseen``) in one step (one wave of compiles); a cold one a
    # seeded sample, large enough to land near the good region.
    unseen = [c for c in request.found.prior_unseen or [] if id(c) in given]
    step(prior[:policy.warm_first] + around(prior[:1]) + unseen if prior else sample())
    restarted = False
    while len(screened) < cap:
        order = ranked(screened)
        if not order:  # nothing worked yet: another sample
            if len(screened) == len(candidates):
                break
            step(sample())
            continue
        # Warm: climb from the best while it moves; cold: expand the best few until all are.
        frontier = around(order[: 1 if prior else policy.leaders])
        if frontier:
            step(frontier[:policy.batch])
            continue
        if prior or restarted or len(screened) == len(candidates):
            break
        restarted = True  # cold, at a local best: one more sample, climbing on if it finds better
        best = screened[order[0]][0]
        step(sample()[:policy.batch])
        if screened[ranked(screened)[0]][0] >= best:
            break
