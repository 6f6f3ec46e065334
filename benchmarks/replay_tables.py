"""Frozen mode's pick for shapes nobody tuned, replayed on the CPU over a grid measured on a GPU.

    python benchmarks/replay_tables.py [--results results/table_regret_h200.json] [--out table_replay_cpu.json]
    python benchmarks/replay_tables.py --leave-one-out [--out table_replay_loo_cpu.json]

``bench_table_regret.py`` keeps what frozen mode read of each pretuned grid entry (its key, full
measurements, pick and failed configs), the space's order, each held-out shape's key and every
config's CUPTI time there. Here each held-out key gets its neighbours as ``persist.frozen_pick``
gathers them (nearest first, at most ``predict.MOST``, picks still in the space, no config that
failed at any), then each predictor's pick, and that pick's regret from the judged times.
``frozen mode (replayed)`` is ``predict.choose`` itself, with each config's programs counted as
``patched/machine_fill`` counts them (from the kept ``fill_model``), and must give what frozen mode
launched in the benchmark (``agrees``); a new predictor is added to ``PREDICTORS`` and judged on the same data,
with nothing compiled or timed. ``--leave-one-out``: the fp16 matmul's shapes that have every
config timed on the H200 (``matmul_shapes``), each predicted from the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import save_results  # noqa: E402

from triton_dist_plugin.search import model  # noqa: E402
from triton_dist_plugin.store import keys, predict  # noqa: E402

PREDICTORS = {
    "frozen mode (replayed)": lambda target, neighbours, order, fill: predict.choose(target, neighbours, order,
                                                                                    fill)[0],
    "nearest key": lambda target, neighbours, order, fill: neighbours[0][2],
    "weighted, always": lambda target, neighbours, order, fill: predict.weighted(target, neighbours, order)
    or neighbours[0][2],
    "filled, always": lambda target, neighbours, order, fill: (predict.filled(target, neighbours, order, fill)
                                                               if fill else None) or neighbours[0][2],
    "frozen mode without fill": lambda target, neighbours, order, fill: predict.choose(target, neighbours,
                                                                                      order)[0],
}


def fill_of(model_of: dict | None):
    """``fill(key, config)`` as ``patched/machine_fill`` gives it, from the kept model: each config's
    programs (its blocks over the key's sizes they tile) over the cores' waves; None without one."""
    if not model_of or not model_of.get("tiles"):
        return None
    names, tiles, cores = model_of["key_names"], model_of["tiles"], model_of["cores"]

    if any(extent not in names for extent in tiles.values()):
        return None  # as frozen mode: a count that would hang on more than the key

    def fill(key, config):
        blocks = {k: int(v) for k, v in re.findall(r"(\w+): (-?\d+)", config)}
        count = 1
        for block, extent in tiles.items():
            if block not in blocks or names.index(extent) >= len(key) or type(key[names.index(extent)]) is not int:
                return None
            count *= math.ceil(key[names.index(extent)] / blocks[block])
        return model.wave_fill(count, cores, 1) if count > 0 else None

    return fill


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
    fill = fill_of(case.get("fill_model"))
    for shape, target in case["held_keys"].items():
        times = case["judged_ms"][shape]
        best = min(times.values())
        found, order = neighbours_of(tuple(target), case["grid_entries"], case["order"])
        for name, predictor in PREDICTORS.items():
            rows[name][shape] = times.get(predictor(tuple(target), found, order, fill), math.inf) / best - 1
        agrees[shape] = PREDICTORS["frozen mode (replayed)"](tuple(target), found, order, fill) == \
            case["picks"][shape]["predicted"]
    return {"regret": rows, "agrees": agrees}


def _described(config: str) -> str:
    """A matmul config's description, whichever way a results file wrote it."""
    found = dict(re.findall(r"(\w+)[:=] ?(\d+)", config))
    return ", ".join(f"{k}: {found[k]}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps",
                                                    "num_stages"))


def matmul_shapes() -> dict:
    """Every shape of the fp16 matmul (``kernels/``, 48 configs) with all its configs timed by CUPTI
    on the H200: the cost model's truths (``model_truth_gpu.py``) and the table benchmark's held-out
    shapes; ``{(M, N, K): {config: ms}}``, configs by description."""
    shapes: dict = {}
    with open(os.path.join(HERE, "results", "model_truth_h200.json")) as fh:
        for case in json.load(fh)["cases"]:
            if case["lib"] == "suite" and case["op"].startswith("matmul/"):
                shape = tuple(int(x) for x in case["op"].split("/")[1].split("x"))
                shapes[shape] = {_described(c["config"]): c["ms"] for c in case["candidates"]
                                 if c["ms"] and c["failure"] is None}
    with open(os.path.join(HERE, "results", "table_regret_h200.json")) as fh:
        for shape, times in json.load(fh)["matmul"]["judged_ms"].items():
            shapes[tuple(json.loads(shape))] = {_described(c): ms for c, ms in times.items()}
    return shapes


def leave_one_out(shapes: dict, fill_model: dict, space: list) -> dict:
    """Each shape predicted from the ``predict.MOST`` nearest others (every config measured at
    each), the configs in ``space``'s order (ties go to the first): each predictor's regret there."""
    measured = set.intersection(*(set(t) for t in shapes.values()))
    order = [c for c in space if c in measured]
    fill = fill_of(fill_model)
    rows: dict = {name: {} for name in PREDICTORS}
    for target in shapes:
        others = sorted((s for s in shapes if s != target), key=lambda s: (keys.distance(target, s), repr(s)))
        found = [(s, shapes[s], min(shapes[s], key=shapes[s].get)) for s in others[:predict.MOST]]
        best = min(shapes[target].values())
        for name in rows:
            rows[name][json.dumps(target)] = shapes[target][PREDICTORS[name](target, found, order, fill)] / best - 1
    return {"regret": rows, "agrees": {}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", default=os.path.join(HERE, "results", "table_regret_h200.json"))
    parser.add_argument("--leave-one-out", action="store_true",
                        help="the matmul's shapes with every config timed on the H200, each predicted from the others")
    parser.add_argument("--out", help="a file name under benchmarks/results/")
    options = parser.parse_args()
    if options.leave_one_out:  # the H200's 132 cores; the matmul's blocks over M and N, read as frozen mode reads them
        import triton

        from kernels import matmul
        from triton_dist_plugin.patched import machine_fill

        tuner = triton.autotune(configs=matmul.matmul_configs("cuda"), key=["M", "N", "K"])(matmul.matmul_kernel)
        space = [_described(str(c)) for c in tuner.configs]
        out = {"matmul": leave_one_out(matmul_shapes(), {"key_names": ["M", "N", "K"], "cores": 132,
                                                         "tiles": machine_fill.program_tiles(tuner)}, space)}
        if options.out:
            save_results(options.out, out)
        _print(out)
        return
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
    _print(out)


def _print(out: dict) -> None:
    print(f"{'kernel':12s} {'predictor':26s} {'geomean':>8s} {'worst':>8s} {'exact':>6s}")
    for name, found in out.items():
        for predictor, by_shape in found["regret"].items():
            values = [v for v in by_shape.values() if math.isfinite(v)]
            geo = math.exp(statistics.fmean(math.log1p(v) for v in values)) - 1 if values else math.inf
            exact = f"{sum(v == 0 for v in values)}/{len(values)}"
            print(f"{name:12s} {predictor:26s} {geo:8.1%} {max(values, default=math.inf):8.1%} {exact:>6s}")
        if found["agrees"]:
            print(f"{name:12s} replayed pick = frozen mode's at {sum(found['agrees'].values())} of "
                  f"{len(found['agrees'])}")


if __name__ == "__main__":
    main()
