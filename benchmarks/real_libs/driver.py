"""The driver: children interleaved per rep and mode within a budget, the analysis, the results
file and the table; ``--merge`` of separate runs; the command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, save_results

from .child import child
from .ops import list_ops, select_ops
from .report import analyse, findings, table
from .runner import MODES, ChildRun, run_child

RESULTS_NAME = "real_libs_h200.json"


def driver(args: argparse.Namespace) -> None:
    ops = select_ops(args.ops)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SystemExit(f"--modes takes {', '.join(MODES)}; got {bad or 'none'}")
    work = Path(tempfile.mkdtemp(prefix="tdp-real-libs-"))
    deadline = time.perf_counter() + args.budget
    print(f"{len(ops)} ops x {args.reps} reps x {len(modes)} modes; work dir {work}; budget {args.budget:.0f}s",
          flush=True)
    runs: list = []
    skipped: list = []
    longest: dict = {}  # mode -> longest wall time of its children so far
    for rep in range(args.reps):
        for mode in modes:
            left = deadline - time.perf_counter()
            if left < longest.get(mode, 0.0) * 1.05 + 5 or left < 20:
                skipped.append(f"{mode} r{rep}")
                continue
            run = ChildRun(mode, rep)
            print(f"[{mode} r{rep}] starting ({left:.0f}s of the budget left)", flush=True)
            run_child(run, ops, work, min(args.child_timeout, left), budget_bound=left < args.child_timeout)
            longest[mode] = max(longest.get(mode, 0.0), run.wall_s)
            ok = sum(1 for r in run.data.get("ops", {}).values() if r.get("ok"))
            print(f"[{mode} r{rep}] {ok}/{len(ops)} ops ok in {run.wall_s:.1f}s"
                  f"{' - ' + run.error if run.error else ''}", flush=True)
            runs.append(run)
    if skipped:
        print(f"skipped for the budget: {', '.join(skipped)}", flush=True)
    report = analyse(runs, ops, modes)
    notes = findings(report, modes)
    children = [{"mode": r.mode, "rep": r.rep, "rc": r.rc, "wall_s": r.wall_s, "error": r.error,
                 **{k: r.data.get(k) for k in ("warm_up_s", "import_plugin_s", "import_libs_s", "plugin_active",
                                               "import_errors", "versions", "child_s", "tuning_notes")}}
                for r in runs]
    wrong_state = [f"{c['mode']} r{c['rep']}" for c in children
                   if c["plugin_active"] is not None and c["plugin_active"] != (c["mode"] != "disabled")]
    if wrong_state:
        notes.insert(0, f"plugin active/inactive not as the mode says in: {wrong_state}")
    results = {"what": WHAT, "argv": sys.argv[1:], "reps": args.reps, "modes": modes,
               "ops": [op.name for op in ops], "skipped_runs": skipped, "children": children, "findings": notes,
               "per_op": report, "env": {k: v for k, v in os.environ.items() if k.startswith(("TRITON_", "TDP_"))}}
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    publish(args.results, results)


WHAT = ("FlagGems, Liger-Kernel and fla ops: upstream autotuner (disabled) against the plugin imported before and "
        "after the libraries; fresh processes and caches per run")


def publish(name: str, results: dict) -> None:
    path = save_results(name, results)
    print(f"\nwrote {path}", flush=True)
    notes = results["findings"]
    print("\nfindings:" if notes else "\nfindings: none", flush=True)
    for line in notes:
        print(f"  - {line}", flush=True)
    print("\n" + table(results["per_op"], results["modes"]), flush=True)


def merge(names: list, out_name: str) -> None:
    """Combine results files of separate runs (e.g. one per library) into one."""
    parts = []
    for name in names:
        path = Path(name) if Path(name).exists() else ROOT / "benchmarks" / "results" / name
        parts.append((path.name, json.loads(path.read_text())))
    modes = parts[0][1]["modes"]
    if any(p["modes"] != modes for _, p in parts):
        raise SystemExit("--merge: the runs used different --modes")
    merged = {"what": WHAT, "merged_from": [n for n, _ in parts], "reps": sorted({p["reps"] for _, p in parts}),
              "modes": modes, "ops": [], "skipped_runs": [], "children": [], "findings": [], "per_op": {}, "env": {}}
    for source, part in parts:
        merged["ops"] += part["ops"]
        merged["skipped_runs"] += [f"{source}: {s}" for s in part["skipped_runs"]]
        merged["children"] += [{**c, "source": source} for c in part["children"]]
        merged["findings"] += part["findings"]
        merged["per_op"].update(part["per_op"])
        merged["env"][source] = part.get("env", {})
    publish(out_name, merged)


def main(doc: str) -> None:
    """The command line of ``bench_real_libs.py``, whose docstring ``doc`` is (its first paragraph
    describes the command in ``--help``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="core", help="comma-separated op names and groups: core (default), liger, "
                        "gems, fla, light (all but heavy), heavy, all")
    parser.add_argument("--reps", type=int, default=3, help="processes per mode (default 3)")
    parser.add_argument("--modes", default=",".join(MODES), help="default: disabled,before,after")
    parser.add_argument("--list", action="store_true", help="list the ops and exit")
    parser.add_argument("--child-timeout", type=float, default=300.0, help="seconds before a child is killed")
    parser.add_argument("--budget", type=float, default=550.0,
                        help="seconds for all children; runs that would not fit are skipped (default 550)")
    parser.add_argument("--results", default=RESULTS_NAME, help=f"file name under results/ (default {RESULTS_NAME})")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (child logs, JSON, tensors)")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="results files (names under results/, or paths) to combine into --results, then exit")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--tensors", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list:
        list_ops()
    elif args.merge:
        merge(args.merge, args.results)
    elif args.child:
        child(args)
    else:
        driver(args)

