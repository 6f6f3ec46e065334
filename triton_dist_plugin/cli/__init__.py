"""The command line, ``triton-dist-tune``: ``commands`` over the stored picks (list, show, report,
export, import, clear, misses), reading them through ``entries`` (finding, loading and removing
stored entries) and printing them through ``views``; and ``pretune``, tuning a function's kernels
ahead of time."""

from .commands import main

__all__ = ["main"]
