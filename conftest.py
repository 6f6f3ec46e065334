"""Test set-up shared by every test: the CPU interpreter unless a GPU is present.

This file sits at the repository root so that ``kernels`` (the real kernels the tests tune) is
importable without being installed.
"""

import os
import tempfile
from pathlib import Path

# No test writes under the user's home: the whole session gets a home of its own (Triton's
# default cache, and so the plugin's kernel-level picks, included), before Triton is imported;
# the end of the session checks that nothing appeared where the plugin or Triton keep files under
# the real one.
_REAL_HOME = Path(os.environ.get("HOME") or os.path.expanduser("~"))
_WATCHED = [_REAL_HOME / ".triton_dist", _REAL_HOME / ".triton", Path.cwd() / ".autotune_logs"]
_BEFORE = {str(p): sorted(str(f) for f in p.rglob("*")) if p.is_dir() else None for p in _WATCHED}
os.environ["HOME"] = tempfile.mkdtemp(prefix="tdp-test-home-")


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if "TRITON_INTERPRET" not in os.environ and not _has_gpu():
    os.environ["TRITON_INTERPRET"] = "1"
# Tests decide timing methods and printing themselves.
for var in ("TRITON_BENCH_METHOD", "TRITON_PRINT_AUTOTUNING", "TRITON_DIST_PLUGIN_DISABLE"):
    os.environ.pop(var, None)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if a test wrote under the real home directory (or the contextual tuner's logs
    into the directory the tests were started from)."""
    after = {str(p): sorted(str(f) for f in p.rglob("*")) if p.is_dir() else None for p in _WATCHED}
    if after != _BEFORE:
        changed = [p for p in after if after[p] != _BEFORE[p]]
        print(f"\ntests wrote outside their temporary directories: {', '.join(changed)}")
        session.exitstatus = 1
