"""The driver's side of a child: its environment (empty caches of its own, settings that would
change a default scrubbed) and its run, killed with its compile workers at the timeout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from _common import ROOT
from _procs import scrubbed_env

MODES = ("disabled", "before", "after")
# Environment that would make a child use a cache, a config space or a timing other than the defaults.
CLEARED_ENV = ("TRITON_DIST_PLUGIN_DISABLE", "FLAGGEMS_DB_URL", "USE_FLAGTUNE", "TRITON_PRINT_AUTOTUNING",
               "TRITON_CACHE_AUTOTUNING", "FLA_CONFIG_DIR", "FLA_GPU_NAME", "TRITON_INTERPRET")

# The script a child runs: this package's entry, with --child.
ENTRY = ROOT / "benchmarks" / "bench_real_libs.py"


def last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip().splitlines()[-1][:500] if lines else repr(exc)


@dataclass
class ChildRun:
    mode: str
    rep: int
    data: dict = field(default_factory=dict)
    rc: Optional[int] = None
    wall_s: float = 0.0
    error: str = ""
    tensors: Optional[Path] = None
    cut: bool = False  # killed at the run's budget, not at the child's own timeout: what it never reached is no failure


def child_env(mode: str, scratch: Path) -> dict:
    env = scrubbed_env(CLEARED_ENV)
    for name in ("TRITON_CACHE_DIR", "TRITON_DIST_AUTOTUNE_DIR", "FLAGGEMS_CACHE_DIR"):
        path = scratch / name.lower()
        path.mkdir(parents=True)
        env[name] = str(path)
    env.update(GEMS_VENDOR="nvidia", FLA_CACHE_MODE="disabled", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    if mode == "disabled":
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"
    return env


def run_child(run: ChildRun, ops: list, work: Path, timeout: float, budget_bound: bool = False) -> None:
    """Run one child; ``budget_bound``: ``timeout`` is what is left of the budget, not the child's own."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{run.mode}-r{run.rep}-", dir=work))
    out = work / f"{run.mode}-r{run.rep}.json"
    keep = run.rep == 0 or run.mode == "disabled"  # disabled's other reps show upstream's own variation
    run.tensors = work / f"{run.mode}-r{run.rep}.pt" if keep else None
    log = work / f"{run.mode}-r{run.rep}.log"
    cmd = [sys.executable, str(ENTRY), "--child", run.mode, "--rep", str(run.rep), "--out",
           str(out), "--ops", ",".join(op.name for op in ops)]
    if run.tensors:
        cmd += ["--tensors", str(run.tensors)]
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(run.mode, scratch), stderr=err, start_new_session=True)
        try:
            run.rc = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and the compile workers it forked
            proc.wait()
            run.error = f"killed after {timeout:.0f}s" + (" (the budget's end)" if budget_bound else "")
            run.cut = budget_bound
    run.wall_s = time.perf_counter() - start
    if out.exists():
        run.data = json.loads(out.read_text())
    if run.rc not in (0, None) and not run.error:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        run.error = f"exit {run.rc}: " + " | ".join(tail)[-600:]
    if run.tensors and not run.tensors.exists():
        run.tensors = None
    shutil.rmtree(scratch, ignore_errors=True)
