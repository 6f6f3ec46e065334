"""Helpers shared by the tests (kept out of conftest so they import by a plain name)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import fork_server
import pytest
import torch

from triton_dist_plugin import hookimpl

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def python(*args, env: dict | None = None, cwd=ROOT, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python ARGS`` (``-c CODE``, ``-m MODULE`` or ``SCRIPT``, then its arguments; any other option
    starts afresh) in ``cwd`` with ``env`` (default: this process's), waited for: a new process, forked
    from ``fork_server`` after torch's import where it can be (what it runs imports Triton and the
    plugin itself, as a fresh interpreter would), as ``subprocess.run(..., capture_output=True,
    text=True)`` gives it."""
    return fork_server.run([str(a) for a in args], dict(os.environ if env is None else env), cwd, timeout)


def start_python(*args, env: dict | None = None, cwd=ROOT):
    """``python``, not waited for: a handle with ``communicate``, ``wait``, ``kill``, ``pid`` and
    ``returncode``."""
    return fork_server.start([str(a) for a in args], dict(os.environ if env is None else env), cwd)


def run_python(code: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``code`` in a new process (``python -c``) from the repository root, with this process's
    environment and ``env`` over it (None: unset), for import-time behaviour."""
    full_env = {**os.environ, **(env or {})}
    for name, value in list(full_env.items()):
        if value is None:
            del full_env[name]
    return python("-c", code, env=full_env, timeout=timeout)


# What a new interpreter's warning filters are (``python -W`` unset, a release build).
_DEFAULT_FILTERS = [("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                    ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                    ("ignore", ResourceWarning, "")]


def run_cli(*args: str, cwd: Any = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``triton-dist-tune ARGS``, as the console script runs it, but in this process: ``cli.main()``
    with the script's ``sys.argv``, a new interpreter's warning filters (warnings print on standard
    error, one line each, as the command prints them), this process's environment with ``env`` over
    it (None: unset), ``cwd`` as the working directory (default: the repository root); its output
    and status as a finished subprocess gives them. In-process for speed: a process per case cost
    a second of imports. ``tests/test_packaging.py`` and ``tests/test_cli.py`` run the installed
    console script itself."""
    import contextlib
    import io
    import traceback
    import warnings

    from triton_dist_plugin import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        os.chdir(cwd if cwd is not None else ROOT)
        sys.argv = ["triton-dist-tune", *args]
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.resetwarnings()
            for action, category, module in reversed(_DEFAULT_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: err.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            try:
                code = cli.main()
            except SystemExit as exc:  # argparse's usage errors, as the script would exit
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    err.write(exc.code + "\n")
            except Exception:  # what the script would print as a traceback (tests look for one)
                traceback.print_exc(file=err)
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
    return subprocess.CompletedProcess(["triton-dist-tune", *args], code, out.getvalue(), err.getvalue())


def listed(stdout: str) -> list[dict]:
    """The entries ``triton-dist-tune list`` printed, as docs/cli.md lays them out: under each
    place's heading, a table whose rows each have their key on the line under them. Each entry:
    ``place`` (its heading), ``row`` (the line), ``name``, ``pick ms`` and the rest by column, and
    ``key``."""
    entries: list = []
    place, header, table = "", [], False
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            place, table = "", False
        elif line.startswith("-"):
            table = True
        elif not table and i + 1 < len(lines) and lines[i + 1].startswith("-"):
            starts = [j for j, ch in enumerate(lines[i + 1]) if ch == "-" and (j == 0 or lines[i + 1][j - 1] == " ")]
            header = [(line[a:b].strip(), a, b) for a, b in zip(starts, starts[1:] + [None])]
        elif not table:
            place = line
        elif line.startswith("  key="):
            entries[-1]["key"] = line[len("  key="):]
        else:
            entries.append({"place": place, "row": line, **{name: line[a:b].strip() for name, a, b in header}})
    return entries


def running(pid: int) -> bool:
    """Whether ``pid`` is still a live process (an exited one nobody reaped does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario, world, tmp_path, timeout_s="20", wall=120):
    """Run ``tests/dist_worker.py``'s ``scenario`` on ``world`` ranks, each with its own home in
    ``tmp_path``; every one must finish within ``wall`` seconds (a hang fails). The ranks are forked
    from ``fork_server`` where they can be, else started afresh; their results, by rank."""
    port = str(free_port())
    envs = []
    for rank in range(world):
        home = tmp_path / f"home{rank}"
        home.mkdir(exist_ok=True)
        env = {**os.environ, "HOME": str(home), "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_TIMEOUT": timeout_s}
        env.pop("TRITON_DIST_AUTOTUNE_DIR", None)
        envs.append(env)
    procs = fork_server.start_ranks(scenario, world, port, envs, tmp_path)
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=wall)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"rank hung in scenario {scenario}")
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return sorted(results, key=lambda r: r["rank"])


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


class Recorder:
    """Observer plugin: every tuning record, and every candidate request the timing hook saw
    (it answers None, so the built-in still times them)."""

    def __init__(self):
        self.records, self.timed = [], []

    @hookimpl
    def tdp_on_tuned(self, record):
        self.records.append(record)

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        self.timed.append(request)


def install_example(directory: Path, dist: str, scratch: Path, timeout: float = 240) -> Any:
    """The example plugin distribution in ``directory`` (named ``dist``), installed into this
    interpreter once (pip, without dependencies, from a copy in ``scratch`` so no build artifacts
    land in the repository); its ``importlib.metadata`` distribution."""
    import importlib
    import importlib.metadata
    import shutil

    try:
        return importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    source = scratch / directory.name
    shutil.copytree(directory, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir", str(source)],
                   check=True, timeout=timeout)  # (pip's cache is under $HOME)
    importlib.invalidate_caches()
    return importlib.metadata.distribution(dist)
