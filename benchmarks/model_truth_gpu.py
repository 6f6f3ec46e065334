"""The ground truth a cost model is judged against: every candidate of every kernel below timed, beside
what the model saw and predicted for it.

    python benchmarks/model_truth_gpu.py                          # suite, liger, gems, fla (about 4 min)
    python benchmarks/model_truth_gpu.py --groups suite,gems      # some groups
    python benchmarks/model_truth_gpu.py --groups suite --cases add,rowsum/1024x65536
    python benchmarks/model_truth_gpu.py --groups large           # the 1,152-config matmul at 4096^3, alone
    python benchmarks/model_truth_gpu.py --tiny                   # CPU smoke test: TRITON_INTERPRET=1, tiny suite

Groups: ``suite`` (every case of ``_suite`` but ``matmul_large``: 15 cases, 50 s on an H200), the real
libraries' ops whose kernels have 8 or more configs (``liger``, ``gems``, ``fla``: ``LIB_OPS``, built as
``bench_real_libs.py`` builds them, forward and backward), and ``large`` (``matmul_large``), not in the
default: its configs that spill compile for tens of seconds each (``search_truth_gpu.py`` kills them at
20 s and holds that space's truth), so it is screened in steps of 64, each step giving up its stragglers
(``TRITON_DIST_AUTOTUNE_COMPILE_STRAGGLER``); it may still not finish within its limit (``--limit``), and
then the candidates screened so far are kept, the case marked ``complete: false``.

Each group runs in one fresh child process with empty Triton, plugin and FlagGems caches, the plugin
imported first, ``TRITON_BENCH_METHOD=profiler`` (CUPTI kernel time),
``TRITON_DIST_AUTOTUNE_SEARCH_WHOLE=100000`` and ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1`` (no pick read
from disk). There a plugin answers ``tdp_search`` first: it records the kernel, the key,
``request.problem`` (what the built-in model saw) and ``request.ranking`` (its predicted costs), screens
every candidate (calling ``evaluate`` again for any the compile stream left uncompiled as hopeless) and
returns them all, so every candidate also runs the 25-run second round and the best two (up to four
when close) are measured fully. Its ``tdp_reduce_timings`` (answering nothing) sees each round's times,
and its ``tdp_on_tuned`` the record's. A failing op or case is reported and skipped.

``results/model_truth_h200.json``: ``{"cases": [...], "groups": {...}}``, each case ``{lib, op, kernel,
key, problem, ranking, searched, tuning_s, check, notes, candidates: [{config, features, ms, failure,
measured, screen_ms, round_ms}]}``: ``ms`` is the record's time (the 25-run round's CUPTI median, or the
full measurement for the finalists, ``measured``; a kernel given its own ``warmup=``/``rep=``, such as
FlagGems' ``LibTuner`` ones, has its finalists timed by that ``do_bench``), ``round_ms`` the 25-run
round's for every candidate alike, ``screen_ms`` the 5-run screening's; null where the candidate failed
(``failure``). A table is printed last: each case's candidates, failures, best time, and where the model
ranked the best (1: its favourite).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from _common import save_results
from _procs import call_child, fresh_env, last_stderr_line, serve

RESULTS = "model_truth_h200.json"
GROUPS = ("suite", "large", "liger", "gems", "fla")
DEFAULT_GROUPS = ("suite", "liger", "gems", "fla")
LIB_OPS = {  # the ops of real_libs whose tuned kernels have 8 or more configs (and are not heavy)
    "liger": ("liger_swiglu_mlp", "liger_dyt", "liger_mm_int8int2"),
    "gems": ("gems_mm", "gems_addmm", "gems_bmm", "gems_layer_norm", "gems_scaled_mm_fp8_block"),
    "fla": ("fla_l2norm", "fla_rms_norm", "fla_token_shift", "fla_causal_conv1d", "fla_conv1d_update"),
}
LIMIT_S = {"suite": 300, "large": 500, "liger": 150, "gems": 180, "fla": 180}  # each child, at most
BUDGET_S = 510  # the whole run: a child is given only what is left of it
# Settings that would give a child a cache, a space or a timing other than the ones asked for.
CLEARED_ENV = ("TRITON_DIST_PLUGIN_DISABLE", "FLAGGEMS_DB_URL", "USE_FLAGTUNE", "TRITON_PRINT_AUTOTUNING",
               "TRITON_CACHE_AUTOTUNING", "FLA_CONFIG_DIR", "FLA_GPU_NAME", "TRITON_INTERPRET",
               "TRITON_DIST_AUTOTUNE_SEARCH", "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "TRITON_DIST_AUTOTUNE_MODEL",
               "TRITON_DIST_AUTOTUNE_PERSIST", "TRITON_DIST_AUTOTUNE_FROZEN", "TRITON_DIST_AUTOTUNE_MANIFEST")
PARTIAL_ENV = "TDP_TRUTH_PARTIAL"  # where a child keeps what it has so far (read back if it is killed)
CASES_ENV = "TDP_TRUTH_CASES"
CHUNK_ENV = "TDP_TRUTH_CHUNK"  # screen in steps of this many candidates (the large space: 64)


# ------------------------------------------------------------------------------------------------
# the child
# ------------------------------------------------------------------------------------------------


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _p50(timing) -> float | None:
    try:
        value = float(timing[0] if isinstance(timing, (list, tuple)) else timing)
    except (TypeError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def make_recorder(lib: str, partial: str | None):
    """The child's plugin (made here, once the plugin is imported)."""
    import triton_dist_plugin as tdp

    class Recorder:
        """Screens every candidate, lets all of them through, and keeps every round's times."""

        def __init__(self, lib: str, partial: str | None):
            self.lib, self.partial = lib, partial
            self.current = None  # the op or suite case running now
            self.cases: list = []
            self.open: dict = {}  # (kernel, repr(key)) -> the case being tuned
            self.phase: list = []  # (entry, what the next reduce is) while a key's rounds run

        def _entry(self, request, candidates) -> dict:
            from triton_dist_plugin.search.space import features_of

            problem = getattr(request, "problem", None)
            try:
                problem = problem.as_json() if problem is not None else None
            except Exception as exc:
                problem = {"error": _first_line(exc)}
            rows = []
            for c in candidates:
                try:
                    features = _jsonable(features_of(c))
                except Exception:
                    features = {}
                rows.append({"config": str(c), "features": features, "ms": None, "failure": None, "measured": False,
                             "screen_ms": None, "round_ms": None})
            ranking = getattr(request, "ranking", None)
            return {"lib": self.lib, "op": self.current, "kernel": request.kernel_name, "key": repr(request.key),
                    "problem": _jsonable(problem), "ranking": _jsonable(list(ranking)) if ranking is not None else None,
                    "searched": True, "tuning_s": None, "check": None, "notes": [], "evaluate_calls": 0,
                    "candidates": rows, "_ids": {id(c): i for i, c in enumerate(candidates)}}

        @tdp.hookimpl(tryfirst=True)
        def tdp_search(self, request, candidates, evaluate, space, screen):
            entry = self._entry(request, candidates)
            self.open[request.kernel_name, repr(request.key)] = entry
            self.phase = [entry, "screen"]
            chunk = int(os.environ.get(CHUNK_ENV) or 0) or len(candidates)
            seen: set = set()
            for start in range(0, len(candidates), chunk):  # a step of its own each: stragglers given up
                todo = list(candidates[start:start + chunk])
                while todo:  # the stream may leave hopeless candidates uncompiled: ask for them again
                    entry["evaluate_calls"] += 1
                    seen |= {id(c) for c in evaluate(todo)}
                    left = [c for c in todo if id(c) not in seen]
                    if len(left) == len(todo):
                        break
                    todo = left
                if chunk < len(candidates):
                    self.save(entry)  # a child cut short still leaves the screening so far
            self.phase = [entry, "round"]
            return list(candidates)

        @tdp.hookimpl(tryfirst=True)
        def tdp_reduce_timings(self, request, timings, group):
            if self.phase:
                entry, what = self.phase
                ids = entry["_ids"]
                for config, timing in timings.items():
                    i = ids.get(id(config))
                    if i is not None and what in ("screen", "round"):
                        entry["candidates"][i][f"{what}_ms"] = _p50(timing)
                if what == "round":
                    self.phase = [entry, "final"]
            return None  # no opinion: the built-in reduces

        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            if record.cache_hit:
                return
            entry = self.open.pop((record.kernel_name, repr(record.key)), None)
            configs = list(record.timings)
            if entry is None:  # tuned without a search (fewer than 4 configs, its own timer): all measured
                if len(configs) < 2:
                    return
                entry = self._entry(type("Request", (), {"kernel_name": record.kernel_name, "key": record.key})(),
                                    configs)
                entry["searched"] = False
            self.phase = []
            ids, rows = entry.pop("_ids"), entry["candidates"]
            by_str = {row["config"]: i for i, row in enumerate(rows)}
            measured = {id(c) for c in record.measured}
            for config in configs:
                i = ids.get(id(config), by_str.get(str(config)))
                if i is None:
                    continue
                rows[i]["ms"] = _p50(record.timings[config])
                rows[i]["measured"] = id(config) in measured
            for config, reason in record.failures.items():
                i = ids.get(id(config), by_str.get(str(config)))
                if i is not None:
                    rows[i]["failure"] = str(reason)[:500]
            for row in rows:
                if row["ms"] is None and row["failure"] is None:
                    row["failure"] = "not timed"
            entry["tuning_s"] = record.bench_time
            entry["complete"] = True
            entry["pick"] = str(record.best_config)
            entry["notes"] = [str(n)[:400] for n in record.notes]
            self.cases.append(entry)
            self.save()

        def save(self, running: dict | None = None) -> None:
            """Keep the finished cases (and the one being screened, marked incomplete) in the partial file."""
            if self.partial:
                cases = self.cases
                if running is not None:
                    cases = cases + [{**{k: v for k, v in running.items() if k != "_ids"}, "complete": False}]
                Path(self.partial).write_text(json.dumps({"cases": cases}, default=str))

    return Recorder(lib, partial)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _run_suite(rec, names: str, errors: dict) -> None:
    import _suite

    for case in _suite.select(names):
        rec.current = case.name
        first = len(rec.cases)
        built = None
        try:
            built = case.build()
            built.run()
            _sync()
            try:
                built.check()
                check = "ok"
            except AssertionError as exc:
                check = _first_line(exc)
            for entry in rec.cases[first:]:
                entry["check"] = check
            print(f"  {case.name}: {len(rec.cases) - first} tuning(s), check {check}", flush=True)
        except Exception as exc:
            errors[case.name] = _first_line(exc)
            print(f"  {case.name}: FAILED {errors[case.name]}", flush=True)
        finally:
            del built
            _free()
        rec.save()


def _run_libs(rec, lib: str, errors: dict) -> None:
    import importlib

    import torch
    from real_libs.cases import GEN
    from real_libs.ops import OPS_BY_NAME

    for name in LIB_OPS[lib]:
        op = OPS_BY_NAME[name]
        rec.current = name
        first = len(rec.cases)
        case = result = None
        try:
            for module in op.modules:
                importlib.import_module(module)
            seed = zlib.crc32(name.encode())
            torch.manual_seed(seed)
            GEN["cuda"] = torch.Generator(device="cuda").manual_seed(seed)
            case = op.build(torch)
            result = case.fwd()
            if case.bwd is not None:
                case.bwd(result)
            _sync()
            print(f"  {name}: {len(rec.cases) - first} tuning(s)", flush=True)
        except Exception as exc:
            errors[name] = _first_line(exc)
            print(f"  {name}: FAILED {errors[name]}", flush=True)
            try:
                _sync()
            except Exception as sync_exc:  # a sticky CUDA error: the ops after it fail too
                errors[name] += f" (then {_first_line(sync_exc)})"
        finally:
            del case, result
            _free()
        rec.save()


def _free() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _child(group: str) -> dict:
    started = time.perf_counter()
    import torch
    import triton

    import triton_dist_plugin as tdp

    if not tdp.is_active():
        raise RuntimeError("the plugin is not active in this child")
    rec = make_recorder("suite" if group in ("suite", "large") else group, os.environ.get(PARTIAL_ENV))
    tdp.register(rec, name="model-truth")
    errors: dict = {}
    if group in ("suite", "large"):
        _run_suite(rec, os.environ.get(CASES_ENV, ""), errors)
    else:
        _run_libs(rec, group, errors)
    versions = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (interpreter)"}
    return {"cases": rec.cases, "errors": errors, "versions": versions, "child_s": time.perf_counter() - started}


def child_suite() -> dict:
    return _child("suite")


def child_large() -> dict:
    return _child("large")


def child_liger() -> dict:
    return _child("liger")


def child_gems() -> dict:
    return _child("gems")


def child_fla() -> dict:
    return _child("fla")


# ------------------------------------------------------------------------------------------------
# the parent
# ------------------------------------------------------------------------------------------------


def suite_cases(spec: str | None, group: str, tiny: bool) -> str:
    """The suite cases a group runs, as names (``_suite.select`` reads them)."""
    import _suite

    if group == "large":
        return "matmul_large"
    every = [c.name for c in _suite.cases(tiny=False) if c.kernel != "matmul_large"]
    if not spec:
        return ",".join(every)
    return ",".join(c.name for c in _suite.select(spec, tiny=False) if c.kernel != "matmul_large")


def run_group(group: str, args, left_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"truth-{group}-", ignore_cleanup_errors=True) as base:
        partial = os.path.join(base, "partial.json")
        extra = {"TRITON_BENCH_METHOD": "profiler", "TRITON_DIST_AUTOTUNE_SEARCH_WHOLE": "100000",
                 "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "GEMS_VENDOR": "nvidia", "FLA_CACHE_MODE": "disabled",
                 "FLAGGEMS_CACHE_DIR": os.path.join(base, "flaggems"), "PYTHONUNBUFFERED": "1",
                 PARTIAL_ENV: partial}
        if group in ("suite", "large"):
            extra[CASES_ENV] = suite_cases(args.cases, group, args.tiny)
        if group == "large":
            extra[CHUNK_ENV] = "2" if args.tiny else "64"
        if args.tiny:
            extra.update({"TRITON_INTERPRET": "1", "TDP_SUITE_TINY": "1"})
        env = fresh_env(base, True)
        for name in CLEARED_ENV:
            env.pop(name, None)
        env.update(extra)
        timeout = max(10.0, min(args.limit or LIMIT_S[group], left_s))
        started = time.perf_counter()
        try:
            data, proc = call_child(__file__, group, env, timeout=timeout)
            if data is None:
                data = {"error": last_stderr_line(proc)[:500]}
            if proc.returncode != 0 or "error" in data:
                tail = (proc.stdout or "").strip().splitlines()[-5:] + (proc.stderr or "").strip().splitlines()[-8:]
                data["log_tail"] = tail
        except subprocess.TimeoutExpired:
            data = {"error": f"did not finish within {timeout:.0f}s (the cases done so far are kept)"}
        if "cases" not in data and os.path.exists(partial):
            data["cases"] = json.loads(Path(partial).read_text()).get("cases", [])
        data["wall_s"] = time.perf_counter() - started
        return data


def table(results: dict) -> None:
    print(f"\n{'lib':6} {'case':34} {'kernel':34} {'n':>5} {'fail':>5} {'best ms':>10}  model's rank of the best")
    for case in results["cases"]:
        rows = case["candidates"]
        # a case cut short holds its screening only
        times = [next((r[k] for k in ("ms", "round_ms", "screen_ms") if r[k] is not None), None) for r in rows]
        timed = [(t, i) for i, t in enumerate(times) if t is not None]
        rank = "-"
        ranking = case.get("ranking")
        if ranking and timed:
            best = min(timed)[1]
            rank = f"{1 + sum(1 for v in ranking if v is not None and v < ranking[best])} of {len(rows)}"
        failed = sum(1 for r in rows if r["failure"] and r["ms"] is None)
        best_text = f"{min(timed)[0]:10.4f}" if timed else f"{'-':>10}"
        cut = "" if case.get("complete", True) else f"  (cut short: {len(timed)} screened)"
        print(f"{case['lib'][:6]:6} {str(case['op'])[:34]:34} {case['kernel'][:34]:34} {len(rows):5d} {failed:5d} "
              f"{best_text}  {rank}{cut}")
    for group, info in results["groups"].items():
        problems = {k: v for k, v in info.items() if k in ("error", "errors") and v}
        print(f"{group}: {info.get('n_cases', 0)} cases in {info.get('wall_s', 0):.0f}s"
              + (f"; {json.dumps(problems)[:400]}" if problems else ""))


def main() -> None:
    if serve(globals()):
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default=",".join(DEFAULT_GROUPS),
                        help=f"comma-separated, of {', '.join(GROUPS)} (default: {','.join(DEFAULT_GROUPS)})")
    parser.add_argument("--cases", default=None, help="suite kernels or cases (add, rowsum/1024x65536); default all")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke test: TRITON_INTERPRET=1, interpreter-sized "
                        "suite cases; library groups are skipped")
    parser.add_argument("--limit", type=float, default=None, help="seconds each child gets at most (default: "
                        + ", ".join(f"{g} {s}" for g, s in LIMIT_S.items()) + ")")
    parser.add_argument("--out", default=None, help="write the results here instead of results/" + RESULTS)
    args = parser.parse_args()
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise SystemExit(f"unknown group(s) {unknown}; groups are {', '.join(GROUPS)}")
    if args.tiny:
        skipped = [g for g in groups if g not in ("suite", "large")]
        if skipped:
            print(f"--tiny: skipping {skipped} (the libraries' kernels need a CUDA GPU)")
        groups = [g for g in groups if g in ("suite", "large")]
    started = time.perf_counter()
    results: dict = {"what": "every candidate timed (CUPTI), with the cost model's problem and ranking",
                     "tiny": args.tiny, "cases": [], "groups": {}}

    def save() -> None:
        if args.out or args.tiny:
            out = Path(args.out or os.path.join(tempfile.gettempdir(), "model_truth_tiny.json"))
            out.write_text(json.dumps(results, indent=1, default=str))
            return
        save_results(RESULTS, results)

    for group in groups:
        left = BUDGET_S - (time.perf_counter() - started)
        if left < 20:
            results["groups"][group] = {"error": "skipped: the run's time budget is spent"}
            continue
        print(f"{group} ...", flush=True)
        data = run_group(group, args, left)
        cases = data.pop("cases", [])
        results["cases"] += cases
        results["groups"][group] = {**data, "n_cases": len(cases)}
        print(f"{group}: {len(cases)} cases in {data['wall_s']:.0f}s"
              + (f", errors {data.get('errors')}" if data.get("errors") else "")
              + (f", {data['error']}" if data.get("error") else ""), flush=True)
        save()
    results["total_s"] = time.perf_counter() - started
    save()
    table(results)
    if args.out or args.tiny:
        print(f"written to {args.out or os.path.join(tempfile.gettempdir(), 'model_truth_tiny.json')}")


if __name__ == "__main__":
    main()
