"""``triton-dist-tune cover NAME -k K``: the few configs that serve a kernel's whole grid of tuned
keys best, so an author can cut a large space down to what matters (and ship those).

From the full measurements stored for each key (``pretune`` over a grid of shapes), ``k`` configs
are chosen greedily: each step adds the one that most lowers the grid's mean slowdown, where a
key's slowdown is the best chosen config's time there over the best time measured there (1.0:
as good as tuning the key). Only full measurements count (a screening round's time is not
comparable with one), so a config not measured fully at a key cannot serve it: a key none of the
chosen was measured at is counted apart, and the choice first serves as many keys as it can.
Ties go to the config seen first, so the answer is the same every time.
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Iterable

from ..failures import round_of
from ..reporting import html_view


def grid(entries: Iterable) -> dict:
    """``{key: {config: ms}}``: each key's full measurements (finite ones), configs by description."""
    times: dict = {}
    for e in entries:
        full = {str(c["config"]): c["ms"] for c in e.candidates
                if round_of(c.get("ms"), c.get("measured", True), c.get("failure")) == "full"
                and isinstance(c.get("ms"), (int, float)) and math.isfinite(c["ms"]) and c["ms"] > 0}
        if full:
            times.setdefault(str(e.key), {}).update(full)
    return times


def slowdowns(times: dict, chosen: list) -> dict:
    """Each key's slowdown with ``chosen``: None where none of them was measured there."""
    out = {}
    for key, measured in times.items():
        served = [measured[c] for c in chosen if c in measured]
        out[key] = min(served) / min(measured.values()) if served else None
    return out


def choose(times: dict, k: int) -> list:
    """The ``k`` configs (fewer if fewer were measured) chosen greedily, as the module says. Each
    key's best time among those chosen so far is kept, so a step weighs each config once per key
    (not once per key and chosen config): a large space and ``k`` stay quick."""
    times = {key: measured for key, measured in times.items() if measured}  # a key measured at nothing: none serves it
    configs = list(dict.fromkeys(c for measured in times.values() for c in measured))
    floor = {key: min(measured.values()) for key, measured in times.items()}
    best: dict = dict.fromkeys(times)  # each key's fastest among those chosen (None: none measured there)

    def cost(config: str) -> tuple:  # (keys left unserved, mean slowdown of the served) with ``config`` added
        served = []
        for key, measured in times.items():
            ms, held = measured.get(config), best[key]
            ms = held if ms is None else (ms if held is None else min(ms, held))
            if ms is not None:
                served.append(ms / floor[key])
        return (len(times) - len(served), statistics.fmean(served) if served else math.inf)

    chosen: list = []
    while len(chosen) < min(k, len(configs)):
        taken = set(chosen)
        pick = min((c for c in configs if c not in taken), key=cost)
        chosen.append(pick)
        for key, measured in times.items():
            if pick in measured and (best[key] is None or measured[pick] < best[key]):
                best[key] = measured[pick]
    return chosen


def summary(values: list) -> str:
    """Mean, p90 and worst slowdown over the keys served, as percentages slower than each key's best."""
    served = sorted(v for v in values if v is not None)
    if not served:
        return "no key served"
    p90 = served[min(len(served) - 1, math.ceil(0.9 * len(served)) - 1)]
    unserved = len(values) - len(served)
    return (f"mean +{statistics.fmean(served) - 1:.1%}, p90 +{p90 - 1:.1%}, worst +{served[-1] - 1:.1%} slower than "
            f"each key's best, over {len(served)} keys" + (f"; {unserved} keys none of them was measured at"
                                                             if unserved else ""))


def _natural(text: str) -> list:
    """A key's text sorted as a person would: its numbers by value (``(300, ...)`` before ``(1000, ...)``)."""
    return [(0, int(part), "") if part.isdecimal() and part.isascii() else (1, 0, part)
            for part in re.split(r"([0-9]+)", text[:1000])]


def _tuned_alike(e) -> tuple:
    """Entries whose times compare: one kernel's (or function's) keys from one source, on one
    machine, over one set of candidates and settings."""
    record = e.record if isinstance(getattr(e, "record", None), dict) else {}
    return (e.kind, e.name, str(record.get("source")), repr(record.get("hardware")), repr(record.get("context")))


def render(entries: list, k: int) -> str:
    """The cover set of each kernel (or function) among ``entries``: its configs, each key's
    slowdown and which config serves it, and the summary line."""
    parts = []
    entries = [e for e in entries if getattr(e, "place", None) != "triton"]  # Triton's own files: no full rounds
    for group in dict.fromkeys(_tuned_alike(e) for e in entries):
        kind, name = group[:2]
        times = grid(e for e in entries if _tuned_alike(e) == group)
        chosen = choose(times, k)
        every = list(dict.fromkeys(c for measured in times.values() for c in measured))
        label = dict(zip(every, html_view.labels(every)[0])) if every else {}
        lines = [f"{kind} {name}: {len(chosen)} of {len(every)} configs measured fully, over {len(times)} keys"]
        lines += [f"  {i + 1}. {label[c]}" for i, c in enumerate(chosen)]
        for key, slow in sorted(slowdowns(times, chosen).items(), key=lambda item: _natural(item[0])):
            by = min((c for c in chosen if c in times[key]), key=lambda c: times[key][c], default=None)
            lines.append(f"  key={key[:80]}  " + (f"+{slow - 1:.1%}  ({label[by]})" if by else "none measured"))
        lines.append("  " + summary(list(slowdowns(times, chosen).values())))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
