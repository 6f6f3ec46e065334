"""A tuning's candidates as points on a grid of their parameters' values, so that a search can
move from a candidate to its neighbours (one parameter, one step)."""

from __future__ import annotations

from typing import Any, Callable, Optional


def features_of(candidate: Any) -> dict:
    """A candidate's parameters: a ``triton.Config``'s meta-parameters and compile options, a
    dict's items; nothing for other objects (no structure to move along)."""
    if isinstance(candidate, dict):  # a function-level configuration; a Config in it is expanded
        found: dict = {}
        for name, value in candidate.items():
            inner = features_of(value) if isinstance(getattr(value, "kwargs", None), dict) else None
            found.update({f"{name}.{k}": v for k, v in inner.items()} if inner else {name: value})
        return found
    kwargs = getattr(candidate, "kwargs", None)
    if not isinstance(kwargs, dict):
        return {}
    found = dict(kwargs)
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "num_buffers_warp_spec", "num_consumer_groups",
                 "reg_dec_producer", "reg_inc_consumer", "ir_override"):
        if hasattr(candidate, name):
            found[name] = getattr(candidate, name)
    return found


def _order(value: Any) -> tuple:
    if value is None:
        return (0, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, repr(value))


class Space:
    """The candidates as points on a grid of their parameters' values, for moving step by step."""

    def __init__(self, candidates: list, features: Optional[Callable[[Any], dict]] = None):
        get = features or features_of
        rows = []
        for candidate in candidates:
            try:
                rows.append(get(candidate))
            except Exception:
                rows.append({})
        self.names: list = list(dict.fromkeys(name for row in rows for name in row))
        self.values: dict = {}
        for name in self.names:
            seen: dict = {}
            for row in rows:
                value = row.get(name)
                seen.setdefault(repr(value), value)
            self.values[name] = sorted(seen.values(), key=_order)
        index = {name: {repr(v): i for i, v in enumerate(vals)} for name, vals in self.values.items()}
        self.coords = [tuple(index[n][repr(row.get(n))] for n in self.names) for row in rows]
        self._lines: Optional[dict] = None

    def neighbours(self, position: int) -> list[int]:
        """Positions of the candidates one step from ``position``'s: the same in every parameter
        but one, and in that one the next value present below or above."""
        if self._lines is None:  # per parameter, the candidates alike in all others, in its order
            lines: dict = {}
            for i, coord in enumerate(self.coords):
                for d in range(len(self.names)):
                    lines.setdefault((d, coord[:d] + coord[d + 1:]), []).append(i)
            for (d, _), members in lines.items():
                members.sort(key=lambda i, d=d: self.coords[i][d])
            self._lines = lines
        coord, found = self.coords[position], []
        for d in range(len(self.names)):
            line = self._lines[(d, coord[:d] + coord[d + 1:])]
            at = line.index(position)
            found += [line[j] for j in (at - 1, at + 1) if 0 <= j < len(line)]
        return found

    def closest(self, coord: tuple) -> int:
        """The position of the candidate nearest ``coord`` (steps summed over parameters)."""
        return min(range(len(self.coords)), key=lambda i: (sum(abs(a - b) for a, b in zip(self.coords[i], coord)), i))
