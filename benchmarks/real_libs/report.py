"""Per-op report from the children's results: first-call and tuning times, picks, outputs against
upstream, steady-state ratios; the findings, and the compact table."""

from __future__ import annotations

import json
from typing import Optional

from .compare import compare, median_of, verdict
from .runner import last_line


def analyse(runs: list, ops: list, modes: list) -> dict:
    import torch

    tensors: dict = {}
    for run in runs:
        if run.tensors:
            try:
                tensors[(run.mode, run.rep)] = torch.load(run.tensors, map_location="cpu")
            except Exception as exc:
                run.error = (run.error + "; " if run.error else "") + f"tensors unreadable: {last_line(exc)}"
    report: dict = {}
    for op in ops:
        rows = {(r.mode, r.rep): r.data.get("ops", {}).get(op.name) for r in runs}
        entry: dict = {"library": op.lib, "call": op.call, "shapes": op.shapes, "kernels_expected": op.kernels,
                       "backward_tuned": op.backward, "modes": {}, "kernels": {}, "outputs": {}, "errors": {}}
        for mode in modes:
            mine = [rows.get((r.mode, r.rep)) for r in runs if r.mode == mode]
            done = [x for x in mine if x and x.get("ok")]
            errs = sorted({x["error"] for x in mine if x and not x.get("ok") and x.get("error")})
            cut = [r for r in runs if r.mode == mode and r.cut and rows.get((r.mode, r.rep)) is None]
            missing = sum(1 for x in mine if x is None) - len(cut)
            if cut:  # never reached before the budget ran out: reported apart, never as a failure
                entry.setdefault("cut", {})[mode] = len(cut)
            if errs or missing:
                entry["errors"][mode] = errs + ([f"{missing} run(s) without a result"] if missing else [])
            steady = [x["steady"] for x in done if x.get("steady")]
            entry["modes"][mode] = {
                "runs_ok": len(done), "runs": len(mine),
                "first_call_s": median_of([x.get("first_call_s") for x in done]),
                "fwd_s": median_of([x.get("fwd_s") for x in done]), "bwd_s": median_of([x.get("bwd_s") for x in done]),
                "steady_ms": median_of([s.get("ms") for s in steady]),
                "steady_methods": sorted({s.get("method") for s in steady}),
                "graph_errors": sorted({s["graph_error"] for s in steady if s.get("graph_error")}),
            }
            for x in done:
                counts: dict = {}
                for rec in x.get("tuned", []):
                    counts[rec["kernel"]] = counts.get(rec["kernel"], 0) + 1
                    kname = rec["kernel"] if counts[rec["kernel"]] == 1 else f"{rec['kernel']}#{counts[rec['kernel']]}"
                    k = entry["kernels"].setdefault(kname, {"cls": rec["cls"], "n_configs": rec["n_configs"],
                                                            "pre_hook": rec["pre_hook"],
                                                            "reset_to_zero": rec["reset_to_zero"],
                                                            "restore_value": rec["restore_value"],
                                                            "own_run": rec.get("own_run"),
                                                            "own_do_bench": rec.get("own_do_bench"),
                                                            "phase": rec["phase"], "modes": {}})
                    m = k["modes"].setdefault(mode, {"seconds": [], "picks": [], "n_failed": [], "via": [],
                                                     "timings": []})
                    m["timings"].append(rec.get("timings"))
                    m["seconds"].append(rec["seconds"])
                    m["picks"].append(rec["pick"])
                    m["n_failed"].append(rec["n_failed"])
                    m["via"].append(rec["via"])
        for k in entry["kernels"].values():
            base = median_of(k["modes"].get("disabled", {}).get("seconds", []))
            for mode, m in k["modes"].items():
                m["median_s"] = median_of(m["seconds"])
                if mode != "disabled" and base and m["median_s"]:
                    m["speedup"] = base / m["median_s"]
            ref_picks = k["modes"].get("disabled", {}).get("picks", [])
            k["upstream_picks_vary"] = len(set(ref_picks)) > 1
            for mode in modes:
                if mode != "disabled" and mode in k["modes"] and ref_picks:
                    k["modes"][mode]["pick_rep0_equal"] = k["modes"][mode]["picks"][0] == ref_picks[0]
        ref = tensors.get(("disabled", 0), {}).get(op.name)
        base_steady = entry["modes"].get("disabled", {}).get("steady_ms")
        for mode in modes:
            got = tensors.get((mode, 0), {}).get(op.name)
            if mode != "disabled":
                entry["outputs"][mode] = compare(ref, got) if ref is not None and got is not None else None
                ms = entry["modes"][mode]["steady_ms"]
                entry["modes"][mode]["steady_ratio"] = ms / base_steady if ms and base_steady else None
                speedups = [k["modes"][mode].get("speedup") for k in entry["kernels"].values() if mode in k["modes"]]
                speedups = [s for s in speedups if s]
                entry["modes"][mode]["min_tuning_speedup"] = min(speedups) if speedups else None
        upstream_reps = {}
        for (mode, rep), saved in tensors.items():
            if mode == "disabled" and rep > 0 and ref is not None and op.name in saved:
                upstream_reps[rep] = compare(ref, saved[op.name])
        entry["upstream_reps"] = upstream_reps
        entry["upstream_deterministic"] = all(c["equal"] for c in upstream_reps.values()) if upstream_reps else None
        report[op.name] = entry
    return report


def findings(report: dict, modes: list) -> list:
    out = []
    for name, e in report.items():
        plugin_modes = [m for m in modes if m != "disabled"]
        failed = [m for m in plugin_modes if e["errors"].get(m)]
        if failed and "disabled" in modes and not e["errors"].get("disabled"):
            out.append(f"FAILS ONLY UNDER THE PLUGIN: {name} in {failed}: {e['errors'][failed[0]][0]}")
        elif e["errors"].get("disabled") and not failed and plugin_modes:
            out.append(f"fails only upstream (disabled): {name}: {e['errors']['disabled'][0]}")
        elif e["errors"]:
            out.append(f"fails in every mode run: {name}: {next(iter(e['errors'].values()))[0]}")
        if e.get("cut"):
            out.append(f"no result at the budget's end: {name} in {sorted(e['cut'])} (not reached, or still running "
                       "then: not counted as a failure; give it a larger --budget to tell)")
        for m in plugin_modes:
            cmp = e["outputs"].get(m)
            if cmp and not cmp["close"]:
                bad = {k: v for k, v in cmp["tensors"].items() if not isinstance(v, dict) or not v["close"]}
                out.append(f"OUTPUTS DIFFER BEYOND TOLERANCE: {name} ({m}): {json.dumps(bad, default=str)[:400]}")
            elif cmp and not cmp["equal"]:
                same_picks = all(k["modes"].get(m, {}).get("pick_rep0_equal", False) for k in e["kernels"].values())
                if same_picks and e["upstream_deterministic"] is not False:
                    out.append(f"not bitwise equal although every pick is the same: {name} ({m})")
            methods = e["modes"].get(m, {}).get("steady_methods", [])
            upstream_methods = e["modes"].get("disabled", {}).get("steady_methods")
            if methods and upstream_methods and methods != upstream_methods:
                out.append(f"steady-state method differs: {name} ({m}: {methods}, graph errors "
                           f"{e['modes'][m]['graph_errors']})")
            slow = e["modes"].get(m, {}).get("min_tuning_speedup")
            if slow is not None and slow < 0.8:
                out.append(f"tuning slower under the plugin: {name} ({m}): min speedup {slow:.2f}x")
            ratio = e["modes"].get(m, {}).get("steady_ratio")
            if ratio is not None and ratio > 1.05:
                out.append(f"steady state slower under the plugin: {name} ({m}): {ratio:.3f}x")
        if e["upstream_deterministic"] is False:
            out.append(f"upstream itself differs between runs: {name}")
        unprobed = [k for k, v in e["kernels"].items() if any("unprobed" in m["via"] for m in v["modes"].values())]
        if unprobed:
            out.append(f"tuned without passing through kernel[grid] (no timing): {name}: {unprobed}")
    return out


def fmt(value: Optional[float], spec: str, width: int) -> str:
    return f"{value:{spec}}".rjust(width) if value is not None else "-".rjust(width)


def table(report: dict, modes: list) -> str:
    plugin_modes = [m for m in modes if m != "disabled"]
    short = {"disabled": "dis", "before": "bef", "after": "aft"}
    head = (f"{'op':26s} {'eq ' + '/'.join(short[m] for m in plugin_modes):>9s} "
            + " ".join(f"{'1st ' + short[m]:>8s}" for m in modes) + " "
            + " ".join(f"{'tune ' + short[m]:>9s}" for m in plugin_modes) + " "
            + " ".join(f"{'steady ' + short[m]:>10s}" for m in plugin_modes))
    lines = [head, "-" * len(head)]
    for name, e in report.items():
        eq = "/".join("E" if e["errors"].get(m) else verdict(e["outputs"].get(m)) for m in plugin_modes)
        first = " ".join(fmt(e["modes"][m]["first_call_s"], ".2f", 8) for m in modes)
        tune = " ".join(fmt(e["modes"][m].get("min_tuning_speedup"), ".2f", 9) for m in plugin_modes)
        steady = " ".join(fmt(e["modes"][m].get("steady_ratio"), ".3f", 10) for m in plugin_modes)
        lines.append(f"{name:26s} {eq:>9s} {first} {tune} {steady}")
    lines.append("eq: = bitwise, ~ within tolerance, X beyond, E error, - missing. 1st: first call (fwd+bwd) "
                 "s, median over reps. tune: slowest kernel's tuning speedup, upstream/plugin. steady: "
                 "plugin/upstream time of the tuned op.")
    return "\n".join(lines)
