"""Why the pick, in words: one place for every view that shows times (the printout of
``TRITON_PRINT_AUTOTUNING``, the demo, ``triton-dist-tune show`` and ``list``, the HTML report).

The times the views show are each candidate's full measurement. The pick is not always the
fastest of them: finalists too close to call are measured again in interleaved rounds (``settle``),
which decide, and a tie goes to the first in the configs' order, the same in every process. A view
that shows a faster time beside the pick says why in one line, with the decision's own numbers, so
no two places give two margins or two noises for one decision.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional


def decision_of(value: Any) -> Optional[dict]:
    """The stored ``decision`` (``settle``) when it has the fields and types written, else None: it
    comes from a file, and a view shows only what it can read as written."""
    if not isinstance(value, dict):
        return None
    numbers = all(isinstance(value.get(k), (int, float)) and not isinstance(value.get(k), bool)
                  and math.isfinite(value.get(k)) for k in ("noise", "rounds", "confidence"))
    margin = value.get("margin")
    if not numbers or not isinstance(value.get("tie"), bool) or not (
            margin is None or isinstance(margin, (int, float)) and not isinstance(margin, bool)):
        return None
    if not (isinstance(value["rounds"], int) and value["rounds"] >= 0 and 0 <= value["confidence"] <= 1
            and 0 <= value["noise"] < 10):
        return None
    return value


def share(fraction: float) -> str:
    """A relative difference as every view writes it: ``+4.2%``, signed."""
    return f"{fraction:+.1%}" if math.isfinite(fraction) and abs(fraction) < 1e10 else "n/a"


def noise(decision: dict) -> str:
    """The noise the decision used, and whether it was measured (a timer that answers one number
    per candidate says nothing of its noise: the policy's assumption stands in)."""
    value = decision.get("noise", 0.0)
    if decision.get("noise_known") is False:
        return f"noise not measured, {value:.1%} assumed"
    if decision.get("noise_capped") is True:
        return f"noise at its {value:.1%} cap, the runs spreading more"
    return f"noise {value:.1%}"


def rival(margin: Optional[float], who: str = "the closest other") -> str:
    """How the closest other finalist did against the pick, in words that carry the sign: the pick
    of a tie may be the slower one."""
    if margin is None:
        return "no runner-up"
    if not math.isfinite(margin) or abs(margin) >= 1e10:  # a time of 0 (a file's, or a timer's)
        return f"{who} took longer" if margin > 0 else f"{who} was faster"
    return f"{who} took {margin:.1%} longer" if margin >= 0 else f"{who} was {-margin:.1%} faster"


def sentence(decision: dict) -> str:
    """How the pick was decided among the finalists, for the tuning's notes and the report. The
    margin is the one the decision used: over the rounds where there were rounds."""
    margin = decision.get("margin")
    rounds = decision.get("rounds", 0)
    if decision.get("rounds_failed"):
        return (f"the rounds to settle the finalists stopped working after {rounds} (they failed, on this rank or "
                f"another): the full measurement decided ({noise(decision)})")
    if not rounds:
        return f"pick clear of the rest ({rival(margin, 'the runner-up')}; {noise(decision)})"
    ahead = "no runner-up" if margin is None else f"over the rounds {rival(margin)}"
    if decision.get("tie"):
        return (f"finalists too close to call after {rounds} interleaved rounds: a tie, given to the first of "
                f"them in the configs' order, the same in every process ({ahead}; {noise(decision)})")
    return (f"pick separated in {rounds} interleaved rounds, ahead in {decision.get('confidence', 0.0):.0%} of "
            f"them ({ahead}; {noise(decision)})")


def behind(pick_ms: Optional[float], others_ms: Iterable[Optional[float]]) -> Optional[float]:
    """How much slower (relative) the pick's full measurement is than the fastest other full
    measurement; None where the pick is the fastest (or has no time)."""
    finite = [t for t in others_ms if t is not None and math.isfinite(t)]
    if pick_ms is None or not math.isfinite(pick_ms) or not finite or min(finite) >= pick_ms:
        return None
    return pick_ms / min(finite) - 1 if min(finite) > 0 else math.inf  # inf: another timed at 0 (a file's)


def _small(fraction: float) -> str:
    """A small relative difference with the digits that tell it from none (ties are this close)."""
    return "less than 0.01%" if fraction < 1e-4 else f"{fraction:.2%}" if fraction < 1e-3 else f"{fraction:.1%}"


def reason(decision: Any) -> str:
    """Why a pick that the full measurement shows slower than another is still the pick."""
    decision = decision_of(decision)
    if decision is None:
        return "no decision between finalists was recorded with it (an older entry, or another tuner's pick)"
    if not decision.get("rounds") or decision.get("rounds_failed"):
        return f"the decision recorded with it ({sentence(decision)}) does not match these times"
    if decision.get("tie"):
        return (f"too close to call over {decision['rounds']} interleaved rounds ({noise(decision)}); "
                "a tie goes to the first in the configs' order, the same in every process")
    return (f"{decision['rounds']} interleaved rounds after these times decided "
            f"(over them {rival(decision.get('margin'))}; {noise(decision)})")


def line(pick_ms: Optional[float], others_ms: Iterable[Optional[float]], decision: Any) -> Optional[str]:
    """One short line for a view that shows the pick slower than another candidate measured fully;
    None where it shows the pick fastest."""
    slower = behind(pick_ms, others_ms)
    if slower is None:
        return None
    head = f"why this pick, {_small(slower)} slower here" if slower < 1e10 else "why this pick, slower here"
    return f"{head}: {reason(decision)}"


def word(decision: Any) -> str:
    """The decision in a word, for a column: ``clear``, ``rounds``, ``tie`` or ``-`` (none recorded)."""
    decision = decision_of(decision)
    if decision is None:
        return "-"
    if decision.get("rounds_failed"):
        return "clear"  # the full measurement decided
    return "tie" if decision.get("tie") else "rounds" if decision.get("rounds") else "clear"
