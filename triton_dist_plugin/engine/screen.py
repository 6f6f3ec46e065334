"""The screening's judgement: which candidates a short round keeps, which of the longer round go
on to the full measurement, and in what order a search climbs from its leaders. Candidates a round
cannot tell apart keep the given order, so that processes and ranks keep the same ones."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import settle
from ..policy import Policy
from ..policy import current as current_policy

#: The fields of a Screen before ``policy.Policy`` held them -> the policy's names.
_FIELDS = {"n_warmup": "screen_warmup", "n_repeat": "screen_repeat",
           **{f: f for f in ("margin", "keep_at_least", "min_candidates", "fraction", "second_repeat", "final_count",
                             "final_most", "screen_tie", "second_tie", "tied_most", "full_ms", "warm_ms",
                             "full_rounds")}}


@dataclass
class Screen:
    """A cheap first round for every candidate; only those near the best are measured fully. Every
    number it goes by is its ``policy``'s (``policy.py``)."""

    policy: Policy = field(default_factory=current_policy)
    #: each candidate's place in the given order (``id`` -> position), set by ``run_candidates``
    order: dict = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # The fields a Screen held before the policy did, read from it: a ``tdp_search`` plugin
        # written against them (``screen.n_repeat``, ``screen.margin``, ...) reads the same numbers.
        if name in _FIELDS:
            return getattr(self.policy, _FIELDS[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def full_runs(self, timings: dict, finalists: list) -> tuple[Optional[int], Optional[int]]:
        """``(n_warmup, n_repeat)`` for the finalists' full measurement: about ``full_ms`` of the
        fastest of their earlier times (``full_runs_least`` to ``full_runs_most`` runs); ``(None, None)`` (the
        benchmarker's own budget) where none was timed yet."""
        fastest = fastest_of(timings, finalists)
        if fastest is None or not self.policy.full_ms:
            return None, None
        p = self.policy
        runs = max(p.full_runs_least, min(p.full_runs_most, round(p.full_ms / timings[fastest][0])))
        return max(5, runs // 4), runs

    def warm_up(self, calls: dict, timings: dict, finalists: list) -> None:
        """Run the fastest of ``finalists`` for about ``warm_ms`` (by its screening time), untimed."""
        fastest = fastest_of(timings, finalists)  # timed, so it has a call
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
        fastest = ranked(timings)
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
        valid = ranked(timings)
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
        return [c for _, _, c in self._stable(ranked(timings), timings, p.screen_tie, p.screen_repeat)[0]]

    def _stable(self, ranked: list, timings: dict, tie: float, runs: int) -> tuple[list, int]:
        """``ranked`` (``ranked(timings)``: ``(median, position, config)``, fastest first), but those
        the round cannot tell from the fastest first and in the given order; and how many those are."""
        if not ranked:
            return ranked, 0
        edge = ranked[0][0] * (1 + self.band(timings, tie, runs))
        tied = sum(r[0] <= edge for r in ranked)
        return sorted(ranked, key=lambda r: (0, self.order.get(id(r[2]), r[1]), 0.0) if r[0] <= edge
                      else (1, 0, r[0])), tied


def fastest_of(timings: dict, configs: list) -> Any:
    """The one of ``configs`` with the smallest positive finite time in ``timings``, or None."""
    timed = [c for c in configs if c in timings and 0 < timings[c][0] < math.inf]
    return min(timed, key=lambda c: timings[c][0]) if timed else None


def ranked(timings: dict) -> list:
    """``(median, position, config)`` of the candidates with a finite time, fastest first."""
    return sorted((t[0], i, c) for i, (c, t) in enumerate(timings.items()) if math.isfinite(t[0]))
