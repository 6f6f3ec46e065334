"""How much a tuning measures: every number that steers screening, the search, streaming and
settling, in one frozen object, and the named presets ``TRITON_DIST_AUTOTUNE_EFFORT`` chooses from.

One object, so that a reader finds every such number here with why it has its value, and so that
every phase of one tuning reads the same ones (``engine.run_candidates`` resolves the policy once
and hands it on). Ranks tuning together agree on the preset before any timing, as on any other
setting that would take them down different paths.

``default`` is what the plugin has always done. ``quick`` screens fewer candidates for fewer runs
and settles a tie in fewer rounds: a first call several times shorter, a pick a little more
exposed to noise. ``full`` screens more, runs each longer and settles in more rounds: for a table
tuned once ahead of time (``triton-dist-tune pretune``), where the first call's length matters
least.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from . import settings

EFFORT_ENV = "TRITON_DIST_AUTOTUNE_EFFORT"


@dataclass(frozen=True)
class Policy:
    name: str = "default"

    # -- Screening (``engine.Screen``): a cheap first round, and only those near the best go on.
    screen_warmup: int = 1
    screen_repeat: int = 5
    margin: float = 0.15  # keep candidates within 15% of the best first-round time...
    keep_at_least: int = 3  # ...but never fewer than this many
    fraction: float = 0.1  # ...nor more than this share of them (or keep_at_least)
    min_candidates: int = 4  # fewer than this: measure them all fully, no screening
    second_repeat: int = 25  # with more survivors than ``final_count``, a second, longer round...
    second_rounds: int = 2  # ...in this many interleaved rounds (forwards, then backwards) where timers allow...
    final_count: int = 2  # ...leaves this many for the full measurement...
    final_most: int = 4  # ...or up to this many, those within ``tie`` of the last of them
    # Candidates a round cannot tell from its best (within these, or the best's own spread) are
    # ranked by the given order, not by the round's noise, so that processes and ranks keep the
    # same ones; a screening keeps up to ``tied_most`` of them for the longer round to separate.
    screen_tie: float = 0.03
    second_tie: float = 0.02
    tied_most: int = 12
    noise_spreads: float = 2.6  # a round's noise: this many typical spreads over the root of its runs
    # With settling to follow, each finalist runs about ``full_ms`` worth of calls (not the
    # benchmarker's 25 + 100 ms), after the device is kept busy for ``warm_ms`` (it idled through
    # the compiles at a low clock), in ``full_rounds`` interleaved rounds (a clock that drifts
    # under load then weighs on all alike).
    full_ms: float = 25.0
    warm_ms: float = 25.0
    full_rounds: int = 4
    full_runs_least: int = 10
    full_runs_most: int = 1000
    # Where the method is the default on CUDA, a key whose fastest finalist screened under this
    # (ms) has its later rounds timed by the profiler: events add a few microseconds of launch gap
    # to each call, and its jitter is as large as what separates short kernels' configs.
    profile_below: float = 0.1
    profiled_runs_most: int = 200  # ...and its full measurement runs at most this many (each after an L2 flush)

    # -- Settling (``settle.py``): finalists too close to call are measured again, interleaved.
    # Finalists within 1% of the fastest are too close to call. With rounds of ~5 ms, a wider tie
    # buys few fewer flips for worse picks: replayed over the 86 exhaustive GPU truths
    # (results/picks_replay_ties_cpu.json), 1.5% gave flips 0.03-0.13 and worst picks 1.6-3.0% off,
    # 1% 0.04-0.14 and 1.1-2.2%, 0.75% 0.06-0.17; GPU suites of short rounds flipped alike at both...
    tie: float = 0.01
    noise_cap: float = 0.05  # ...or within their own spread, up to 5%, are measured again...
    tie_most: float = 0.02  # ...and a tie after those rounds is never wider than this, whatever their noise
    settle_rounds: int = 6  # interleaved rounds to separate them...
    settle_rounds_least: int = 3  # ...or this many, once no more could change the pick
    unknown_noise: float = 0.02  # the noise assumed of a timer that gives no spread
    settle_warmup: int = 3  # each settling round runs each finalist this many times untimed, then
    #   about ``settle_ms`` of it timed (``second_repeat`` to ``settle_runs_most`` runs: a short kernel's
    #   runs scatter by a percent or two, which a round's median of 25 does not average away); under the
    #   wall clock (the interpreter), ``wall_settle`` (warm-up, timed)
    settle_ms: float = 5.0
    settle_runs_most: int = 100
    wall_settle: tuple = (1, 3)

    # -- Streaming (``compiling/stream.py``): screening each candidate as it compiles.
    hopeless: float = 1.3  # every screened neighbour at least this much slower than the best: not compiled
    evidence: float = 0.5  # ...and only once this share of the step has arrived

    # -- The search (``search/halving.py``, ``search/tpe.py``).
    whole: int = 128  # spaces up to this many are screened whole (``TRITON_DIST_AUTOTUNE_SEARCH_WHOLE``)
    batch: int = 32  # candidates readied per step: two waves of compiles on 16 cores, the same on every rank
    sample: int = 96  # a cold search over a large space starts from this many candidates...
    leaders: int = 4  # ...and expands the neighbours of its best this many
    warm_first: int = 8  # a warm start screens this many of the prior's best first, and its pick's neighbours
    warm_distance: float = math.log(16)  # ...only from a key whose numbers are within 16x of this one's, in all
    gain: float = 0.01  # optuna: a batch that improves the best by less than this counts as no gain
    patience: int = 3  # optuna: stops after this many batches without a gain...
    optuna_cap: int = 8 * 32  # ...or, without a budget, after this many candidates

    # -- The cost model's first step (``search/guided.py``).
    keep: float = 0.25  # the first step compiles at most this share of a space...
    keep_min: int = 6  # ...but at least this many...
    keep_max: int = 16  # ...and at most this many of a large one (with the probes, about one round of compiles on
    #   16 cores; the climb adds the neighbours of its best)
    band: float = 0.5  # ...and fewer where only some are predicted within 1.5x of the best
    rho_min: float = 0.3  # rank correlation of predicted and screened times below which the model is ignored
    guided_leaders: int = 2  # the climb expands the neighbours of this many of the best screened
    climb_band: float = 2.0  # the climb skips neighbours predicted over 3x slower than the best measured
    probes: int = 4  # candidates from across the rest of the ranking, screened to judge the model

    def __post_init__(self) -> None:
        # A preset, or one a user builds with ``replace``, that would stall or skip a phase is refused here.
        for name, values in asdict(self).items():
            for value in values if isinstance(values, tuple) else () if name == "name" else (values,):
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or \
                        not math.isfinite(value):
                    raise ValueError(f"Policy.{name}={values!r}: expected finite numbers >= 0")
        for name in ("screen_repeat", "second_repeat", "keep_at_least", "final_count", "final_most", "settle_rounds",
                     "settle_rounds_least", "full_rounds", "batch", "leaders", "guided_leaders", "keep_min",
                     "patience", "full_runs_least", "second_rounds", "profiled_runs_most", "settle_runs_most"):
            if getattr(self, name) < 1 or not isinstance(getattr(self, name), int):
                raise ValueError(f"Policy.{name}={getattr(self, name)!r}: expected a whole number >= 1")
        if self.settle_rounds_least > self.settle_rounds or self.final_count > self.final_most or \
                self.keep_min > self.keep_max or self.full_runs_least > self.full_runs_most or \
                self.second_repeat > self.settle_runs_most:
            raise ValueError(f"Policy {self.name!r}: a least above its most")


PRESETS = {
    "quick": Policy(
        name="quick", screen_repeat=3, margin=0.10, keep_at_least=2, fraction=0.05, second_repeat=12,
        final_most=3, tied_most=6, full_ms=10.0, warm_ms=10.0, full_rounds=2, settle_rounds=3,
        settle_rounds_least=2, settle_ms=2.0, settle_runs_most=50, hopeless=1.2, sample=48, leaders=2,
        warm_first=4, patience=2, optuna_cap=4 * 32, keep=0.15, keep_min=4, keep_max=12, probes=3,
    ),
    "default": Policy(),
    "full": Policy(
        name="full", screen_repeat=8, margin=0.30, keep_at_least=5, fraction=0.2, second_repeat=50,
        final_count=3, final_most=6, tied_most=16, full_ms=100.0, warm_ms=50.0, full_rounds=6, settle_rounds=10,
        settle_rounds_least=5, settle_ms=20.0, settle_runs_most=200, hopeless=1.6, whole=256, sample=192,
        leaders=6, warm_first=16, patience=5, optuna_cap=16 * 32, keep=0.5, keep_min=12, keep_max=128,
        guided_leaders=3, climb_band=3.0, probes=8,
    ),
}


def current() -> Policy:
    """The preset ``TRITON_DIST_AUTOTUNE_EFFORT`` names now (``default`` unset)."""
    return PRESETS[settings.value(EFFORT_ENV)]


__all__ = ["EFFORT_ENV", "PRESETS", "Policy", "current", "replace"]
