"""Upstream Triton's own autotuner unit tests, without and with this plugin: which outcomes differ.

The tests are upstream's, never part of this repository: take them from the release that is
installed (``python -c "import triton; print(triton.__version__)"``), e.g. from a checkout of
triton-lang/triton at tag ``v3.9.0``::

    mkdir -p /tmp/upstream
    git -C triton show v3.9.0:python/test/unit/runtime/test_autotuner.py > /tmp/upstream/test_autotuner.py
    git -C triton show v3.9.0:python/test/unit/language/test_decorator.py > /tmp/upstream/test_decorator.py
    git -C triton show v3.9.0:python/test/conftest.py > /tmp/upstream/conftest.py  # optional

    python benchmarks/run_upstream_tests.py --tests /tmp/upstream --out upstream_tests.json

(without a tag, the release branch, e.g. ``origin/release/3.9.x``). Without a ``conftest.py``
in ``--tests``, a small one gives the fixtures these files use (``device``, ``fresh_knobs``,
``fresh_triton_cache``). Of ``test_decorator.py`` only the tests that use ``triton.autotune``
run.

Four runs, each a fresh pytest process, under ``TRITON_INTERPRET=1`` with ``--device cpu`` (the
default), or on the GPU with ``--device cuda``:
upstream only (``TRITON_DIST_PLUGIN_DISABLE=1``, the plugin never imported) and with the plugin
(imported by a ``-p`` module before any test is collected), each twice. Every run gets a fresh
``TRITON_CACHE_DIR``, and all share one ``HOME`` (a temporary directory): a second run with
the plugin that differs from its first shows state kept outside Triton's cache. Tests that
need a GPU fail or skip alike on both sides; only the differences matter. Everything the runs
write (tests, helper modules, caches) lives in a temporary directory.

Prints the outcome counts of each run and, per run, the tests whose outcome differs between
upstream only and with the plugin; writes it all as JSON to ``--out``. Exit status 1 when any
outcome differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _procs import scrubbed_env

FILES = ("test_autotuner.py", "test_decorator.py")
UPSTREAM, PLUGIN = "upstream", "plugin"
OUTCOMES_ENV = "TDP_UPSTREAM_OUTCOMES"

# Loaded by ``-p`` in every run: keeps only the autotune tests of test_decorator.py, and writes
# each test's outcome (and whether the plugin was loaded) as JSON.
REPORTER = textwrap.dedent('''
    import inspect, json, os, sys

    outcomes = {}


    def pytest_collection_modifyitems(session, config, items):
        def wanted(item):
            if not item.nodeid.startswith("test_decorator.py::"):
                return True
            try:
                return "autotune" in inspect.getsource(item.function)
            except (OSError, TypeError):
                return True

        kept = [item for item in items if wanted(item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


    def pytest_runtest_logreport(report):
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            outcome = {"passed": "xpassed" if xfail else "passed", "failed": "failed",
                       "skipped": "xfailed" if xfail else "skipped"}[report.outcome]
        elif report.failed:
            outcome = "error"
        elif report.skipped and report.when == "setup":
            outcome = "xfailed" if xfail else "skipped"
        else:
            return
        crash = getattr(report.longrepr, "reprcrash", None)  # the exception line, where there is one
        if crash is not None:
            message = crash.message
        elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
            message = str(report.longrepr[-1])
        else:
            message = (report.longreprtext.strip().splitlines() or [""])[-1] if not report.passed else ""
        if report.nodeid not in outcomes or outcome == "error":
            outcomes[report.nodeid] = {"outcome": outcome, "message": message.strip()[:300]}


    def pytest_sessionfinish(session, exitstatus):
        plugin = sys.modules.get("triton_dist_plugin")
        state = {"imported": plugin is not None, "active": bool(plugin and plugin.is_active())}
        if plugin is not None:
            state["file"] = plugin.__file__
            state["plugins"] = sorted(n for n, _ in plugin.plugin_manager().list_name_plugin())
        with open(os.environ["TDP_UPSTREAM_OUTCOMES"], "w") as f:
            json.dump({"outcomes": outcomes, "plugin": state}, f, indent=1)
''')

# Loaded by ``-p`` in the runs with the plugin: imported before any test module is.
ACTIVATE = textwrap.dedent('''
    import triton_dist_plugin

    assert triton_dist_plugin.is_active(), "triton_dist_plugin did not activate"
''')

# The fixtures the two files use, where ``--tests`` brings no conftest.py of upstream's.
CONFTEST = textwrap.dedent('''
    import tempfile

    import pytest


    def pytest_addoption(parser):
        parser.addoption("--device", action="store", default="cuda")


    @pytest.fixture
    def device(request):
        return request.config.getoption("--device")


    @pytest.fixture
    def fresh_triton_cache():
        from triton import knobs

        with tempfile.TemporaryDirectory() as tmpdir, knobs.cache.scope(), knobs.runtime.scope():
            knobs.cache.dir = tmpdir
            yield tmpdir


    @pytest.fixture
    def fresh_knobs():
        from triton._internal_testing import _fresh_knobs_impl

        fresh, reset = _fresh_knobs_impl(skipped_attr={"build", "nvidia", "amd"})
        try:
            yield fresh()
        finally:
            reset()
''')


def child_env(base: dict, home: Path, cache: Path, helpers: Path, outcomes: Path, side: str,
              device: str = "cpu") -> dict:
    """The caller's environment without any setting of this plugin or of Triton's caches, so
    both sides start from the defaults; then the run's own HOME, cache and helper modules."""
    dropped = ("TRITON_DIST_", "TDP_", "TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR",
               "TRITON_OVERRIDE_DIR", "TRITON_ALWAYS_COMPILE", "PYTEST_ADDOPTS", "TRITON_INTERPRET")
    env = scrubbed_env(prefixes=dropped, base=base)
    env.update(HOME=str(home), TRITON_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(helpers), base.get("PYTHONPATH")])))
    env[OUTCOMES_ENV] = str(outcomes)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    if side == UPSTREAM:
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"  # inert even if something imported it
    return env


def run_once(python: str, work: Path, side: str, index: int, home: Path, timeout: float, device: str = "cpu") -> dict:
    cache = work / f"triton-cache-{side}-{index}"
    outcomes = work / f"outcomes-{side}-{index}.json"
    cmd = [python, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "-p", "tdp_upstream_report",
           *(["-p", "tdp_upstream_activate"] if side == PLUGIN else []),
           "-c", str(work / "tests" / "pytest.ini"), "--rootdir", str(work / "tests"), "-o", f"timeout={int(timeout)}",
           "--device", device, *FILES]
    env = child_env(dict(os.environ), home, cache, work / "helpers", outcomes, side, device)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work / "tests", env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if not outcomes.exists():
        raise SystemExit(f"{side} run {index} reported nothing (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    data = json.loads(outcomes.read_text())
    expected = {UPSTREAM: False, PLUGIN: True}[side]
    if data["plugin"]["active"] is not expected or (side == UPSTREAM and data["plugin"]["imported"]):
        raise SystemExit(f"{side} run {index}: the plugin was {data['plugin']}, expected active={expected}")
    return {"side": side, "run": index, "returncode": proc.returncode, "seconds": round(seconds, 1),
            "counts": dict(Counter(o["outcome"] for o in data["outcomes"].values())),
            "plugin": data["plugin"], "outcomes": data["outcomes"], "summary": proc.stdout.strip().splitlines()[-1:]}


def differences(upstream: dict, plugin: dict) -> list[dict]:
    missing = {"outcome": "not run", "message": ""}
    rows = []
    for test in sorted(upstream.keys() | plugin.keys()):
        a, b = upstream.get(test, missing), plugin.get(test, missing)
        if a["outcome"] != b["outcome"]:
            rows.append({"test": test, UPSTREAM: a["outcome"], PLUGIN: b["outcome"],
                         "upstream_message": a["message"], "plugin_message": b["message"]})
    return rows


def prepare(tests: Path, work: Path) -> dict:
    """The two files (and upstream's conftest.py, if given) copied into ``work``; their digests."""
    (work / "tests").mkdir()
    (work / "helpers").mkdir()
    digests = {}
    for name in (*FILES, "conftest.py"):
        source = tests / name
        if not source.is_file():
            if name == "conftest.py":
                (work / "tests" / name).write_text(CONFTEST)
                continue
            raise SystemExit(f"{source} is missing: see this script's docstring for how to get it")
        shutil.copyfile(source, work / "tests" / name)
        digests[name] = hashlib.sha256(source.read_bytes()).hexdigest()
    (work / "tests" / "pytest.ini").write_text("[pytest]\n")
    (work / "helpers" / "tdp_upstream_report.py").write_text(REPORTER)
    (work / "helpers" / "tdp_upstream_activate.py").write_text(ACTIVATE)
    return digests


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, required=True, help="directory holding " + " and ".join(FILES))
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    parser.add_argument("--runs", type=int, default=2, help="runs per side (default 2)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test (pytest-timeout)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with triton, torch, pytest, the plugin")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cpu: Triton's interpreter (default); cuda: the GPU")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (printed)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tdp-upstream-tests-"))
    try:
        digests = prepare(args.tests.resolve(), work)
        home = work / "home"
        home.mkdir()
        interpret = {"TRITON_INTERPRET": "1"} if args.device == "cpu" else {}
        version = subprocess.run([args.python, "-c", "import triton; print(triton.__version__)"], capture_output=True,
                                 text=True, env={**os.environ, **interpret}).stdout.strip()
        print(f"triton {version}; tests from {args.tests}", flush=True)
        runs = []
        for index in range(1, args.runs + 1):
            for side in (UPSTREAM, PLUGIN):
                run = run_once(args.python, work, side, index, home, args.timeout, args.device)
                runs.append(run)
                counts = ", ".join(f"{n} {k}" for k, n in sorted(run["counts"].items()))
                print(f"{side:8} run {index}: {counts} ({run['seconds']}s)", flush=True)
        by = {(r["side"], r["run"]): r["outcomes"] for r in runs}
        diffs = {str(i): differences(by[UPSTREAM, i], by[PLUGIN, i]) for i in range(1, args.runs + 1)}
        for index, rows in diffs.items():
            print(f"\nrun {index}: {len(rows)} test(s) differ between upstream only and with the plugin")
            if rows:
                width = max(len(r["test"]) for r in rows)
                print(f"  {'test':{width}}  {UPSTREAM:8}  {PLUGIN:8}  message")
                for r in rows:
                    print(f"  {r['test']:{width}}  {r[UPSTREAM]:8}  {r[PLUGIN]:8}  "
                          f"{(r['plugin_message'] or r['upstream_message'] or ' ').splitlines()[0][:100]}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"triton": version, "device": args.device, "python": args.python,
                                        "tests": str(args.tests),
                                        "files": digests, "runs": runs, "differences": diffs}, indent=1))
        print(f"\nwritten: {args.out}")
        return 1 if any(diffs.values()) else 0
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
