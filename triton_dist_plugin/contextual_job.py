"""The tuning job of one kernel's key inside a contextual tuning (``contextual``).

Every candidate gets ``n_warmup`` warm-up and ``n_repeat`` timed calls of the whole decorated
function, the other kernels running their pick (or their first valid candidate) meanwhile. The
pick lives in the kernel's own cache for this process (the tuner writes every pick at the end),
so nothing is read or persisted. ``job.run`` brings the rest, as for every front end: settings
checked, a capture refused, the ranks of ``is_dist=True`` agreeing on the key, the candidates and
the checks (the counts among them: each is a call of the function, with whatever collectives it
makes) before the first call, and the record.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Optional

from . import distributed, engine, job
from .hook_objects import TuningRecord
from .patched import accuracy


class ContextualJob(job.Job):
    """One kernel's key (``entry``) of a contextual tuning (``session``). Frozen mode never
    reaches one: the tuner then runs the function as it is."""

    def __init__(self, tuner: Any, session: Any, entry: Any, args: tuple, kwargs: dict,
                 group: Any):
        self.tuner, self.session, self.entry, self.args, self.kwargs = tuner, session, entry, args, kwargs
        self.name, self.key, self.group = f"contextual tuning of {entry.state.name}", entry.key, group
        self.labels = [str(c) for c in entry.configs]
        self.checks = {"accuracy": accuracy.accuracy_check_enabled(entry.tuner), "n_warmup": tuner.n_warmup,
                       "n_repeat": tuner.n_repeat}

    def tune(self) -> engine.Outcome:
        session, entry, n = self.session, self.entry, len(self.entry.configs)
        progress = sys.stderr.isatty() and session.rank == 0
        start = time.perf_counter()
        for index in range(n if n > 1 else 0):
            if progress:
                print(f"\r[contextual_autotune] {entry.label}: candidate {index + 1}/{n}", end="", file=sys.stderr,
                      flush=True)
            self._rounds(index)
        session.target, session.timed = None, False
        if progress:
            print(file=sys.stderr)
        means = self._means()
        valid = [i for i in range(n) if math.isfinite(means[i])]
        if not valid:
            reasons = "; ".join(f"candidate {i}: {entry.invalid.get(i, 'invalid on another rank')}" for i in range(n))
            raise RuntimeError(f"cannot find valid config for {entry.label} ({reasons})")
        best = min(valid, key=lambda i: means[i])
        return engine.Outcome(best=best, timings={i: [means[i]] * 3 for i in range(n)},
                              failures={i: entry.invalid.get(i, "invalid on another rank") for i in range(n)
                                        if i not in valid}, bench_time=time.perf_counter() - start,
                              measured=valid)

    def _rounds(self, index: int) -> None:
        session, entry = self.session, self.entry
        for round_ in range(self.tuner.n_warmup + self.tuner.n_repeat):
            if index in entry.invalid and self.group is None:
                break  # alone, skip the rest; together, every rank must run the same rounds
            session.target, session.timed = (entry, index), round_ >= self.tuner.n_warmup
            self.tuner.fn(*self.args, **self.kwargs)
            session.collect()
            phase = "timed" if session.timed else "warm-up"
            samples = entry.samples.get(index, [])
            last = f"{samples[-1]:.4f} ms" if session.timed and samples else "-"
            session.log(f"{entry.label} candidate {index} ({entry.configs[index]}) round {round_} {phase}: {last}")

    def _means(self) -> list:
        """Each candidate's mean time (infinity where it failed), the slowest rank's under a group."""
        entry, n = self.entry, len(self.entry.configs)
        means = [math.inf if i in entry.invalid or not entry.samples.get(i) else
                 sum(entry.samples[i]) / len(entry.samples[i]) for i in range(n)]
        if n == 1 and 0 not in entry.invalid:
            means = [0.0]
        if self.group is not None:
            means = distributed.all_reduce_max(means, self.group, f"reducing timings of {entry.state.name}")
        for i in range(n):
            reason = entry.invalid.get(i, "invalid on another rank")
            shown = f"{means[i]:.4f} ms" if math.isfinite(means[i]) else f"invalid ({reason})"
            self.session.log(f"{entry.label} candidate {i} ({entry.configs[i]}) average: {shown}")
        return means

    def keep(self, outcome: engine.Outcome) -> Any:
        entry = self.entry
        entry.pick, entry.bench_time = outcome.best, outcome.bench_time
        entry.timings = {entry.configs[i]: t for i, t in outcome.timings.items()}
        self.session.log(f"{entry.label} best config: candidate {entry.pick} ({entry.configs[entry.pick]})")
        return entry.configs[entry.pick]

    def record(self, outcome: Optional[engine.Outcome], best: Any, found: Optional[job.Found]) -> None:
        entry = self.entry
        self.session.records.append(TuningRecord(
            kernel_name=entry.state.name, key=entry.key, best_config=best, timings=dict(entry.timings),
            failures={entry.configs[i]: r for i, r in entry.invalid.items()}, bench_time=entry.bench_time,
            cache_hit=False, method="contextual", device=self.session.device, autotuner=entry.tuner))
