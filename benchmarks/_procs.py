"""Fresh processes, as the benchmarks start them: a child's environment (caches of its own, the
plugin on or off, the caller's settings scrubbed where a script asks), a child that runs one
function of its script, and the line that carries a child's result back.

Nothing here changes this process's environment (``_common`` gives it a plugin cache of its own).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
RESULT = "RESULT "  # a child's result: the line that starts with this, then JSON
PLUGIN_ENV = "TDP_PLUGIN"  # "1": a child that ``serve`` runs imports the plugin first


def child_pythonpath() -> str:
    """The checkout (the plugin, ``kernels``) and ``benchmarks/`` first, then the caller's PYTHONPATH."""
    return os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])


def scrubbed_env(names: Iterable[str] = (), prefixes: tuple = (), base: Optional[Mapping] = None) -> dict:
    """``base`` (``os.environ``) without ``names`` and without the variables that start with one of ``prefixes``."""
    names = frozenset(names)
    return {k: v for k, v in (os.environ if base is None else base).items()
            if k not in names and not k.startswith(prefixes)}


def fresh_env(base: str, plugin: Optional[bool] = None, extra: Optional[dict] = None, *,
              triton_dir: Optional[str] = None, plugin_dir: Optional[str] = None) -> dict:
    """``os.environ`` for a child whose caches are its own: Triton's in ``base/triton`` and the plugin's in
    ``base/tdp`` (or the directories given), ``child_pythonpath()``, then ``extra``. ``plugin`` True or
    False tells ``serve`` whether to import the plugin; False also sets ``TRITON_DIST_PLUGIN_DISABLE=1``."""
    env = {**os.environ, "TRITON_CACHE_DIR": triton_dir or os.path.join(base, "triton"),
           "TRITON_DIST_AUTOTUNE_DIR": plugin_dir or os.path.join(base, "tdp"), "PYTHONPATH": child_pythonpath()}
    if plugin is not None:
        env[PLUGIN_ENV] = "1" if plugin else "0"
    env.update(extra or {})
    if plugin is False:
        env["TRITON_DIST_PLUGIN_DISABLE"] = "1"
    return env


def rank_env(env: dict, rank: int, world: int, port: int) -> dict:
    """``env`` for rank ``rank`` of ``world`` on this host, started by hand (torchrun gives every rank the same)."""
    return {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(result: Any) -> None:
    """Print a child's result line."""
    print(RESULT + json.dumps(result, default=str), flush=True)


def result_of(stdout: str) -> Optional[Any]:
    """The result in the last result line of a child's output; None where it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT):
            try:
                return json.loads(line[len(RESULT):])
            except ValueError:
                return None
    return None


def last_stderr_line(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr.strip().splitlines() or ["?"])[-1]


def call_child(script: str, name: str, env: dict, timeout: float, cwd: Optional[Path] = None) -> tuple:
    """Run ``python script child name`` (see ``serve``): ``(its result or None, the finished process)``.
    A child still running after ``timeout`` seconds is killed and ``subprocess.TimeoutExpired`` raised."""
    proc = subprocess.run([sys.executable, str(script), "child", name], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return result_of(proc.stdout), proc


def run_fresh(script: str, name: str, plugin: Optional[bool] = None, extra: Optional[dict] = None,
              timeout: float = 300, **dirs: Optional[str]) -> dict:
    """``child_<name>`` of ``script`` in a fresh process whose caches are its own (``fresh_env``; ``dirs``:
    its ``triton_dir``/``plugin_dir`` instead), with ``extra`` in its environment: its result, or
    ``{"error": ...}`` when it printed none or ran past ``timeout`` seconds."""
    import tempfile

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cache:
        try:
            data, proc = call_child(script, name, fresh_env(cache, plugin, extra, **dirs), timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {timeout:.0f}s"}
        return data if data is not None else {"error": last_stderr_line(proc)[:300]}


def serve(namespace: dict) -> bool:
    """In a child that ``call_child`` started: import the plugin where ``TDP_PLUGIN=1``, run the script's
    ``child_<name>()`` (from ``namespace``, its ``globals()``) and print its result line; True. Else False."""
    if len(sys.argv) < 3 or sys.argv[1] != "child":
        return False
    if os.environ.get(PLUGIN_ENV) == "1":
        import triton_dist_plugin  # noqa: F401  (patches Triton)
    emit(namespace[f"child_{sys.argv[2]}"]())
    return True


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def gpu_mib() -> dict[int, int]:
    """GPU MiB of each process that holds a CUDA context (``nvidia-smi --query-compute-apps``)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return {int(p): int(m) for p, m in (line.split(",") for line in out.splitlines() if "," in line)}


def helper_gpu_mib() -> dict[int, int]:
    """GPU MiB of each process below this one that holds a CUDA context (isolation, compile workers)."""
    mine = descendants(os.getpid())
    return {pid: mib for pid, mib in gpu_mib().items() if pid in mine}
