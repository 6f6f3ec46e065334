"""How well does the cost model guide the search: replayed on the CPU over exhaustive truths measured on an H200.

    python benchmarks/replay_model.py [--truth results/model_truth_h200.json] [--out model_replay_cpu.json]

Each case of ``model_truth_gpu.py``'s results (a kernel and key, every candidate's CUPTI time, and the
problem the built-in model saw there), and the 1,152-config matmul space of ``search_truth_gpu.py`` with
the 48-config space inside it, is replayed: the model ranks the candidates from the recorded problem,
``halving`` runs its guided first step with ``evaluate`` answered from the measured times (a candidate
with no time failed), and nothing is compiled or timed here. Per case it reports how many candidates
were compiled, whether the exhaustive best was among them (the **recall**; also within 1% of it, since
a 25-run time has noise of about that much), the regret of the best compiled, and whether the model was
trusted. Cases with fewer than 8 candidates are left out (the engine measures those fully anyway).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import ROOT, save_results  # noqa: E402
from _search import TRUTH as LARGE_TRUTH  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402
from triton_dist_plugin import engine  # noqa: E402
from triton_dist_plugin.search import model  # noqa: E402
from triton_dist_plugin.search import strategy as search  # noqa: E402

MIN_CANDIDATES = 8
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
H200 = {"cores": 132, "onchip": 232448}


def as_config(features: dict):
    import triton

    kwargs = {k: v for k, v in features.items() if k not in OPTIONS and k != "ir_override"}
    options = {k: features[k] for k in OPTIONS if features.get(k) is not None}
    return triton.Config(kwargs, **options)


def large_cases() -> list:
    """The 1,152-config space at 4096^3 (screening times, ``search_truth_gpu.py``) and the 48 inside it."""
    truth = json.loads(LARGE_TRUTH.read_text())
    m, n, k = truth["shape"]
    problem = {"tiles": {"BLOCK_M": ["program", m, 2], "BLOCK_N": ["program", n, 2], "BLOCK_K": ["loop", k, 1]},
               "dot": True, "elem": 2, **H200, "warps": True, "defaults": {"num_warps": 4, "num_stages": 3}}
    rows = []
    for bm, bn, bk, g, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128), (1, 8),
                                                 (2, 4, 8), (2, 3, 4, 5)):
        features = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g, "num_warps": w, "num_stages": s}
        name = (f"BLOCK_M: {bm}, BLOCK_N: {bn}, BLOCK_K: {bk}, GROUP_M: {g}, num_warps: {w}, num_ctas: 1, "
                f"num_stages: {s}, maxnreg: None")
        rows.append({"features": features, "ms": truth["quick_ms"].get(name)})
    small = [r for r in rows if r["features"]["GROUP_M"] == 8 and r["features"]["BLOCK_M"] in (64, 128)
             and r["features"]["BLOCK_N"] >= 64 and r["features"]["BLOCK_K"] <= 64
             and r["features"]["num_warps"] >= 4 and r["features"]["num_stages"] in (3, 4)]
    case = {"lib": "suite", "key": "4096^3", "problem": problem}
    return [{**case, "kernel": "matmul (1,152 configs)", "candidates": rows},
            {**case, "kernel": "matmul (48 configs)", "candidates": small}]


def replay(case: dict) -> dict:
    rows = [r for r in case["candidates"] if isinstance(r.get("features"), dict)]
    configs = [as_config(r["features"]) for r in rows]
    ms = {id(c): (r["ms"] if r.get("ms") is not None and math.isfinite(r["ms"]) else None)
          for c, r in zip(configs, rows)}
    compiled: list = []

    def evaluate(subset):
        compiled.extend(subset)
        return {c: [ms[id(c)]] * 3 if ms[id(c)] is not None else [math.inf] * 3 for c in subset}

    request = tdp.TuningRequest(case["kernel"], (case["key"],), "cuda")
    problem = model.Problem(**case["problem"]) if case.get("problem") else None
    request.found.ranking = model.rank(problem, configs) if problem is not None else None
    finalists = search.halving(request, configs, evaluate, search.Space(configs), engine.Screen())
    valid = [c for c in configs if ms[id(c)] is not None]
    best = min(ms[id(c)] for c in valid)
    seen = {id(c) for c in compiled}
    got = min((ms[id(c)] for c in compiled if ms[id(c)] is not None), default=math.inf)
    near = {id(c) for c in valid if ms[id(c)] <= best * 1.01}
    return {"lib": case.get("lib"), "kernel": case["kernel"], "key": case["key"], "candidates": len(configs),
            "compiled": len(seen), "share": round(len(seen) / len(configs), 3),
            "recall": any(id(c) in seen and ms[id(c)] == best for c in valid),
            "recall_1pct": bool(seen & near), "regret": round(got / best - 1, 4),
            "model": request.found.model, "finalists": len(finalists)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", default=str(ROOT / "benchmarks" / "results" / "model_truth_h200.json"))
    parser.add_argument("--out", default="model_replay_cpu.json")
    args = parser.parse_args()
    cases = large_cases()
    if os.path.exists(args.truth):
        loaded = json.loads(open(args.truth).read())
        cases += loaded["cases"] if isinstance(loaded, dict) else loaded
    results = []
    for case in cases:
        rows = [r for r in case.get("candidates", []) if r.get("ms") is not None and math.isfinite(r["ms"])]
        if len(case.get("candidates", [])) < MIN_CANDIDATES or not rows:
            continue
        results.append(replay(case))
    guided = [r for r in results if r["model"] is not None]
    summary = {
        "cases": len(results), "guided": len(guided),
        "recall": round(sum(r["recall"] for r in results) / len(results), 3),
        "recall_1pct": round(sum(r["recall_1pct"] for r in results) / len(results), 3),
        "compiled_share": round(sum(r["share"] for r in results) / len(results), 3),
        "worst_regret": max(r["regret"] for r in results),
    }
    save_results(args.out, {"summary": summary, "cases": results})
    print(f"{'case':58} {'n':>5} {'compiled':>8} {'recall':>6} {'1%':>3} {'regret':>7}  model")
    for r in results:
        m = r["model"]
        told = "-" if m is None else f"kept {m['kept']} rho {m['rho']} {'trusted' if m['trusted'] else 'ignored'}"
        print(f"{(r['kernel'] + ' ' + str(r['key']))[:58]:58} {r['candidates']:5} {r['share']:8.0%} "
              f"{'yes' if r['recall'] else 'no':>6} {'y' if r['recall_1pct'] else 'n':>3} {r['regret']:+7.2%}  {told}")
    print(summary)


if __name__ == "__main__":
    main()
