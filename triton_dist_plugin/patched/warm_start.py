"""A warm start: a new key's candidates ranked as the nearest tuned key's were, so that the search
screens the likely best first (``search/halving``, ``search/tpe``)."""

from __future__ import annotations

from typing import Any

from .. import distributed, policy, settings
from ..search import strategy as search
from ..store import describe, keys
from .kernel_state import KernelState


def warm_start(state: KernelState, store: Any, key: tuple, configs: list, group: Any) -> tuple:
    """``(prior, prior_key, unseen)``: ``configs`` as the nearest tuned key ranked them (fastest
    first), from this process's tunings and the nearest key on disk (found through its folder's
    index, not by reading every entry), and those of ``configs`` that key's space did not hold
    where it was small enough to be kept (``configs=[]`` generates per shape: nothing is known of
    the others); ``(None, None, [])`` when no tuned key is near
    (``keys.nearest``: same non-numeric parts, closest shapes; and within
    ``Policy.warm_distance``: shapes at most 16 times apart in all), or with
    ``TRITON_DIST_AUTOTUNE_WARM_START=0``. Under a group every rank takes the group's rank 0's
    (the rank that writes the picks to disk, so the one that holds them)."""
    prior = near = None
    unseen: list = []
    if settings.value(search.WARM_ENV):
        stored = store.nearest_ranking(key) if store is not None else None  # the nearest on disk, from its index
        tuned = {**({stored[0]: stored[1]} if stored is not None else {}), **state.rankings}
        tuned.pop(key, None)
        near = keys.nearest(list(tuned), key)
        if near is not None and keys.distance(near, key) <= policy.current().warm_distance:
            by_name = {describe.describe(c): c for c in configs}
            ranking, held = tuned[near]
            prior = [by_name[d] for d in ranking if d in by_name] or None
            if prior and held is not None:
                held = set(held)
                unseen = [c for d, c in by_name.items() if d not in held]
    if group is not None:  # the ranks tune the same candidates (checked): rank 0's ranking, by position
        position = {id(c): i for i, c in enumerate(configs)}
        shared = distributed.from_first(group, [[position[id(c)] for c in prior or []], repr(near) if prior else None,
                                                [position[id(c)] for c in unseen]],
                                        f"sharing a warm start for {state.name}")
        prior, near, unseen = [configs[i] for i in shared[0]] or None, shared[1], [configs[i] for i in shared[2]]
    return prior, (near if prior else None), (unseen if prior else [])
