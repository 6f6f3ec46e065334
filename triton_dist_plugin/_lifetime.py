"""A helper process's tie to its parent: the one place that makes a forked helper (a compile
worker, the isolation worker) die with the process it serves, even mid-task. The isolation
worker started afresh (``isolate_worker.BOOTSTRAP``) asks the same in its own few lines, as it
does so before this package can be imported.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Optional


def die_with_parent(parent: int, name: Optional[bytes] = None) -> bool:
    """Ask Linux to kill this process when its parent ends (``PR_SET_PDEATHSIG``; the fork must
    come from a thread that lives as long as the helper is needed) and, with ``name``, name it
    (``PR_SET_NAME``); whether ``parent`` is still its parent. False means it died before the
    request took: the caller leaves at once. Elsewhere only that check holds: callers watch their
    pipe or socket as well."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if name:
                libc.prctl(15, name)  # PR_SET_NAME
        except (OSError, AttributeError):
            pass
    return os.getppid() == parent
