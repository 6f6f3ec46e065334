"""Do fresh processes pick the same config? The plugin's rounds after the screening (``Screen.survivors``,
the second round and ``Screen.narrow``, the full measurement, ``settle.settle``) replayed on the CPU over
every exhaustive CUPTI truth measured on a GPU, under a noise model fitted to the settling rounds a GPU ran.

    python benchmarks/replay_picks.py [--trials 40] [--variants default,before] [--out picks_replay_cpu.json]

Nothing is timed here, and the noise is a model: this shows how the rules trade flips for regret under it, not
what a GPU does. Truths: the judge's pass over every config of each suite run (``steady14_h100.json``,
``steady14_h100_s51.json``, ``steady14_h200_s52.json``, ``steady_diag_s53.json``) and every case of
``model_truth_h200.json``. A process sees each config at its true time times ``1 + e``, ``e`` drawn once per
process and config from ``N(0, sys)`` (what differs between processes: where the inputs sit). A screening,
taken as the candidate compiles, comes out 8% slow one time in 20 (the device idling at a low clock between
compiles; ``slow_screenings`` counts it in ``steady_diag_s53.json``); each round shifts each config by
``N(0, 0.1%)`` (the clock drifting between rounds); each run adds ``N(0, run)`` and is read in CUPTI's 32 ns steps.
Rounds are merged as the package merges them (each quantile the median over the rounds); the second round and
the full measurement run the package's counts (the full one as the profiler runs a short kernel: about
``full_ms``, at most ``profiled_runs_most``). ``run`` 0.5% and 1.5%, ``sys`` 0 and 0.3% span what the settling
rounds of ``steady_diag_s53.json`` showed on an H100: a round of 25 runs off by 0.07-0.6%, processes differing
by little more than those rounds explain. Every candidate is screened (the search's own choice of candidates
is ``replay_flips.py``'s subject). Per variant (``VARIANTS``: ``before`` is the release before the settling
rounds ran about 5 ms and a screening taken as it compiled was taken again) and noise: the flip rate (the
share of pairs of 4 processes whose picks differ), the mean and worst regret against the truth, and the mean
settling rounds. Results: ``results/picks_replay_cpu.json``; a table last.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import save_results  # noqa: E402

from triton_dist_plugin import settle  # noqa: E402
from triton_dist_plugin.engine.rounds import per_round  # noqa: E402
from triton_dist_plugin.engine.screen import Screen  # noqa: E402
from triton_dist_plugin.policy import Policy  # noqa: E402

SUITE_RUNS = ("steady14_h100.json", "steady14_h100_s51.json", "steady14_h200_s52.json", "steady_diag_s53.json")
MODEL_TRUTH = "model_truth_h200.json"
TICK_MS, DRIFT = 0.000032, 0.001
#: A screening is taken as each candidate compiles, the device idling at a low clock in between: on an
#: H100 (``steady_diag_s53.json``) about one screening in 20 came out some 8% slow.
SLOW_SCREEN = (0.05, 0.08)
NOISE = {"run 0.5%, sys 0": (0.005, 0.0), "run 1.5%, sys 0": (0.015, 0.0), "run 0.5%, sys 0.3%": (0.005, 0.003),
         "run 1.5%, sys 0.3%": (0.015, 0.003)}
#: What is replayed: a name -> the policy's fields it changes, and ``again``: whether those screened as
#: they compiled are screened again (``engine.steps.Steps.again``). ``before``: the release before both
#: (its tie 1.5%).
VARIANTS = {"default": {}, "runs25": {"settle_runs_most": 25}, "once": {"again": False},
            "before": {"settle_runs_most": 25, "again": False, "tie": 0.015}, "tie1": {"tie": 0.01},
            "tie075": {"tie": 0.0075}, "tie125": {"tie": 0.0125}, "tie15": {"tie": 0.015},
            "tie2": {"tie": 0.02, "tie_most": 0.025}, "rounds10": {"settle_rounds": 10}}


def slow_screenings(name: str = "steady_diag_s53.json") -> dict:
    """How far each screening of a run's plugin processes lies from the median of that config's
    screenings over its processes (those measured fully excluded: their entry holds the full
    measurement): the share over 2% and over 8% slower, and over 8% faster. The model's
    ``SLOW_SCREEN`` is fitted to these."""
    run = json.load(open(os.path.join(HERE, "results", name)))
    off = []
    for case in run["cases"]:
        per: dict = {}
        for process in run["runs"]["plugin"]:
            found = process["picks"].get(case, {})
            full = {k for t in found.get("settling", []) for k in t["full"]}
            for k, ms in found.get("screened", {}).items():
                if k not in full:
                    per.setdefault(k, []).append(ms)
        off += [ms / statistics.median(v) - 1 for v in per.values() if len(v) >= 3 for ms in v]
    return {"run": name, "screenings": len(off), "over_2pct_slow": sum(x > 0.02 for x in off) / len(off),
            "over_8pct_slow": sum(x > 0.08 for x in off) / len(off),
            "over_8pct_fast": sum(x < -0.08 for x in off) / len(off)}


def truths() -> list:
    """``(name, {position: ms})`` of every exhaustively timed case with at least two configs that ran."""
    found = []
    for name in SUITE_RUNS:
        for key, case in json.load(open(os.path.join(HERE, "results", name)))["judge"]["exhaustive"].items():
            found.append((f"{name}:{key}", {int(i): t for i, t in case["ms"].items() if t and math.isfinite(t)}))
    for case in json.load(open(os.path.join(HERE, "results", MODEL_TRUTH)))["cases"]:
        ms = {i: r["ms"] for i, r in enumerate(case["candidates"]) if r.get("ms") and math.isfinite(r["ms"])}
        found.append((f"{MODEL_TRUTH}:{case['kernel']} {case['key']}", ms))
    return [(n, t) for n, t in found if len(t) >= 2]


class Process:
    """One simulated process's view of a case: its own offsets, and rounds of noisy runs."""

    def __init__(self, truth: dict, run: float, sys_: float, rng: random.Random):
        self.rng, self.run = rng, run
        self.seen = {c: t * (1 + rng.gauss(0, sys_)) for c, t in truth.items()}

    def round(self, configs: list, runs: int, slow: tuple = (0.0, 0.0)) -> dict:
        """``{config: [p50, p20, p80]}`` of ``runs`` runs each (each round, with the chance ``slow[0]``,
        ``slow[1]`` slower)."""
        out = {}
        for c in configs:
            at = self.seen[c] * (1 + self.rng.gauss(0, DRIFT)) * (1 + slow[1] * (self.rng.random() < slow[0]))
            samples = sorted(max(1, round(at * (1 + self.rng.gauss(0, self.run)) / TICK_MS)) * TICK_MS
                             for _ in range(runs))
            out[c] = [statistics.median(samples), samples[len(samples) // 5], samples[(4 * len(samples)) // 5]]
        return out

    def rounds(self, configs: list, runs: int, count: int) -> dict:
        """``count`` rounds of ``runs`` runs each, merged as ``engine.rounds.rounds`` merges them: each
        quantile the median over the rounds."""
        per = [self.round(configs, runs) for _ in range(count)]
        return {c: [statistics.median(r[c][q] for r in per) for q in range(3)] for c in configs}


def pick(truth: dict, order: list, policy: Policy, proc: Process, again: bool) -> tuple:
    """The process's pick and its settling rounds, through the package's own screen and settle."""
    screen = Screen(policy=policy, order={id(c): i for i, c in enumerate(order)})
    early = proc.round(order, policy.screen_repeat, SLOW_SCREEN)
    if again:  # screened once more once the step is in (``engine.steps.Steps.again``): the faster of the two
        again = proc.round(order, policy.screen_repeat)
        early = {c: min(early[c], again[c]) for c in order}
    finalists = screen.survivors(early)
    timed = dict(early)
    if len(finalists) > policy.final_count:
        second = proc.rounds(finalists, per_round(policy.second_repeat, policy.second_rounds), policy.second_rounds)
        timed.update(second)
        finalists = screen.narrow(second) or finalists
    # The full measurement as a short kernel's runs by the profiler: about full_ms each, at most
    # profiled_runs_most, in full_rounds interleaved rounds (``engine.loop._Run.measure``).
    _, runs = screen.full_runs(timed, finalists)
    runs = min(runs or policy.profiled_runs_most, policy.profiled_runs_most)
    full = proc.rounds(finalists, per_round(runs, policy.full_rounds), policy.full_rounds)
    runs = settle.round_runs(policy, min(t[0] for t in full.values()))
    best, decision = settle.settle(full, order, lambda cs: proc.round(cs, runs), policy)
    return best, (decision or {}).get("rounds", 0)


def replay(cases: list, policy: Policy, again: bool, run: float, sys_: float, trials: int, seed: str) -> dict:
    rng = random.Random(seed)
    flips, regrets, rounds = [], [], []
    for _, truth in cases:
        order = [type("Config", (), {"index": i})() for i in sorted(truth)]
        objects = {c: truth[c.index] for c in order}
        best = min(objects.values())
        for _ in range(trials):
            got = [pick(objects, order, policy, Process(objects, run, sys_, rng), again) for _ in range(4)]
            flips.append(statistics.mean(a[0] is not b[0] for a, b in itertools.combinations(got, 2)))
            regrets += [objects[p] / best - 1 for p, _ in got]
            rounds += [n for _, n in got]
    return {"flip_rate": statistics.mean(flips), "mean_regret_pct": 100 * statistics.mean(regrets),
            "worst_regret_pct": 100 * max(regrets), "mean_rounds": statistics.mean(rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40, help="groups of 4 processes per case and setting")
    parser.add_argument("--variants", default="default,before,once,runs25",
                        help=f"of {', '.join(VARIANTS)} (default: default,before,once,runs25)")
    parser.add_argument("--out", default="picks_replay_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    cases = truths()
    slow = slow_screenings()
    print(f"screenings off the median of their processes ({slow['run']}, {slow['screenings']}): "
          f"{slow['over_2pct_slow']:.1%} over 2% slower, {slow['over_8pct_slow']:.1%} over 8% slower, "
          f"{slow['over_8pct_fast']:.1%} over 8% faster", flush=True)
    table = {}
    for variant in options.variants.split(","):
        changes = dict(VARIANTS[variant])
        again = changes.pop("again", True)
        policy = dataclasses.replace(Policy(), **changes)
        for noise, (run, sys_) in NOISE.items():
            table[f"{variant}; {noise}"] = {"variant": variant, "changes": VARIANTS[variant], "run": run, "sys": sys_,
                                            **replay(cases, policy, again, run, sys_, options.trials, f"{noise}")}
            row = table[f"{variant}; {noise}"]
            print(f"{variant:10s} {noise:20s} flips {row['flip_rate']:.3f} mean {row['mean_regret_pct']:.2f}% "
                  f"worst {row['worst_regret_pct']:.2f}% rounds {row['mean_rounds']:.1f}", flush=True)
    save_results(options.out, {"what": __doc__.split("\n\n")[0], "slow_screenings": slow,
                               "truths": [n for n, _ in cases],
                               "trials": options.trials, "drift": DRIFT, "tick_ms": TICK_MS, "table": table})
    print(f"\n{'variant; noise':36s} {'flips':>6s} {'mean regret':>12s} {'worst':>8s} {'rounds':>7s}")
    for name, row in table.items():
        print(f"{name:36s} {row['flip_rate']:6.3f} {row['mean_regret_pct']:11.2f}% {row['worst_regret_pct']:7.2f}% "
              f"{row['mean_rounds']:7.1f}")


if __name__ == "__main__":
    main()
