"""Pick stability: do fresh processes pick the same config for the same key, upstream and with the
plugin, and what do the picks that differ cost?

    python benchmarks/bench_steady_gpu.py [--procs 4] [--kernels matmul,add,...] [--rounds 7]   (about 7 min)
    python benchmarks/bench_steady_gpu.py --tiny --procs 2 --kernels add,rowsum   # CPU smoke test
    python benchmarks/bench_steady_gpu.py --modes plugin --procs 6 --kernels add   # the plugin alone, traced

Nine kernels of ``_suite``, two shapes each (``STEADY``: matmul 4096^3 and 512x4096x4096, add 2^20 and
2^26, softmax, layernorm, rowsum, transpose, and three libraries' own kernels and configs: fla's l2norm,
Liger-Kernel's DyT and FlagGems's looped LayerNorm, at both of theirs), 18 cases, tuned by ``--procs``
processes per
mode, alternating (upstream, plugin, upstream, ...). Upstream is Triton's own autotuner (the plugin
not imported, ``TRITON_DIST_PLUGIN_DISABLE=1``), the plugin runs with its default settings; the
environment's ``TRITON_DIST_*`` and ``TRITON_BENCH_METHOD`` settings are removed in both. Every
process has an empty pick cache of its own and shares one Triton cache, warmed first so that
compiling is not what is compared: one plugin process compiles and screens every candidate of every
key (its picks are not counted), then one upstream process launches every config once (loading what
is cached, compiling anything missing). Each process reports every key's pick (a plugin process, with
the tuning's notes, every candidate's screening and its settling: the finalists' full measurement and
every settling round, by position in the given order). ``--modes plugin`` runs the plugin's processes
alone (no upstream warming either).

Then one judge process (no plugin) first times every config of each key once (10 calls each, in one
profiler session) and keeps the three fastest: the exhaustive best is among them. It then times those,
every settling's finalists and every distinct pick by CUPTI kernel time (``torch.profiler``, the kernel's
name matched; an L2 flush before each call, as both tuners time), round-robin over ``--rounds`` rounds,
the median. Per key and mode: how many distinct picks, the flip rate (the share of process pairs whose picks differ),
the worst pick's time over the best (the fastest of all those judged, %), the mean of that over the
processes (the regret), and the mean seconds of the key's tuning; then their means over the keys, and
the worst pick of all.

On an H200 the warming takes about 40 s, an upstream process about 70 s (542 configs, each by
``do_bench``), a plugin process about 16 s and the judge about 15 s. A pair of processes that would not
finish within the budget (``--budget``, 530 s for the whole run) is skipped and said so. Under
``--tiny`` (``TRITON_INTERPRET=1``) the upstream side cannot tune (upstream Triton needs a GPU driver to
time) and reports that error for every key; the judge times with the wall clock. Results go to
``results/steady_h200.json``; a table is printed last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import collect_notes, cupti_batch_ms, cupti_ms, save_results
from _procs import call_child, fresh_env, last_stderr_line, serve

RESULTS = "steady_h200.json"
# The kernels and the positions of their shapes in ``_suite`` (matmul: 4096^3 and 512x4096x4096; add:
# 2^20 and 2^26; the others: both of theirs).
STEADY = {"matmul": (0, 1), "add": (1, 2), "softmax": (0, 1), "layernorm": (0, 1), "rowsum": (0, 1),
          "transpose": (0, 1), "fla_l2norm": (0, 1), "liger_dyt": (0, 1), "gems_layernorm": (0, 1)}
CASES_ENV, WARM_ENV, JUDGE_ENV, ROUNDS_ENV = "TDP_STEADY_CASES", "TDP_STEADY_WARM", "TDP_STEADY_JUDGE", \
    "TDP_STEADY_ROUNDS"
# Settings that would change either side's defaults, or the Triton cache the processes share.
SCRUB = ("TRITON_BENCH_METHOD", "TRITON_PRINT_AUTOTUNING", "TRITON_CACHE_AUTOTUNING", "TRITON_INTERPRET",
         "TRITON_ALWAYS_COMPILE", "TRITON_CACHE_MANAGER", "TRITON_AUTOTUNE_PARALLEL_COMPILE")
KEEP = ("TRITON_DIST_AUTOTUNE_DIR", "TRITON_DIST_PLUGIN_DISABLE")
BUDGET_S = 530  # the whole run
JUDGE_RESERVE_S = 80  # kept for the judge when deciding whether another pair fits
EXHAUSTIVE_CALLS, EXHAUSTIVE_TOP = 10, 3  # the judge's pass over every config: calls each, and the fastest kept
GUESS_S = {"upstream": 110.0, "plugin": 45.0}  # a process's length before one has run


# ------------------------------------------------------------------------------------------------
# children
# ------------------------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _free() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _screen_everything() -> None:
    """For the warming process: screen every candidate of every key (so all of them compile into the
    shared cache) and let the plugin's rounds pick among them as usual."""
    import triton_dist_plugin as tdp

    class ScreenAll:
        @tdp.hookimpl(tryfirst=True)
        def tdp_search(self, request, candidates, evaluate, space, screen):
            todo, timings = list(candidates), {}
            while todo:  # the compile stream may leave hopeless candidates uncompiled: ask again
                timings.update(evaluate(todo))
                seen = {id(c) for c in timings}
                left = [c for c in todo if id(c) not in seen]
                if len(left) == len(todo):
                    break
                todo = left
            return screen.survivors(timings)

    tdp.register(ScreenAll(), name="steady-warm")


def _trace_settling(traces: list) -> None:
    """Record each tuning's settling in ``traces``: the finalists' full measurements, every settling
    round's times and the pick, as positions in the tuning's given order (``trace``)."""
    from triton_dist_plugin import settle

    inner = settle.settle

    def traced(valid, order, measure, policy):
        where = {id(c): i for i, c in enumerate(order)}
        rounds: list = []

        def timed(subset):
            found = measure(subset)
            rounds.append({where[id(c)]: found[c][0] for c in subset if c in found})
            return found

        pick, decision = inner(valid, order, timed, policy)
        traces.append({"full": {where[id(c)]: t[0] for c, t in valid.items()}, "rounds": rounds,
                       "pick": where[id(pick)], "decision": decision})
        return pick, decision

    settle.settle = traced


def _trace_screening(screens: list) -> None:
    """Record each tuning's times of every candidate it timed (``{position: ms}``, a screening
    round's for those not measured fully), as the tuning record holds them."""
    import math

    import triton_dist_plugin as tdp

    class Screens:
        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            screens.append({i: t[0] for i, t in enumerate(record.timings.values()) if math.isfinite(t[0])})

    tdp.register(Screens())


def child_tune() -> dict:
    """Tune every case named in ``TDP_STEADY_CASES`` in turn: each key's pick and first-call seconds."""
    import _suite

    plugin = "triton_dist_plugin" in sys.modules and sys.modules["triton_dist_plugin"].is_active()
    if plugin and os.environ.get(WARM_ENV) == "1":
        _screen_everything()
    notes = collect_notes() if plugin else []  # why each pick was made: which were screened, the settling
    traces: list = []
    screens: list = []
    if plugin:
        _trace_settling(traces)
        _trace_screening(screens)
    started = time.perf_counter()
    picks, errors = {}, {}
    for name in os.environ[CASES_ENV].split(","):  # each by the name asked for (in tiny mode too)
        built = None
        try:
            built = _suite.select(name)[0].build()
            _sync()
            t0 = time.perf_counter()
            built.run()
            _sync()
            seconds = time.perf_counter() - t0
            index = built.pick()
            picks[name] = {"index": index, "pick": str(built.tuner.best_config), "tune_s": seconds,
                           **({"notes": notes[:]} if notes else {}), **({"settling": traces[:]} if traces else {}),
                           **({"screened": screens[-1]} if screens else {})}
            notes.clear(), traces.clear(), screens.clear()
        except Exception as exc:
            errors[name] = _first_line(exc)
        finally:
            del built
            _free()
    return {"plugin": plugin, "picks": picks, "errors": errors, "child_s": time.perf_counter() - started}


def child_load() -> dict:
    """Launch every config of every case once on the plain kernel: loads (or compiles) each into the
    shared Triton cache. Launches that took long are compiles the cache lacked."""
    import _suite

    started = time.perf_counter()
    launched, slow, errors, first = 0, [], {}, None
    for name in os.environ[CASES_ENV].split(","):
        built = None
        try:
            built = _suite.select(name)[0].build()
            for i, config in enumerate(built.configs):
                if first is None:  # the process's first launch also starts CUDA and Triton's driver
                    t0 = time.perf_counter()
                    built.direct(config)()
                    _sync()
                    first = time.perf_counter() - t0
                t0 = time.perf_counter()
                try:
                    built.direct(config)()
                    _sync()
                except Exception as exc:  # out of resources, say: the tuners fail it too
                    errors[f"{name}#{i}"] = _first_line(exc)
                launched += 1
                if time.perf_counter() - t0 > 0.5:
                    slow.append(f"{name}#{i}")
        except Exception as exc:
            errors[name] = _first_line(exc)
        finally:
            del built
            _free()
    return {"launched": launched, "compiled_here": slow, "first_launch_s": first, "errors": errors,
            "child_s": time.perf_counter() - started}


def _wall_ms(call, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def _exhaustive(built, cuda: bool, flush) -> tuple[list, dict]:
    """Every config of a case timed once (CUPTI, ``EXHAUSTIVE_CALLS`` calls each, all in one profiler
    session; the wall clock under the interpreter): the ``EXHAUSTIVE_TOP`` fastest positions and
    each config's time (those that failed to launch left out)."""
    runnable = {}
    for i, config in enumerate(built.configs):
        try:
            call = built.direct(config)
            call()
            runnable[i] = call
        except Exception:  # out of resources: no tuner can pick it either
            continue
    _sync()
    if cuda:
        times = cupti_batch_ms(list(runnable.values()), built.kernel_name, EXHAUSTIVE_CALLS, flush)
        found = dict(zip(runnable, times))
    else:
        found = {i: _wall_ms(call, 3) for i, call in runnable.items()}
    return sorted(found, key=found.get)[:EXHAUSTIVE_TOP], found


def child_judge() -> dict:
    """Time every pick named in ``TDP_STEADY_JUDGE`` ({case: [config positions]}), and the fastest
    few of an exhaustive pass over every config, round-robin."""
    import _suite

    started = time.perf_counter()
    wanted = json.loads(os.environ[JUDGE_ENV])
    rounds = int(os.environ.get(ROUNDS_ENV, "7"))
    cuda = _suite.device() == "cuda"
    flush = None
    if cuda:
        from triton.runtime.driver import driver

        buffer = driver.active.get_empty_cache_for_benchmark()
        flush = buffer.zero_
    calls, counts, errors, exhaustive = {}, {}, {}, {}
    for name, chosen in wanted.items():
        try:
            built = _suite.select(name)[0].build()
            top, every = _exhaustive(built, cuda, flush)
            exhaustive[name] = {"top": top, "ms": every}
            chosen = sorted(set(chosen) | set(top))
            calls[name] = {i: (built.direct(built.configs[i]), built.kernel_name) for i in chosen}
            for call, _ in calls[name].values():  # load each (and the CUDA context)
                for _ in range(3):
                    call()
            _sync()
            first, _ = next(iter(calls[name].values()))
            t0 = time.perf_counter()
            for _ in range(5):
                first()
            _sync()
            each_ms = (time.perf_counter() - t0) / 5 * 1e3
            counts[name] = max(10, min(100, int(2.0 / max(each_ms, 1e-3)))) if cuda else 3
        except Exception as exc:
            errors[name] = _first_line(exc)
            calls.pop(name, None)
    times: dict = {name: {i: [] for i in picks} for name, picks in calls.items()}
    for _ in range(rounds):
        for name, picks in calls.items():
            for i, (call, kernel) in picks.items():
                try:
                    ms = cupti_ms(call, kernel, counts[name], flush) if cuda else _wall_ms(call, counts[name])
                except Exception as exc:
                    errors[f"{name}#{i}"] = _first_line(exc)
                    continue
                times[name][i].append(ms)
    _free()
    return {"method": "cupti kernel time, L2 flushed" if cuda else "wall clock (interpreter)", "rounds": rounds,
            "calls_per_round": counts, "times": times, "exhaustive": exhaustive, "errors": errors,
            "child_s": time.perf_counter() - started}


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------


def env_for(plugin: bool, work: str, shared: str, tiny: bool, extra: dict | None = None) -> dict:
    """A child's environment: the mode's defaults, the shared Triton cache, an empty pick cache of its own."""
    env = fresh_env(work, plugin, None, triton_dir=shared, plugin_dir=tempfile.mkdtemp(prefix="tdp-", dir=work))
    for name in list(env):
        if name in SCRUB or (name.startswith("TRITON_DIST_") and name not in KEEP):
            del env[name]
    if plugin:
        env.pop("TRITON_DIST_PLUGIN_DISABLE", None)
    env["PYTHONUNBUFFERED"] = "1"
    if tiny:
        env.update({"TRITON_INTERPRET": "1", "TDP_SUITE_TINY": "1"})
    env.update(extra or {})
    return env


def run(name: str, env: dict, timeout: float) -> dict:
    started = time.perf_counter()
    try:
        data, proc = call_child(__file__, name, env, timeout=max(timeout, 10.0))
        if data is None:
            data = {"error": last_stderr_line(proc)[:500],
                    "log_tail": (proc.stderr or "").strip().splitlines()[-8:]}
    except subprocess.TimeoutExpired:
        data = {"error": f"did not finish within {timeout:.0f}s"}
    data["wall_s"] = time.perf_counter() - started
    return data


def metrics(names: list, runs: dict, judged: dict) -> dict:
    """Per case and mode: distinct picks, flip rate, worst and mean pick over the best (%), the best
    being the fastest of the picks and of the exhaustive pass's few fastest, timed in the same rounds;
    and the mean seconds of the key's tuning."""
    out = {}
    for name in names:
        times = {int(i): statistics.median(v) for i, v in judged.get(name, {}).items() if v}
        picks = {mode: [r["picks"][name]["index"] for r in rs if name in r.get("picks", {})]
                 for mode, rs in runs.items()}
        if not times:
            out[name] = {"picks": picks, "error": "not judged"}
            continue
        best = min(times.values())
        row: dict = {"best_ms": best, "best_index": min(times, key=times.get), "ms": times, "picks": picks}
        for mode, chosen in picks.items():
            chosen = [i for i in chosen if i is not None]
            pairs = list(itertools.combinations(chosen, 2))
            slow = [100 * (times[i] / best - 1) for i in chosen if i in times]
            if not chosen:
                row[mode] = {"n": 0, "distinct": None, "flip_rate": None, "worst_pct": None, "mean_pct": None,
                             "tune_s": None}
                continue
            tune = [r["picks"][name]["tune_s"] for r in runs[mode] if name in r.get("picks", {})]
            row[mode] = {"n": len(chosen), "distinct": len(set(chosen)), "tune_s": statistics.mean(tune),
                         "flip_rate": sum(a != b for a, b in pairs) / len(pairs) if pairs else None,
                         "worst_pct": max(slow) if slow else None,
                         "mean_pct": statistics.mean(slow) if slow else None}
        out[name] = row
    return out


def _mean(rows: list, key: str):
    values = [v[key] for v in rows if v[key] is not None]
    return statistics.mean(values) if values else None


def summary(per_case: dict, modes: tuple) -> dict:
    """Each mode's metrics, averaged over the cases."""
    found = {}
    for mode in modes:
        rows = [r[mode] for r in per_case.values() if mode in r]
        found[mode] = {"cases": len(rows), **{k: _mean(rows, k) for k in ("distinct", "flip_rate", "worst_pct",
                                                                            "mean_pct")}, "tune_s": None,
                       "worst_of_all_pct": max((r["worst_pct"] for r in rows if r["worst_pct"] is not None),
                                               default=None)}
    return found


def table(results: dict) -> None:
    def cell(m: dict) -> str:
        f = lambda key, spec: format(m[key], spec) if m.get(key) is not None else "-"
        return (f"{f('distinct', '')!s:>4} {f('flip_rate', '.2f'):>5} {f('worst_pct', '.1f'):>7} "
                f"{f('mean_pct', '.1f'):>7} {f('tune_s', '.2f'):>6}")

    modes = ("upstream", "plugin")
    head = f"{'picks':>4} {'flips':>5} {'worst%':>7} {'mean%':>7} {'tune s':>6}"
    print(f"\n{'':28} {'':>9}   {'upstream':^32}   {'plugin':^32}")
    print(f"{'case':28} {'best ms':>9} | {head} | {head}")
    for name, row in results["per_case"].items():
        if "error" in row:
            print(f"{name:28} {row['error']}")
            continue
        print(f"{name:28} {row['best_ms']:9.4f} | " + " | ".join(cell(row.get(m, {})) for m in modes))
    means = [results["summary"].get(m, {}) for m in modes]
    print(f"{'mean over cases':28} {'':9} | " + " | ".join(
        cell({**s, "distinct": round(s["distinct"], 2) if s.get("distinct") is not None else None, "tune_s": None})
        for s in means))
    print("worst pick of all: " + "; ".join(f"{m} {s['worst_of_all_pct']:.1f}%" for m, s in zip(modes, means)
                                            if s.get("worst_of_all_pct") is not None))
    runs = {m: [r["wall_s"] for r in results["runs"][m] if "picks" in r] for m in modes}
    print("processes: " + "; ".join(f"{m} {len(t)} ({statistics.mean(t):.0f}s each, tuning "
                                    f"{results['summary'][m]['tune_s'] or 0:.0f}s)" if t else f"{m} 0"
                                    for m, t in runs.items())
          + (f"; skipped {', '.join(results['skipped'])}" if results.get("skipped") else "")
          + f"; judge: {results['judge'].get('method', results['judge'].get('error'))}"
          + f"; total {results.get('total_s', 0):.0f}s")


def main() -> None:
    if serve(globals()):
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=4, help="tuning processes per mode (default 4)")
    parser.add_argument("--kernels", default=",".join(STEADY), help=f"of {', '.join(STEADY)} (default all)")
    parser.add_argument("--rounds", type=int, default=7, help="the judge's rounds (default 7; at least 5)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for the whole run ({BUDGET_S})")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke test: TRITON_INTERPRET=1, tiny cases")
    parser.add_argument("--modes", default="upstream,plugin", help="upstream, plugin or both (default both)")
    parser.add_argument("--out", default=None, help="write the results here instead of results/" + RESULTS)
    args = parser.parse_args()
    import _suite

    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    modes = tuple(m for m in ("upstream", "plugin") if m in args.modes.split(","))
    if not modes:
        raise SystemExit("--modes: upstream, plugin or both")
    unknown = [k for k in kernels if k not in STEADY]
    if unknown:
        raise SystemExit(f"unknown kernel(s) {unknown}; kernels are {', '.join(STEADY)}")
    every = {(c.kernel, c.position): c.name for c in _suite.cases(tiny=False, libraries=True)}
    names = [every[k, p] for k in kernels for p in STEADY[k]]
    shown = [c.name for c in _suite.select(",".join(names), tiny=args.tiny)]
    started = time.perf_counter()
    elapsed = lambda: time.perf_counter() - started
    results: dict = {"what": "picks of fresh processes (empty pick caches, one warm Triton cache), judged by CUPTI",
                     "tiny": args.tiny, "cases": names, "procs": args.procs, "rounds": args.rounds,
                     "runs": {"upstream": [], "plugin": []}, "skipped": [], "warm": {}}
    work = tempfile.mkdtemp(prefix="steady-")
    shared = os.path.join(work, "triton")
    cases_env = {CASES_ENV: ",".join(names)}
    limit = lambda: args.budget - JUDGE_RESERVE_S - elapsed()
    try:
        print(f"cases: {', '.join(shown)}", flush=True)
        results["warm"]["plugin"] = run("tune", env_for(True, work, shared, args.tiny, {**cases_env, WARM_ENV: "1"}),
                                        limit())
        print(f"warm (plugin, every candidate compiled): {results['warm']['plugin']['wall_s']:.0f}s "
              f"{results['warm']['plugin'].get('error') or ''}", flush=True)
        if "upstream" in modes:
            results["warm"]["upstream"] = run("load", env_for(False, work, shared, args.tiny, cases_env), limit())
            warm_u = results["warm"]["upstream"]
            print(f"warm (upstream, every config launched): {warm_u['wall_s']:.0f}s, "
                  f"{len(warm_u.get('compiled_here', []))} compiled there {warm_u.get('error') or ''}", flush=True)
        for i in range(args.procs):
            for mode in modes:
                seen = [r["wall_s"] for r in results["runs"][mode]]
                need = max(seen) if seen else GUESS_S[mode]
                if mode == "upstream" and "plugin" in modes:  # start a pair only when both of it fit
                    other = [r["wall_s"] for r in results["runs"]["plugin"]]
                    need += max(other) if other else GUESS_S["plugin"]
                if need > limit():
                    results["skipped"].append(f"{mode} {i + 1}")
                    print(f"{mode} {i + 1}: skipped (about {need:.0f}s needed, {limit():.0f}s left)", flush=True)
                    continue
                data = run("tune", env_for(mode == "plugin", work, shared, args.tiny, cases_env), limit())
                results["runs"][mode].append(data)
                print(f"{mode} {i + 1}: {data['wall_s']:.0f}s, {len(data.get('picks', {}))} picks "
                      f"{data.get('error') or data.get('errors') or ''}", flush=True)
        wanted: dict = {}
        for rs in results["runs"].values():
            for r in rs:
                for name, p in r.get("picks", {}).items():
                    if p.get("index") is not None:
                        wanted.setdefault(name, set()).add(p["index"])
                    for trace in p.get("settling", []):  # the judge's view of every settling's finalists
                        wanted.setdefault(name, set()).update(int(i) for i in trace["full"])
        judge_env = env_for(False, work, shared, args.tiny, {
            JUDGE_ENV: json.dumps({n: sorted(v) for n, v in wanted.items()}), ROUNDS_ENV: str(max(5, args.rounds))})
        results["judge"] = run("judge", judge_env, max(60.0, args.budget + 10 - elapsed())) if wanted else \
            {"error": "no picks to judge"}
        print(f"judge: {results['judge'].get('wall_s', 0):.0f}s {results['judge'].get('error') or ''}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["per_case"] = metrics(names, results["runs"], results["judge"].get("times", {}))
    results["summary"] = summary(results["per_case"], ("upstream", "plugin"))
    for mode in ("upstream", "plugin"):
        tune = [sum(p["tune_s"] for p in r["picks"].values()) for r in results["runs"][mode] if r.get("picks")]
        results["summary"][mode]["tune_s"] = statistics.mean(tune) if tune else None
    results["total_s"] = elapsed()
    if args.out or args.tiny:
        out = Path(args.out or os.path.join(tempfile.gettempdir(), "steady_tiny.json"))
        out.write_text(json.dumps(results, indent=1, default=str))
        print(f"written to {out}")
    else:
        save_results(RESULTS, results)
    table(results)


if __name__ == "__main__":
    main()
