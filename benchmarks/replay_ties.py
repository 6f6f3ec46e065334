"""The settling tie's width, replayed on the CPU over the 14-case suite's exhaustive CUPTI times.

    python benchmarks/replay_ties.py [--trials 60] [--out tie_replay_cpu.json]

Nothing is timed here, and the noise is a model: what this shows is how the tie's width trades
flips for regret under that model, not what a GPU does. Each key of the two H100 suite runs
(``results/steady14_h100.json`` and ``steady14_h100_s51.json``) gives every config's exhaustive
CUPTI time, taken as its true time. A process sees each config at its true time times ``1 + e``,
``e`` drawn once per process and config from ``N(0, sigma)`` (what differs between processes: the
clock, where the inputs sit). Each of its runs adds ``N(0, 0.3%)`` and is read in steps of 32 ns
(CUPTI's on the H100). Its finalists are those ``engine.Screen.narrow`` would keep from a round of
25 runs each; then ``settle.settle`` itself, the package's, decides among them, with the policy's
``tie`` set to each width. Per width and ``sigma``, over ``--trials`` groups of 4 processes per key:
the flip rate (the share of pairs of processes that disagree), and the mean and worst regret
against the true times. Results: ``results/tie_replay_cpu.json``; a table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import save_results  # noqa: E402

from triton_dist_plugin import settle  # noqa: E402
from triton_dist_plugin.engine.screen import Screen  # noqa: E402
from triton_dist_plugin.policy import Policy  # noqa: E402

RUNS = ("steady14_h100.json", "steady14_h100_s51.json")
TICK_MS = 0.000032
RUN_NOISE = 0.003
WIDTHS = (0.01, 0.015, 0.02)
SIGMAS = (0.003, 0.006, 0.01)


def _round(seen: dict, configs: list, rng: random.Random, runs: int = 25) -> dict:
    """One round of ``runs`` runs of each config: ``{config: [p50, p20, p80]}``, read in CUPTI's steps."""
    out = {}
    for c in configs:
        samples = sorted(round(seen[c] * (1 + rng.gauss(0, RUN_NOISE)) / TICK_MS) * TICK_MS for _ in range(runs))
        out[c] = [statistics.median(samples), samples[len(samples) // 5], samples[(4 * len(samples)) // 5]]
    return out


def _process(truth: dict, order: list, policy: Policy, sigma: float, rng: random.Random):
    seen = {c: t * (1 + rng.gauss(0, sigma)) for c, t in truth.items()}
    screen = Screen.__new__(Screen)  # only what ``narrow`` reads: the policy and the given order
    screen.policy, screen.order = policy, {id(c): i for i, c in enumerate(order)}
    finalists = screen.narrow(_round(seen, order, rng))
    full = _round(seen, finalists, rng, runs=100)
    pick, _ = settle.settle(full, order, lambda configs: _round(seen, configs, rng), policy)
    return pick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=60, help="groups of 4 processes per key and setting")
    parser.add_argument("--out", default="tie_replay_cpu.json", help="file name under benchmarks/results/")
    options = parser.parse_args()
    keys = []
    for name in RUNS:
        exhaustive = json.load(open(os.path.join(HERE, "results", name)))["judge"]["exhaustive"]
        for key, found in exhaustive.items():
            truth = {int(i): t for i, t in found["ms"].items() if t and t == t}
            keys.append((f"{name}:{key}", truth))
    table = {}
    for width, sigma in itertools.product(WIDTHS, SIGMAS):
        policy = dataclasses.replace(Policy(), tie=width)
        rng = random.Random(f"{width}-{sigma}")
        flips, regrets = [], []
        for _, truth in keys:
            order = [type("Config", (), {"index": i})() for i in sorted(truth)]
            by = {id(c): truth[c.index] for c in order}
            best = min(truth.values())
            objects = {c: by[id(c)] for c in order}
            for _ in range(options.trials):
                picks = [_process(objects, order, policy, sigma, rng) for _ in range(4)]
                flips.append(statistics.mean(a is not b for a, b in itertools.combinations(picks, 2)))
                regrets += [objects[p] / best - 1 for p in picks]
        table[f"tie {width:.1%}, sigma {sigma:.1%}"] = {
            "tie": width, "sigma": sigma, "flip_rate": statistics.mean(flips),
            "mean_regret_pct": 100 * statistics.mean(regrets), "worst_regret_pct": 100 * max(regrets)}
    save_results(options.out, {"what": __doc__.split("\n\n")[0], "runs": RUNS, "keys": len(keys),
                               "trials": options.trials, "run_noise": RUN_NOISE, "tick_ms": TICK_MS, "table": table})
    print(f"{'setting':28s} {'flip rate':>10s} {'mean regret':>12s} {'worst':>8s}")
    for name, row in table.items():
        print(f"{name:28s} {row['flip_rate']:10.3f} {row['mean_regret_pct']:11.2f}% {row['worst_regret_pct']:7.2f}%")


if __name__ == "__main__":
    main()
