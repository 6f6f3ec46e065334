"""Helpers shared by the tests (kept out of conftest so they import by a plain name)."""

import os
import subprocess
import sys
from pathlib import Path

import torch

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
