"""One entry as the HTML report reads it, and the small text helpers every part of the page uses.

``View`` reads an entry once: each candidate's round (measured fully, screened out or failed),
its p20-p80 spread where recorded, and a short label naming only the parameters that differ
between the candidates (those all share are written once). The page (``html_report``) and its
charts (``html_charts``) both draw from it, so it sits below both.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Optional

from ..failures import round_of


class View:
    """One entry, read once: its candidates with their rounds and spreads, labels and facts."""

    def __init__(self, entry: Any, index: int) -> None:
        self.entry, self.anchor = entry, f"entry-{index}"
        record = getattr(entry, "record", None)  # in this version's layout (Triton's own files: none)
        self.record = record if isinstance(record, dict) else {}
        self.rows = _rows(entry, self.record)
        self.labels, self.common, self.grid = labels([r["config"] for r in self.rows])
        for row, label in zip(self.rows, self.labels):
            row["label"] = label.replace("\x02", "").replace("\x03", "")  # the verdict's markers (``html_charts.why``)
        self.pick = next((r for r in self.rows if r["pick"]), None)
        source = self.record.get("source")
        self.source = source if isinstance(source, str) else None


def _rows(entry: Any, record: dict) -> list:
    """Every candidate: its config, p50 (``ms``), p20 and p80 where recorded, ``round`` (``full``,
    ``screening``, ``skipped`` or ``-`` for a failure: ``failures.round_of``), failure and whether it is the pick."""
    stored = record.get("candidates") if isinstance(record.get("candidates"), list) else []
    rows = []
    for i, c in enumerate(entry.candidates):
        s = stored[i] if i < len(stored) and isinstance(stored[i], dict) and stored[i].get("config") == c.get(
            "config") else {}
        timing = s.get("timing") if s else c.get("timing")
        ms = number(c.get("ms"))
        low, high = _spread(timing, ms)
        rows.append({"config": str(c.get("config")), "ms": ms, "p20": low, "p80": high,
                     "round": round_of(ms, c.get("measured", True), c.get("failure")),
                     "failure": c.get("failure"), "pick": c.get("config") == entry.pick})
    return rows


def number(value: Any) -> Optional[float]:
    """A stored time as a float; None for anything that is not a finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _spread(timing: Any, ms: Optional[float]) -> tuple:
    """``(p20, p80)`` of a stored ``[p50, p20, p80]`` timing; ``(None, None)`` where it holds one
    number only (repeated) or none."""
    if ms is None or not isinstance(timing, (list, tuple)) or len(timing) != 3:
        return None, None
    low, high = number(timing[1]), number(timing[2])
    if low is None or high is None or low > high or (low == high == ms):
        return None, None
    return low, high


# -- config labels ---------------------------------------------------------------------------------

def _split(text: str) -> list:
    """``text`` split at its top-level commas (none inside brackets or quotes)."""
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


_WRAPPED = re.compile(r"(?:Config\((.*)\)|\{(.*)\})", re.S)
_PAIR = re.compile(r"""['"]?([A-Za-z_][\w.]*)['"]?\s*[:=]\s*(.+)""", re.S)


def _params(text: str, depth: int = 0) -> Optional[dict]:
    """A config's description as ``{parameter: value text}``: ``Config(BLOCK=64, num_warps=4)``,
    Triton's ``BLOCK=64, num_warps=4`` or a function's ``{'cfg': Config(...), 'mode': 'ok'}``
    (nested configs flattened); None when it is none of these."""
    if depth > 3 or len(text) > 4000:
        return None
    match = _WRAPPED.fullmatch(text.strip())
    body = (match.group(1) if match.group(1) is not None else match.group(2)) if match else text
    out: dict = {}
    for part in _split(body):
        pair = _PAIR.fullmatch(part)
        if pair is None:
            return None
        name, value = pair.group(1), pair.group(2).strip()
        inner = _params(value, depth + 1) if _WRAPPED.fullmatch(value) else None
        if inner is None:
            out[name] = value
        else:
            out.update({(k if k not in out else f"{name}.{k}"): v for k, v in inner.items()})
    return out or None


def labels(configs: list) -> tuple:
    """``(labels, common, grid)``: each candidate by the parameters that differ between them, the
    parameters all share (written once), and ``(parsed, varying)`` for the heatmap (None when the
    descriptions could not be read as parameters). ``triton-dist-tune list`` shows a pick by its
    label too, so the page and the listing name a config alike."""
    parsed = [_params(c) for c in configs]
    if not configs or any(p is None for p in parsed):
        return [_bare(c) for c in configs], "", None
    names = list(dict.fromkeys(k for p in parsed for k in p))
    varying = [k for k in names if len({p.get(k) for p in parsed}) > 1]
    common = ", ".join(f"{k}={parsed[0][k]}" for k in names if k not in varying)
    named = [", ".join(f"{k}={p[k]}" for k in varying if k in p) or _bare(c) for p, c in zip(parsed, configs)]
    return named, common, (parsed, varying)


def _bare(text: str) -> str:
    return text[len("Config("):-1] if text.startswith("Config(") and text.endswith(")") else text


# -- text ------------------------------------------------------------------------------------------

def fmt_ms(value: float) -> str:
    """A time in milliseconds, as every part of the page writes one."""
    return f"{value:.4f} ms"


def esc(value: Any) -> str:
    """``value`` as HTML text (or an attribute's value): everything on the page from a file passes here."""
    return html.escape(str(value), quote=True)
