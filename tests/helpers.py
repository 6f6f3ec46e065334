"""Helpers shared by the tests (kept out of conftest so they import by a plain name)."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from triton_dist_plugin import hookimpl

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def run_python(code: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter from the repository root (for import-time behaviour)."""
    full_env = {**os.environ, **(env or {})}
    for name, value in list(full_env.items()):
        if value is None:
            del full_env[name]
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


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
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", str(source)], check=True,
                   timeout=timeout)
    importlib.invalidate_caches()
    return importlib.metadata.distribution(dist)
