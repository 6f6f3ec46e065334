"""The installed-mode guard of the tests (never part of the package).

``tests/run-installed.sh`` copies this file into its test venv's site-packages as ``_tdp_test_guard.py``,
with a ``_tdp_test_guard.pth`` that imports it whenever that venv's Python starts. With the test-only
variable ``TDP_TEST_INSTALLED=1`` (the runner sets it), it puts a finder first on ``sys.meta_path`` that
refuses to import ``triton_dist_plugin`` from anywhere but that site-packages: pytest's own process and
every process the tests start (``python -c`` from the tree, ``tests/dist_worker.py``, ``PYTHONPATH`` set to
the tree, the ``triton-dist-tune`` script) import the installed wheel or fail loudly, never a checkout.
``conftest.py`` checks at session start that the guard is active. Without the variable it does nothing.
"""

import os
import sys
import sysconfig

NAME = "triton_dist_plugin"
ACTIVE = os.environ.get("TDP_TEST_INSTALLED") == "1"


def site_packages() -> list:
    """This interpreter's site-packages directories (resolved)."""
    return sorted({os.path.realpath(sysconfig.get_path(k)) for k in ("purelib", "platlib")})


def installed_here(path: str) -> bool:
    """Whether ``path`` lies in this interpreter's site-packages."""
    path = os.path.realpath(path)
    return any(path.startswith(site + os.sep) for site in site_packages())


class Guard:
    """Finds the package through the other finders, as the import system would, and refuses it from
    outside site-packages."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        else:
            return None
        if not (spec.origin and installed_here(spec.origin)):
            raise ImportError(f"TDP_TEST_INSTALLED=1: {NAME} would be imported from {spec.origin}, not from the "
                              f"installed wheel in {site_packages()} (sys.path: {sys.path})")
        return spec


def active() -> bool:
    return any(isinstance(finder, Guard) for finder in sys.meta_path)


if ACTIVE and not active():
    sys.meta_path.insert(0, Guard())
