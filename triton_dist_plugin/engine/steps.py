"""One step of a search, as ``loop.run_candidates`` hands it to the search: ``evaluate(subset)``."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from ..compiling.stream import Stream
from ..search.space import Space
from .rounds import round_, time_candidate
from .screen import Screen


class Steps:
    """What the search calls as ``evaluate(subset)``: ready a step (screening each candidate as it
    compiles, where the stream may), hold the anchor, and screen the rest of it in one round (on a
    device, those screened as they compiled once more: ``again``). ``run``: the tuning's ``loop._Run``."""

    def __init__(self, run: Any, screen: Screen, space: Space, anchor: Optional[Callable[[], Any]]):
        self.run, self.screen, self.space, self.anchor = run, screen, space, anchor
        self.screened: dict = {}
        self.anchored = False
        self.early = self.hopeless = 0

    def time_early(self, config: Any) -> list:  # a candidate just compiled, screened by the stream
        run, policy = self.run, self.run.policy
        run.set_up(config)
        timing, reason = time_candidate(run.request, config, run.calls, run.method, None, policy.screen_warmup,
                                        policy.screen_repeat, run.on_candidate)
        if reason is not None:
            run.failures[config] = reason
        return timing

    def again(self, first: dict, early: dict) -> dict:
        """Those screened as they compiled ran while the device idled between compiles, at a low
        clock: on an H100 about one such screening in thirty came out over 8% slow (up to 60%),
        enough to drop the best from the survivors in one process and not in the next. Each is
        screened once more now that the step is in, and keeps the faster of its two (a low clock
        only ever slows a run); one that raises now has failed, as in any round."""
        run = self.run
        redo = [c for c in early if c in first and math.isfinite(first[c][0])]
        second, failed = round_(run.request, redo, run.calls, run.method, None, run.policy.screen_warmup,
                                run.policy.screen_repeat, run.group, None)
        run.failures.update(failed)
        return {c: second[c] if c in failed or (c in second and second[c][0] < t[0]) else t
                for c, t in first.items()}

    def __call__(self, subset: list) -> dict:
        run = self.run
        done = {id(s) for s in self.screened}
        subset = [c for c in dict.fromkeys(subset) if id(c) not in done]
        stream = Stream(subset, run.configs, self.space, self.screened, self.time_early, skip=run.alone,
                        policy=run.policy)
        left = run.ready_up(subset, stream)
        # Judged again once the whole step is in: one skipped on early evidence that now has a
        # promising neighbour is compiled after all.
        while again := [c for c in left if stream.wanted(c)]:
            chosen = {id(c) for c in again}
            left = [c for c in left if id(c) not in chosen] + run.ready_up(again, stream)
        skipped = {id(c) for c in left}
        subset = [c for c in subset if id(c) not in skipped]
        if self.anchor is not None and not self.anchored:
            self.anchored = True  # asked once, on every rank alike (a collective under a group)
            pinned = self.anchor()
            held = any(c is pinned for c in run.configs) and id(pinned) not in done
            if held and all(c is not pinned for c in subset):
                run.ready_up([pinned])
                subset.append(pinned)
        first = run.round(subset, run.policy.screen_warmup, run.policy.screen_repeat, timed=stream.timings)
        if stream.timings and run.alone and run.method != "wall":
            first = self.again(first, stream.timings)
        self.early += len(stream.timings)
        self.hopeless += len(skipped)
        self.screened.update(first)
        run.timings.update(first)
        return first
