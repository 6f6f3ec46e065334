"""Why a candidate failed, and what upstream would have made of it.

Every front end and every readying stage (compilation, isolation, the accuracy check) turns a
candidate's exception into a one-line ``Reason`` here, so reports and ``tdp_on_tuned`` read the
same whichever stage failed it. ``let_through`` and ``all_upstream_failures`` decide, when no
candidate works, what the caller gets, as upstream's ``_bench`` would have; ``Timing`` keeps
what a kernel's own ``do_bench`` returned, which upstream hands back unchanged. Kept apart from
the tuning loop (``engine``) because it needs nothing but ``_compat``: stages below the engine
name failures too.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from . import _compat

#: why a candidate the search never screened has no time (it was never compiled nor run)
NOT_SEARCHED = "not screened: the search left it out (far from the best screened, or ranked low by the cost model)"
#: why one left uncompiled as hopeless while its step compiled has none
NOT_COMPILED = "not compiled: every screened neighbour was far slower than the best"


def left_out(reason: Any) -> bool:
    """The reason says the candidate was left out by the search, not that it failed."""
    return isinstance(reason, str) and reason.startswith(("not screened:", "not compiled:"))


def round_of(ms: Optional[float], measured: Any, failure: Any) -> str:
    """Which round a stored candidate's time comes from: ``full`` (a full measurement),
    ``screening`` (a short round that dropped it: not comparable with a full measurement),
    ``skipped`` (left out by the search: never run) or ``-`` (failed)."""
    if ms is None:
        return "skipped" if left_out(failure) else "-"
    return "full" if measured is not False else "screening"


class NoValidConfig(RuntimeError):
    """Every candidate failed; the message lists each one's reason."""

    def __init__(self, name: str, key: Any, failures: dict):
        self.failures = failures
        lines = "\n".join(f"  {config}: {reason}" for config, reason in failures.items())
        super().__init__(f"every candidate of {name} failed for key {key}; no config can be picked:\n{lines}")


_POSITION = re.compile(r"at \d+:\d+:")


class Reason(str):
    """A failed candidate's one-line reason; ``exc`` is the exception behind it, if any."""

    exc: Optional[BaseException] = None


def reason_of(exc: BaseException) -> Reason:
    """A one-line reason for a failed candidate: the exception type and its first line.

    Triton's compile errors start with the failing line's position and source; their message
    (``static_assert``'s text, say) comes last, so it joins the position.
    """
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if _POSITION.fullmatch(first) and len(text) > 1:
        message = getattr(exc, "error_message", None) or next(
            line.strip() for line in reversed(text) if line.strip() != "^")  # else the failing line itself
        first = f"{first} {str(message).strip().splitlines()[0]}"
    reason = Reason(f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__)
    reason.exc = exc
    return reason


def let_through(failures: dict) -> Optional[BaseException]:
    """The first failure upstream's ``_bench`` would not have caught, or None.

    Upstream times ``OutOfResources``-like failures as infinity and lets every other exception
    out of tuning. Here one broken candidate never stops tuning; but when no candidate works and
    one failed that way, that original exception is what the caller gets, as upstream.
    """
    for reason in failures.values():
        exc = getattr(reason, "exc", None)
        if exc is not None and not isinstance(exc, _compat.UPSTREAM_FAILED_CONFIG):
            return exc
    return None


def all_upstream_failures(failures: dict) -> bool:
    """Every candidate failed in a way upstream times as infinity (``OutOfResources`` and the like):
    upstream would then keep the first candidate and fail at its launch."""
    return bool(failures) and all(isinstance(getattr(r, "exc", None), _compat.UPSTREAM_FAILED_CONFIG)
                                  for r in failures.values())


class Timing(list):
    """``[p50, p20, p80]`` from a kernel's own ``do_bench``; ``raw`` is what it returned, which
    upstream stores in ``configs_timings`` and hands back from ``_bench`` unchanged."""

    raw: Any = None


def raw(timing: Any) -> Any:
    """What the kernel's own ``do_bench`` returned for this timing, else the timing itself."""
    value = getattr(timing, "raw", None)
    return timing if value is None else value
