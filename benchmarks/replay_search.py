"""Replay the built-in searches over the large matmul space on the CPU, from the H200's measured truth.

    python benchmarks/replay_search.py

Nothing is timed here: ``evaluate`` answers each screened candidate with its screening time in
``results/search_truth_h200.json`` (``search_truth_gpu.py``), and a config that ran out of
resources or took over 20 s to compile there fails. What a replay shows is each strategy's path:
how many candidates it screens, how many of the slow compiles (each holds a step or batch until
it is given up) and out-of-resource configs it touches, and what it picks. The real searches'
seconds are in ``search_h200.json``.
"""

from __future__ import annotations

import json
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import save_results  # noqa: E402
from _search import TRUTH, large_space  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402
from triton_dist_plugin import engine  # noqa: E402
from triton_dist_plugin.search import strategy as search  # noqa: E402
from triton_dist_plugin.search import tpe as search_optuna  # noqa: E402


def main() -> None:
    truth = json.loads(TRUTH.read_text())
    quick, status = truth["quick_ms"], truth["status"]
    space = large_space()

    def name(config) -> str:  # as Triton 3.6 printed it on the H200
        return str(config).replace(", ir_override: None", "")

    best_ms = min(t for t in quick.values() if t is not None)
    results = {}
    for strategy, run in (("halving", search.halving), ("optuna", search_optuna.tpe)):
        seen: list = []

        def evaluate(subset, seen=seen):
            seen.extend(subset)
            return {c: [quick[name(c)]] * 3 if quick[name(c)] is not None else [math.inf] * 3 for c in subset}

        request = tdp.TuningRequest("matmul_kernel", tuple(truth["shape"]), "cuda")
        survivors = run(request, space, evaluate, search.Space(space), engine.Screen())
        pick = min(survivors, key=lambda c: quick[name(c)] or math.inf)
        results[strategy] = {
            "screened": len(seen),
            "slow_compiles": sum(status.get(name(c), "").startswith("compile over") for c in seen),
            "out_of_resources": sum(status.get(name(c), "").startswith("OutOfResources") for c in seen),
            "best_screened": name(pick), "best_screened_ms": quick[name(pick)],
            "survivors": len(survivors)}
        r = results[strategy]
        print(f"{strategy:8} screened {r['screened']:4}, slow compiles {r['slow_compiles']:3}, out of resources "
              f"{r['out_of_resources']:3}; best screened {r['best_screened_ms']:.4f} ms "
              f"({r['best_screened_ms'] / best_ms - 1:+.1%} of the space's best screening time)")
    save_results("search_replay_cpu.json", results)


if __name__ == "__main__":
    main()
