"""The command line, ``triton-dist-tune``: ``commands`` over the stored picks (list, show, report,
export, import, clear, misses), and ``pretune``, tuning a function's kernels ahead of time."""

from .commands import main

__all__ = ["main"]
