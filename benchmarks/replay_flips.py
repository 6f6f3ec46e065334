"""Where do fresh processes' picks part: in which candidates they screen, or in how they time the
same ones? Replayed on the CPU over the cost model's exhaustive truths measured on an H200.

    python benchmarks/replay_flips.py [--sigma 0.005] [--procs 4] [--trials 10] [--out flips_replay_cpu.json]

Nothing is compiled or timed here, and the noise is a model. Each case of
``results/model_truth_h200.json`` (a kernel and key, every candidate's CUPTI time, the problem the
built-in model saw), and the 48-config matmul space of ``replay_model.py``, is tuned by ``--procs``
simulated processes, ``--trials`` times: the package's own ``halving`` search (the cost model's
ranking, its trust check, the climb, or the whole space) with ``evaluate`` answered from the true
times, each process seeing each candidate off its true time by a draw of ``N(0, sigma)`` (what
differs between processes: where the inputs sit, the clock) and each round adding ``N(0, 0.3%)``.
A process's pick is the settling rule's: the first in the given order of those it screened within
``Policy.tie`` of the fastest it saw. Per case: the flip rate (the share of process pairs whose
picks differ), the share of pairs that screened different sets, the flip rate among the pairs that
screened the same set, and the candidates compiled. Results: ``results/flips_replay_cpu.json``; a
table is printed last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import replay_model  # noqa: E402
from _common import ROOT, save_results  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402
from triton_dist_plugin import engine  # noqa: E402
from triton_dist_plugin.policy import Policy  # noqa: E402
from triton_dist_plugin.search import model  # noqa: E402
from triton_dist_plugin.search import strategy as search  # noqa: E402

ROUND_NOISE, SPREAD = 0.003, 0.02  # a round's own noise; the spread (p80 - p20) a screening reports


def process(case: dict, sigma: float, rng: random.Random) -> tuple:
    """One simulated process: ``(pick's position, its true time, the positions screened)``."""
    rows = [r for r in case["candidates"] if isinstance(r.get("features"), dict)]
    configs = [replay_model.as_config(r["features"]) for r in rows]
    true = [r["ms"] if r.get("ms") is not None and math.isfinite(r["ms"]) else None for r in rows]
    seen = [None if t is None else t * (1 + rng.gauss(0, sigma)) for t in true]
    where = {id(c): i for i, c in enumerate(configs)}
    screened: set = set()

    def evaluate(subset):
        out = {}
        for c in subset:
            i = where[id(c)]
            screened.add(i)
            t = math.inf if seen[i] is None else seen[i] * (1 + rng.gauss(0, ROUND_NOISE))
            out[c] = [t, t * (1 - SPREAD / 2), t * (1 + SPREAD / 2)]
        return out

    request = tdp.TuningRequest(case["kernel"], (case["key"],), "cuda")
    problem = model.Problem(**case["problem"]) if case.get("problem") else None
    request.found.ranking = model.rank(problem, configs) if problem is not None else None
    search.halving(request, configs, evaluate, search.Space(configs), engine.Screen())
    timed = [i for i in sorted(screened) if seen[i] is not None]
    fastest = min(seen[i] for i in timed)
    pick = next(i for i in timed if seen[i] <= fastest * (1 + Policy().tie))
    return pick, true[pick], frozenset(screened)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigma", type=float, default=0.005, help="each process's offset per candidate (0.005)")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", default="flips_replay_cpu.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    truth = json.loads((ROOT / "benchmarks" / "results" / "model_truth_h200.json").read_text())
    cases = replay_model.large_cases()[1:] + truth["cases"]  # the 48-config space, then the truths
    rng = random.Random(f"{args.sigma}-{args.procs}")
    rows = []
    for case in cases:
        timed = [r for r in case.get("candidates", []) if r.get("ms") is not None and math.isfinite(r["ms"])]
        if len(case.get("candidates", [])) < replay_model.MIN_CANDIDATES or not timed:
            continue
        best = min(r["ms"] for r in timed)
        flips, apart, same_flips, compiled, regret = [], [], [], [], []
        for _ in range(args.trials):
            runs = [process(case, args.sigma, rng) for _ in range(args.procs)]
            for a, b in itertools.combinations(runs, 2):
                flips.append(a[0] != b[0])
                apart.append(a[2] != b[2])
                if a[2] == b[2]:
                    same_flips.append(a[0] != b[0])
            compiled += [len(r[2]) for r in runs]
            regret += [r[1] / best - 1 for r in runs]
        rows.append({"case": f"{case['kernel']} {case['key']}", "candidates": len(case["candidates"]),
                     "flip_rate": statistics.mean(flips), "sets_differ": statistics.mean(apart),
                     "flip_rate_same_set": statistics.mean(same_flips) if same_flips else None,
                     "compiled": statistics.mean(compiled), "mean_regret": statistics.mean(regret),
                     "worst_regret": max(regret)})
    same = [r["flip_rate_same_set"] for r in rows if r["flip_rate_same_set"] is not None]
    summary = {"sigma": args.sigma, "procs": args.procs, "trials": args.trials, "cases": len(rows),
               "flip_rate": statistics.mean(r["flip_rate"] for r in rows),
               "sets_differ": statistics.mean(r["sets_differ"] for r in rows),
               "flip_rate_same_set": statistics.mean(same) if same else None,
               "mean_regret": statistics.mean(r["mean_regret"] for r in rows)}
    save_results(args.out, {"what": __doc__.split("\n\n")[0], "summary": summary, "cases": rows})
    print(f"{'case':60} {'n':>4} {'flips':>6} {'sets differ':>11} {'flips, same set':>15} {'compiled':>8}")
    for r in rows:
        same_set = "-" if r["flip_rate_same_set"] is None else f"{r['flip_rate_same_set']:.2f}"
        print(f"{r['case'][:60]:60} {r['candidates']:4} {r['flip_rate']:6.2f} {r['sets_differ']:11.2f} "
              f"{same_set:>15} {r['compiled']:8.1f}")
    print(summary)


if __name__ == "__main__":
    main()
