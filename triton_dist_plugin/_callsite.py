"""Where a warning should point: the user's line, not a frame inside the plugin or Triton.

A warning raised on a launch passes through Triton's ``JITFunction``/``Autotuner`` frames and the
plugin's own, a different number of them on each path; ``stacklevel()`` counts them, so
``warnings.warn(..., stacklevel=stacklevel())`` names the first frame outside both (the line that
launched the kernel or called the tuned function).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIPPED = ("triton", "pluggy", "wrapt")  # packages a launch passes through on its way here


def _internal(filename: str) -> bool:
    if filename.startswith(_HERE) or filename.startswith("<frozen "):
        return True
    for name in _SKIPPED:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path and filename.startswith(os.path.dirname(os.path.abspath(path)) + os.sep):
            return True
    return False


def stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the caller of this function name the
    first frame outside the plugin and the packages a launch passes through."""
    frame = sys._getframe(1)  # the function about to warn: stacklevel 1
    level = 1
    while frame is not None and _internal(os.path.abspath(frame.f_code.co_filename)):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 1
