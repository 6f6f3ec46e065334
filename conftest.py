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
_WATCHED = [_REAL_HOME / ".triton_dist", _REAL_HOME / ".triton", Path.cwd() / ".autotune_logs",
            Path.cwd() / ".hypothesis"]
_BEFORE = {str(p): sorted(str(f) for f in p.rglob("*")) if p.is_dir() else None for p in _WATCHED}
os.environ["HOME"] = tempfile.mkdtemp(prefix="tdp-test-home-")
# Hypothesis keeps its caches (constants, unicode data) under ./.hypothesis unless told otherwise.
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = tempfile.mkdtemp(prefix="tdp-test-hypothesis-")
_OURS = [os.environ["HOME"], os.environ["HYPOTHESIS_STORAGE_DIRECTORY"]]  # removed as this process ends


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


def pytest_sessionstart(session):
    """Installed mode: with ``TDP_TEST_INSTALLED=1`` (a test-only variable that ``tests/run-installed.sh``
    sets; not a setting of the package) the session stops at once unless ``triton_dist_plugin`` is the
    installed, non-editable distribution in this venv's site-packages, and unless the guard that makes
    every child process import that one too (``tests/installed_guard.py``) is active."""
    if os.environ.get("TDP_TEST_INSTALLED") == "1":
        problem = _not_installed()
        if problem:
            import pytest

            pytest.exit(f"TDP_TEST_INSTALLED=1, but {problem}", returncode=4)


def _not_installed():
    """Why the imported package is not the installed wheel, or None."""
    import importlib.metadata
    import json
    import sys

    try:
        import _tdp_test_guard as guard
    except ImportError:
        return "the installed-mode guard is not in this venv: run tests/run-installed.sh"
    if not guard.active():
        return "the installed-mode guard is not on sys.meta_path"
    import triton_dist_plugin

    where = Path(triton_dist_plugin.__file__).resolve()
    if not guard.installed_here(str(where)):
        return f"triton_dist_plugin was imported from {where}, outside {guard.site_packages()}"
    dist = importlib.metadata.distribution("triton-dist-plugin")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        return f"the distribution is an editable install ({direct})"
    files = {Path(dist.locate_file(f)).resolve() for f in dist.files or []}
    strays = sorted(m for m, module in sys.modules.items() if m.split(".")[0] == "triton_dist_plugin"
                    and getattr(module, "__file__", None) and Path(module.__file__).resolve() not in files)
    if where not in files or strays:
        return f"modules not installed by the distribution {dist.locate_file('')}: {strays or [str(where)]}"
    return None


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if a test wrote under the real home directory (or the contextual tuner's logs
    into the directory the tests were started from)."""
    after = {str(p): sorted(str(f) for f in p.rglob("*")) if p.is_dir() else None for p in _WATCHED}
    if after != _BEFORE:
        changed = [p for p in after if after[p] != _BEFORE[p]]
        print(f"\ntests wrote outside their temporary directories: {', '.join(changed)}")
        session.exitstatus = 1


def pytest_unconfigure(config):
    """This process's own home and hypothesis directories go (each pytest-xdist worker has its own)."""
    import shutil

    for folder in _OURS:
        shutil.rmtree(folder, ignore_errors=True)
