"""Screening each candidate as soon as it has compiled, and leaving hopeless ones uncompiled.

While forked workers compile a step's candidates (``forked_compile.py``), the tuning thread loads
each one as it arrives; it now screens it there and then, with the same short round the engine
would run after the step (same counts, method, thread and stream), so a step's screening is done
almost when its last compile lands.

Before a candidate goes to a worker, the tuning thread asks whether it is still wanted. Once half of
the step has arrived, a candidate is left uncompiled when at least two of its neighbours on the
grid (one parameter, one step away: ``space.py``) have been screened and every one of those is
``Policy.hopeless`` times slower than the best screened so far. That is the smoothness the search
itself relies on when it never compiles candidates far from its leaders. It is safe because:

- a compile already running is never interrupted (it is asked only before it starts), so
  Triton's cache never holds half a kernel;
- each later arrival judges the skipped ones again, and one that now has a promising neighbour
  goes back to the workers (``forked_compile``); the engine judges once more when the step ends;
- a skipped candidate is not a failure: it gets no timing, and a later step that asks for it
  compiles it then;
- the pick is still among the candidates measured fully;
- only a tuning without a group skips: ranks compile at their own pace and would skip different
  candidates, and every rank must screen the same ones.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Optional

from .. import failures
from ..policy import Policy
from ..search.space import Space

SKIPPED = failures.NOT_COMPILED


class Stream:
    """One step's candidates as they compile: ``ready`` screens one, ``wanted`` says whether one
    not yet compiled is still worth compiling."""

    def __init__(self, subset: list, configs: list, space: Space, screened: dict,
                 time: Callable[[Any], list], skip: bool, policy: Policy):
        self.owner = threading.get_ident()
        self.size = len(subset)
        self.configs, self.space, self.screened = configs, space, screened
        self.position = {id(c): i for i, c in enumerate(configs)}
        self.time, self.skip, self.policy = time, skip, policy
        self.timings: dict = {}  # screened here, as they arrived

    def ready(self, config: Any) -> None:
        """``config`` has compiled and is loaded: screen it now, if this is the tuning's thread
        (elsewhere the stream differs, and the step's round times it as usual)."""
        if threading.get_ident() == self.owner and config not in self.timings:
            self.timings[config] = self.time(config)

    def wanted(self, config: Any) -> bool:
        if not self.skip or len(self.timings) < self.policy.evidence * self.size or id(config) not in self.position:
            return True
        best = self._best()
        near = [t for t in map(self._time_of, self.space.neighbours(self.position[id(config)])) if t is not None]
        return best is None or len(near) < 2 or min(near) < self.policy.hopeless * best

    def _time_of(self, j: int) -> Optional[float]:
        config = self.configs[j]
        timing = self.timings.get(config) or self.screened.get(config)
        return timing[0] if timing is not None and math.isfinite(timing[0]) else None

    def _best(self) -> Optional[float]:
        found = [t[0] for t in (*self.timings.values(), *self.screened.values()) if math.isfinite(t[0])]
        return min(found) if found else None
