"""Frozen mode's pick for shapes nobody tuned, replayed on the CPU over a grid measured on a GPU.

    python benchmarks/replay_tables.py [--results results/table_regret_h200.json] [--out table_replay_cpu.json]

``bench_table_regret.py`` keeps what frozen mode read of each pretuned grid entry (its key, full
measurements, pick and failed configs), the space's order, each held-out shape's key and every
config's CUPTI time there. Here each held-out key gets its neighbours as ``persist.frozen_pick``
gathers them (nearest first, at most ``predict.MOST``, picks still in the space, no config that
failed at any), then each predictor's pick, and that pick's regret from the judged times.
``frozen mode (replayed)`` is ``predict.choose`` itself, and must give what frozen mode launched in
the benchmark (``agrees``); a new predictor is added to ``PREDICTORS`` and judged on the same data,
with nothing compiled or timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import save_results  # noqa: E402

from triton_dist_plugin.store import keys, predict  # noqa: E402

PREDICTORS = {
    "frozen mode (replayed)": lambda target, neighbours, order: predict.choose(target, neighbours, order)[0],
    "nearest key": lambda target, neighbours, order: neighbours[0][2],
    "weighted, always": lambda target, neighbours, order: predict.weighted(target, neighbours, order)
    or neighbours[0][2],
}


def neighbours_of(target: tuple, entries: list, order: list) -> tuple[list, list]:
    """``(neighbours, order)`` as ``persist.frozen_pick`` gives them to ``predict.choose``."""
    parsed = sorted(((keys.parse(e["key"]), e) for e in entries), key=lambda p: (keys.distance(target, p[0]),
                                                                                 repr(p[0])))
    found, failed = [], set()
    for key, entry in parsed:
        if key is None or not math.isfinite(keys.distance(target, key)) or entry["pick"] not in order:
            continue
        found.append((key, entry["measured"], entry["pick"]))
        failed.update(entry["failed"])
        if len(found) >= predict.MOST:
            break
    return found, [c for c in order if c not in failed]


def replay(case: dict) -> dict:
    rows: dict = {name: {} for name in PREDICTORS}
    agrees = {}
    for shape, target in case["held_keys"].items():
        times = case["judged_ms"][shape]
        best = min(times.values())
        found, order = neighbours_of(tuple(target), case["grid_entries"], case["order"])
        for name, predictor in PREDICTORS.items():
            rows[name][shape] = times.get(predictor(tuple(target), found, order), math.inf) / best - 1
        agrees[shape] = PREDICTORS["frozen mode (replayed)"](tuple(target), found, order) == \
            case["picks"][shape]["predicted"]
    return {"regret": rows, "agrees": agrees}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", default=os.path.join(HERE, "results", "table_regret_h200.json"))
    parser.add_argument("--out", help="a file name under benchmarks/results/")
    options = parser.parse_args()
    with open(options.results) as fh:
        cases = json.load(fh)
    out = {}
    for name, case in cases.items():
        if "grid_entries" not in case:
            print(f"{name}: no grid entries kept (a results file older than replay_tables.py)")
            continue
        out[name] = replay(case)
    if options.out:
        save_results(options.out, out)
    print(f"{'kernel':12s} {'predictor':24s} {'geomean':>8s} {'worst':>8s}")
    for name, found in out.items():
        for predictor, by_shape in found["regret"].items():
            values = [v for v in by_shape.values() if math.isfinite(v)]
            geo = math.exp(statistics.fmean(math.log1p(v) for v in values)) - 1 if values else math.inf
            print(f"{name:12s} {predictor:24s} {geo:8.1%} {max(values, default=math.inf):8.1%}")
        print(f"{name:12s} replayed pick = frozen mode's at {sum(found['agrees'].values())} of {len(found['agrees'])}")


if __name__ == "__main__":
    main()
