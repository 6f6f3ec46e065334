"""The drawn parts of the HTML report: the "why this pick?" box, the bar charts of the candidates
(those measured fully and those a screening round dropped, each on an axis of its own), the
heatmap of the space, and the breakdown of how long each phase of the tuning took.

Each takes a ``View`` (or a record) and returns HTML; plain CSS boxes, no script and no images,
so the page opens anywhere, offline. Kept apart from the page's assembly (``html_report``) so the
layout reads in one place and the drawing in another.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from . import pick_reason
from .html_view import View, esc, fmt_ms, number

COLORS = {"pick": "#1a7f37", "full": "#2f6fdb", "screening": "#b8c4d6"}
NAMES = {"full": "measured fully", "screening": "a screening round's time (not comparable with a full measurement)"}
SHOWN = 40  # the most candidates a chart draws (the fastest; the pick always)
GRID = 16  # the most values a heatmap's axis holds


def verdict(view: View) -> tuple:
    """``(class, short text, sentence)``: the pick against the runner-up of the full measurement,
    and, where the entry recorded it, how the decision between the finalists went
    (``pick_reason``: the one wording of every view)."""
    pick = view.pick
    if pick is None or pick["ms"] is None:
        return "alone", "-", "The pick has no time recorded."
    others = sorted((r for r in view.rows if r["round"] == "full" and not r["pick"]), key=lambda r: r["ms"])
    if not others:
        screened = sorted((r for r in view.rows if r["round"] == "screening"), key=lambda r: r["ms"])
        if screened:
            return "alone", "no other finalist", (
                f"It is the only candidate measured fully: the {len(screened)} others were dropped by a short "
                f"screening round, whose times are not comparable with a full measurement.")
        return "alone", "the only candidate", "It is the only candidate with a time."
    runner, decision = others[0], pick_reason.decision_of(view.record.get("decision"))
    word = pick_reason.word(decision)
    slower = pick_reason.behind(pick["ms"], [runner["ms"]])
    if slower is not None:  # the pick is not the fastest shown: the rounds after the full measurement decided
        kind = "noise" if decision is not None and decision.get("tie") else "alone"
        reason = pick_reason.reason(decision)
        return kind, f"{pick_reason.share(-slower)} (the pick slower here), {word}", (
            f"In the full measurement {runner['label']} took {fmt_ms(runner['ms'])}, the pick "
            f"{fmt_ms(pick['ms'])}" + (f" ({slower:.1%} slower)" if slower < 1e10 else "")
            + f". \x02Not the fastest shown\x03: {reason}.")
    margin = runner["ms"] / pick["ms"] - 1 if pick["ms"] > 0 else math.inf
    text = (f"In the full measurement the runner-up {runner['label']} {pick_reason.rival(margin, '')[1:]} "
            f"({fmt_ms(runner['ms'])} against {fmt_ms(pick['ms'])})")
    if decision is not None and decision.get("rounds"):  # the rounds decided: their margin and noise, labelled
        kind = "noise" if decision.get("tie") else "clear"
        return kind, f"{pick_reason.share(margin)}, {word}", f"{text}. Then the {pick_reason.sentence(decision)}."
    decided = " The full measurement decided." if decision is not None else ""
    spreads = [r["p80"] - r["p20"] for r in (pick, runner) if r["p20"] is not None]
    if len(spreads) == 2:
        noise = max(spreads)
        ratio = f"the margin is {(runner['ms'] - pick['ms']) / noise:.2g}x the wider p20–p80 spread " \
            f"({fmt_ms(noise)})" if noise > 0 else "neither has any spread"
        clear = runner["p20"] > pick["p80"]
        said = (f"the runner-up's p20 ({fmt_ms(runner['p20'])}) is above the pick's p80 ({fmt_ms(pick['p80'])})"
                if clear else f"their p20–p80 ranges overlap (pick {fmt_ms(pick['p20'])}–{fmt_ms(pick['p80'])}, "
                f"runner-up {fmt_ms(runner['p20'])}–{fmt_ms(runner['p80'])})") + f"; {ratio}"
    elif decision is not None:  # one number per candidate: the decision's noise (measured or assumed) judges
        clear = margin > decision.get("noise", 0.0)
        said = pick_reason.noise(decision)
    else:
        return "noise", f"{pick_reason.share(margin)}, noise not recorded", (
            f"{text}; no spread of the runs was recorded, so how much of that margin is noise is unknown.")
    label = "clear of the noise" if clear else "within the noise"
    return ("clear" if clear else "noise"), f"{pick_reason.share(margin)}, {label}", (
        f"{text}. \x02{label[0].upper()}{label[1:]}\x03: {said}." + ("" if clear else " Either would do.") + decided)


def why(view: View) -> str:
    """The "why this pick?" box: the verdict's sentence, coloured by its class."""
    kind, _, sentence = verdict(view)
    pick = view.pick
    head = f"<b>Why this pick?</b> <code>{esc(pick['label'])}</code>: " if pick else "<b>Why this pick?</b> "
    # ``sentence`` marks its verdict with \x02...\x03; everything else in it is text, escaped here.
    text = esc(sentence).replace("\x02", '<span class="verdict">').replace("\x03", "</span>")
    return f"<p class=\"why {kind}\">{head}{text}</p>"


_STEPS = {
    "compiling": re.compile(r"\bcompiled \d+ candidates in (\d+(?:\.\d+)?)s"),
    "screened": re.compile(r"\bscreened \d+ of \d+ candidates in (\d+(?:\.\d+)?)s"),
    # loop.search and loop.measure; a parenthesis may name a plugin, whose name may hold one itself
    "second": re.compile(r"then the best \d+ for \d+ runs(?: \(.*?\))? in (\d+(?:\.\d+)?)s"),
    "measuring": re.compile(r"\bmeasured \d+ finalists(?: \(.*?\))? in (\d+(?:\.\d+)?)s"),
}


def _phases(record: dict) -> Optional[list]:
    """``[(class, label, seconds)]`` of a tuning, from its notes and ``bench_time_s``; None when
    the entry recorded no time."""
    total = number(record.get("bench_time_s"))
    if total is None:
        return None
    notes = [n for n in record.get("notes", []) if isinstance(n, str)][:100] \
        if isinstance(record.get("notes"), list) else []
    found = {name: sum(float(m) for n in notes for m in pattern.findall(n)) for name, pattern in _STEPS.items()}
    seen = {name for name, pattern in _STEPS.items() if any(pattern.search(n) for n in notes)}
    compiling = found["compiling"]
    if "screened" in seen:  # the screening note counts from the start, compiling included
        steps = [("compiling", "compiling", compiling),
                 ("screening", "screening", max(0.0, found["screened"] - compiling)),
                 ("second", "a longer second round", found["second"]),
                 ("measuring", "measuring the finalists fully", found["measuring"])]
    else:
        steps = [("compiling", "compiling", compiling),
                 ("measuring", "measuring every candidate fully", max(0.0, total - compiling))]
    steps = [s for s in steps if s[2] > 0 or s[0] == "measuring"]
    other = total - sum(s[2] for s in steps)
    if other > max(0.01, 0.02 * total):
        steps.append(("other", "the rest (setting up, checks)", other))
    return steps


def timeline(record: dict) -> str:
    """How long the tuning took, as one bar split into its phases; empty when no time was recorded."""
    steps = _phases(record)
    if steps is None:
        return ""
    total = sum(s[2] for s in steps) or 1.0
    taken = number(record.get("bench_time_s")) or 0.0
    bar = "".join(f"<div class=\"phase {cls}\" style=\"width:{100 * sec / total:.2f}%\" title=\"{esc(label)}: "
                  f"{sec:.2f} s\"></div>" for cls, label, sec in steps)
    told = " · ".join(f"<span class=\"step\"><i class=\"swatch {cls}\"></i>{esc(label)} {_seconds(sec)}</span>"
                      for cls, label, sec in steps)
    screened = any(isinstance(c, dict) and c.get("measured") is False and c.get("ms") is not None
                   for c in record.get("candidates", []) if isinstance(record.get("candidates"), list))
    unknown = screened and not isinstance(record.get("notes"), list)  # screened, but no notes of its steps
    return (f"<h3>Tuning took {_seconds(taken)}</h3><div class=\"phases\">{bar}</div><p class=\"meta\">{told}"
            + (" (this entry recorded no breakdown of its steps)" if unknown else "") + "</p>")


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.1f} ms"


def chart(view: View, kind: str) -> str:
    """The candidates of one round, fastest first, on an axis of their own."""
    rows = sorted((r for r in view.rows if r["round"] == kind), key=lambda r: r["ms"])
    hidden = rows[SHOWN:] if not any(r["pick"] for r in rows[SHOWN:]) else []
    rows = rows[:SHOWN] if hidden else rows
    if not rows:
        return "<p>No candidate has a time.</p>" if kind == "full" and not any(
            r["round"] == "screening" for r in view.rows) else ""
    top = _nice(max(max(r["ms"], r["p80"] or 0.0) for r in rows))
    pick = next((r for r in rows if r["pick"]), None)
    fastest = pick is not None and pick_reason.behind(pick["ms"], [r["ms"] for r in rows if not r["pick"]]) is None
    title = ("Measured fully" + ((" (the pick is the fastest of these)" if fastest else
                                  " (the pick is not the fastest of these: see why above)") if pick else "")
             if kind == "full" else "Screened out: timed by screening rounds only, on an axis of their own (not "
             "comparable with the full measurements above)")
    cells = []
    for r in rows:
        cls = "pick" if r["pick"] else kind
        width = max(0.3, 100 * (r["ms"] / top))  # divided first: a time near the float's limit stays finite
        spread = ""
        if r["p20"] is not None:
            spread = (f"<div class=\"spread\" style=\"left:{100 * (r['p20'] / top):.2f}%;"
                      f"width:{max(0.2, 100 * ((r['p80'] - r['p20']) / top)):.2f}%\"></div>")
        told = f"{fmt_ms(r['ms'])}" + (f" <small>(p20–p80 {r['p20']:.4g}–{r['p80']:.4g})</small>"
                                        if r["p20"] is not None else "")
        cells.append(f"<div class=\"label\">{esc(r['label'])}</div>"
                     f"<div class=\"track candidate {cls}\" data-ms=\"{r['ms']!r}\" title=\"{esc(r['config'])}: "
                     f"{fmt_ms(r['ms'])}, {esc(NAMES[kind])}\"><div class=\"bar\" style=\"width:{width:.2f}%;"
                     f"background:{COLORS[cls]}\"></div>{spread}</div><div class=\"value\">{told}"
                     + (" <b>pick</b>" if r["pick"] else "") + "</div>")
    ticks = "".join(f"<span class=\"tick{' first' if i == 0 else ' last' if i == 4 else ''}\" "
                    f"style=\"left:{25 * i}%\">{top * i / 4:.4g}</span>" for i in range(5))
    cells.append(f"<div></div><div class=\"axis\" data-max=\"{top!r}\">{ticks}</div><div class=\"value\">ms</div>")
    # One label column for both charts of an entry, as wide as its longest label (up to 40 characters).
    width = min(40, max((len(r["label"]) for r in view.rows), default=8) + 1)
    more = (f"<p class=\"meta\">and {len(hidden)} slower ones, up to {fmt_ms(hidden[-1]['ms'])} "
            "(<code>triton-dist-tune show</code> lists them all)</p>") if hidden else ""
    return (f"<h3>{esc(title)}</h3><div class=\"chart {kind}\" style=\"--label:{width}ch\">"
            f"{''.join(cells)}</div>{more}")


def _nice(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value`` (``value`` itself
    at the ends of what a float holds: a stored time may be any finite number)."""
    if not value > 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value)) if 1e-300 < value < 1e300 else 0.0
    return next((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-9)), value) if power else value


def _log(ms: float) -> float:
    return math.log(max(ms, 5e-324))


def _order(values: set) -> list:
    def key(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)
    return sorted(values, key=key)


def heatmap(view: View) -> str:
    """The candidates on a grid of the two tuned parameters with the most values, coloured by
    time (log scale, green fastest); with more parameters varying, each cell its fastest."""
    if view.grid is None:
        return ""
    parsed, varying = view.grid
    axes = sorted((k for k in varying if 2 <= len({p.get(k) for p in parsed}) <= GRID),
                  key=lambda k: -len({p.get(k) for p in parsed}))[:2]
    if len(axes) < 2:
        return ""
    x, y = axes
    xs, ys = _order({p.get(x) for p in parsed} - {None}), _order({p.get(y) for p in parsed} - {None})
    cells: dict = {}
    for p, row in zip(parsed, view.rows):
        cells.setdefault((p.get(x), p.get(y)), []).append(row)
    timed = [r["ms"] for r in view.rows if r["ms"] is not None and r["ms"] > 0]
    if not timed:
        return ""
    low, high = _log(min(timed)), _log(max(timed))
    rest = [k for k in varying if k not in axes]
    body = []
    for yv in ys:
        tds = []
        for xv in xs:
            here = cells.get((xv, yv), [])
            best = min((r for r in here if r["ms"] is not None), key=lambda r: (not r["pick"], r["ms"]), default=None)
            if best is None:
                text = "failed" if here else "not a candidate"
                tds.append(f"<td class=\"empty\" title=\"{esc(text)}\">{'&times;' if here else '&middot;'}</td>")
                continue
            t = 0.0 if high == low else (_log(best["ms"]) - low) / (high - low)
            cls = ("pick " if best["pick"] else "") + best["round"]
            tds.append(f"<td class=\"{cls}\" style=\"background:hsl({120 * (1 - t):.0f},62%,{78 - 10 * t:.0f}%)\" "
                       f"title=\"{esc(best['config'])}: {fmt_ms(best['ms'])}, {esc(NAMES[best['round']])}\">"
                       f"{best['ms']:.4g}{' &#9733;' if best['pick'] else ''}</td>")
        body.append(f"<tr><th>{esc(y)}={esc(yv)}</th>{''.join(tds)}</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{esc(x)}={esc(xv)}</th>" for xv in xs) + "</tr>"
    note = f"; each cell is its fastest over {', '.join(rest)}" if rest else ""
    return (f"<h3>The space: {esc(x)} &times; {esc(y)}</h3><table class=\"heatmap\">{head}{''.join(body)}</table>"
            f"<p class=\"meta\">ms, green fastest (log scale); &#9733; the pick; upright: measured fully, "
            f"<i>italic: a screening round's time</i>; &times; failed{esc(note)}</p>")
