"""``triton-dist-tune report -o report.html``: one self-contained page of what was tuned.

For each kernel or function and key, the page answers "why this pick?": the pick's full
measurement against the runner-up's, with the noise (each one's p20-p80 spread); the candidates
measured fully and those a screening round dropped, each on its own axis (a screening round's
time is not comparable with a full measurement); the candidates on a grid of two tuned
parameters (a heatmap) where the space has one; how long compiling, screening and measuring
took, from the tuning's notes; where the pick came from; failures with their reasons, the timing
method and the hardware. Entries of the same name and key tuned from different sources are told
apart by their source's digest. No script, no network: the page opens anywhere, offline.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
import os
import re
from typing import Any, Optional

COLORS = {"pick": "#1a7f37", "full": "#2f6fdb", "screening": "#b8c4d6"}
NAMES = {"full": "measured fully", "screening": "a screening round's time (not comparable with a full measurement)"}
IMPORTED_AFTER_S = 60  # a file written this much later than the tuning it holds was brought here
SHOWN = 40  # the most candidates a chart draws (the fastest; the pick always)
GRID = 16  # the most values a heatmap's axis holds

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1120px; padding: 0 16px; color: #1f2328; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin: 0 0 4px; overflow-wrap: anywhere; }
h3 { font-size: 14px; margin: 14px 0 4px; }
section.entry { border-top: 2px solid #d0d7de; margin-top: 28px; padding-top: 12px; }
.meta { color: #57606a; margin: 0 0 6px; overflow-wrap: anywhere; } .legend span { margin-right: 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
.why { background: #f6f8fa; border-left: 4px solid #1a7f37; padding: 8px 12px; margin: 8px 0; }
.why.noise { border-left-color: #bf8700; } .why.alone { border-left-color: #8c959f; }
.verdict { font-weight: 600; }
.same { background: #fff8c5; border: 1px solid #d4a72c; padding: 4px 8px; margin: 6px 0; }
.chart { display: grid; grid-template-columns: var(--label, 12ch) minmax(240px, 1fr) max-content;
         column-gap: 10px; row-gap: 4px; align-items: center; max-width: 100%;
         font-family: ui-monospace, monospace; font-size: 12px; }
.chart .label { overflow-wrap: anywhere; text-align: right; }
.chart .track { position: relative; height: 18px; background: #f6f8fa; }
.chart .bar { position: absolute; left: 0; top: 2px; height: 14px; }
.chart .spread { position: absolute; top: 8px; height: 2px; background: #1f2328; }
.chart .spread::before, .chart .spread::after { content: ""; position: absolute; top: -4px; width: 1px; height: 10px;
                                                background: #1f2328; }
.chart .spread::before { left: 0; } .chart .spread::after { right: 0; }
.chart .value { font: 12px system-ui, sans-serif; font-variant-numeric: tabular-nums; white-space: nowrap; }
.chart .axis { position: relative; height: 16px; font: 11px system-ui, sans-serif; color: #57606a;
               border-top: 1px solid #8c959f; }
.chart .tick { position: absolute; top: 1px; transform: translateX(-50%); white-space: nowrap; }
.chart .tick.first { transform: none; } .chart .tick.last { transform: translateX(-100%); }
.common { font-family: ui-monospace, monospace; font-size: 12px; color: #57606a; overflow-wrap: anywhere; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; text-align: left; vertical-align: top; }
table.summary td, table.summary th { border-bottom: 1px solid #d8dee4; overflow-wrap: break-word; }
table.failures td { color: #cf222e; overflow-wrap: break-word; }
table.heatmap td, table.heatmap th { text-align: center; font-variant-numeric: tabular-nums; }
table.heatmap td { min-width: 5.5em; height: 32px; border: 1px solid #fff; font-size: 12px; }
table.heatmap td.pick { outline: 3px solid #1f2328; outline-offset: -3px; font-weight: 700; }
table.heatmap td.screening { font-style: italic; } table.heatmap td.empty { background: #f6f8fa; color: #8c959f; }
.phases { display: flex; height: 20px; max-width: 720px; border: 1px solid #d0d7de; }
.phase { height: 100%; min-width: 2px; }
.compiling { background: #8250df; } .phase.screening, .swatch.screening { background: #b8c4d6; }
.second { background: #7d9cd6; } .measuring { background: #2f6fdb; } .other { background: #d0d7de; }
.step { white-space: nowrap; }
.notes { color: #57606a; font-size: 12px; }
"""


def render(entries: list, title: str = "triton-dist-plugin: what was tuned") -> str:
    """The page for ``entries`` (``cli.Entry`` objects)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    legend = "".join(f'<span><i class="swatch" style="background:{COLORS[k]}"></i>{text}</span>' for k, text in (
        ("pick", "the pick (measured fully)"), ("full", "measured fully"),
        ("screening", "dropped after a short screening round"))) + \
        '<span>&#9500;&#9472;&#9508; p20&ndash;p80 of the candidate\'s runs</span>'
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>"
             f"<p class=\"meta\">{len(entries)} {'entry' if len(entries) == 1 else 'entries'}, written {stamp}</p>"
             f"<p class=\"legend\">{legend}</p>"]
    if not entries:
        parts.append("<p>Nothing tuned yet.</p>")
    views = [_View(entry, i) for i, entry in enumerate(entries)]
    groups: dict = {}
    for view in views:
        groups.setdefault((view.entry.kind, view.entry.name, view.entry.key), []).append(view)
    if views:
        parts.append(_summary(views))
    for view in views:
        parts.append(_section(view, groups[(view.entry.kind, view.entry.name, view.entry.key)]))
    parts.append("</body></html>")
    return "\n".join(parts)


class _View:
    """One entry, read once: its candidates with their rounds and spreads, labels and facts."""

    def __init__(self, entry: Any, index: int):
        self.entry, self.anchor = entry, f"entry-{index}"
        record = entry.restore.get("record") if isinstance(getattr(entry, "restore", None), dict) else None
        self.record = record if isinstance(record, dict) else {}
        self.rows = _rows(entry, self.record)
        self.labels, self.common, self.grid = _labels([r["config"] for r in self.rows])
        for row, label in zip(self.rows, self.labels):
            row["label"] = label.replace("\x02", "").replace("\x03", "")  # the verdict's markers (``_why``)
        self.pick = next((r for r in self.rows if r["pick"]), None)
        source = self.record.get("source")
        self.source = source if isinstance(source, str) else None


def _rows(entry: Any, record: dict) -> list:
    """Every candidate: its config, p50 (``ms``), p20 and p80 where recorded, ``round`` (``full``,
    ``screening``, or ``-`` for a failure), failure and whether it is the pick."""
    stored = record.get("candidates") if isinstance(record.get("candidates"), list) else []
    rows = []
    for i, c in enumerate(entry.candidates):
        s = stored[i] if i < len(stored) and isinstance(stored[i], dict) and stored[i].get("config") == c.get(
            "config") else {}
        timing = (s.get("timing", s.get("ms")) if s else c.get("timing"))
        ms = _number(c.get("ms"))
        low, high = _spread(timing, ms)
        rows.append({"config": str(c.get("config")), "ms": ms, "p20": low, "p80": high,
                     "round": "-" if ms is None else "full" if c.get("measured", True) is not False else "screening",
                     "failure": c.get("failure"), "pick": c.get("config") == entry.pick})
    return rows


def _number(value: Any) -> Optional[float]:
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
    low, high = _number(timing[1]), _number(timing[2])
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


def _labels(configs: list) -> tuple:
    """``(labels, common, grid)``: each candidate by the parameters that differ between them, the
    parameters all share (written once), and ``(parsed, varying)`` for the heatmap (None when the
    descriptions could not be read as parameters)."""
    parsed = [_params(c) for c in configs]
    if not configs or any(p is None for p in parsed):
        return [_bare(c) for c in configs], "", None
    names = list(dict.fromkeys(k for p in parsed for k in p))
    varying = [k for k in names if len({p.get(k) for p in parsed}) > 1]
    common = ", ".join(f"{k}={parsed[0][k]}" for k in names if k not in varying)
    labels = [", ".join(f"{k}={p[k]}" for k in varying if k in p) or _bare(c) for p, c in zip(parsed, configs)]
    return labels, common, (parsed, varying)


def _bare(text: str) -> str:
    return text[len("Config("):-1] if text.startswith("Config(") and text.endswith(")") else text


# -- the page's parts ------------------------------------------------------------------------------

def _summary(views: list) -> str:
    rows = []
    for v in views:
        pick = v.pick
        rows.append(f"<tr><td><a href=\"#{v.anchor}\">{_e(v.entry.kind)} {_e(v.entry.name)}</a>"
                    + (f" <small>source {_e(v.source[:10])}</small>" if v.source else "")
                    + f"</td><td>{_e(v.entry.key)}</td><td><code>{_e(pick['label'] if pick else v.entry.pick)}</code>"
                    f"</td><td>{_ms(pick['ms']) if pick and pick['ms'] is not None else '-'}</td>"
                    f"<td>{_e(_rounds(v.rows))}</td><td>{_e(_verdict(v)[1])}</td><td>{_e(_origin(v)[0])}</td></tr>")
    return ("<table class=\"summary\"><tr><th>entry</th><th>key</th><th>pick</th><th>pick's time</th>"
            "<th>timed</th><th>margin to the runner-up</th><th>from</th></tr>" + "".join(rows) + "</table>")


def _rounds(rows: list) -> str:
    counts = {k: sum(r["round"] == k for r in rows) for k in ("full", "screening", "-")}
    return " + ".join([f"{counts['full']} measured fully"] + [f"{n} {what}" for what, n in (
        ("screened out", counts["screening"]), ("failed", counts["-"])) if n])


def _section(view: _View, group: list) -> str:
    entry, record = view.entry, view.record
    hw = record.get("hardware") if isinstance(record.get("hardware"), dict) else {}
    facts = []
    if view.source:
        facts.append(f"source <code class=\"source\">{_e(view.source[:16])}</code>")
    if record.get("method"):
        facts.append(f"timing: {_e(record['method'])}")
    if hw:
        facts.append(f"on {_e(hw.get('name', '?'))} ({_e(hw.get('device', '?'))}"
                     + (f", {_e(hw['world_size'])} ranks" if hw.get("world_size", 1) != 1 else "") + ")")
    facts.append(f"when {_e(str(entry.when)[:19])} UTC")
    same = ""
    if len(group) > 1:
        others = [v for v in group if v is not view]
        told = ", ".join(f"<a href=\"#{v.anchor}\">source {_e((v.source or 'unknown')[:16])}</a>" for v in others)
        same = (f"<p class=\"same\">{len(group)} entries share this name and key, tuned from different sources "
                f"(another version of the code): this one is source {_e((view.source or 'unknown')[:16])}; "
                f"the others: {told}.</p>")
    origin = _origin(view)
    failures = [r for r in view.rows if r["round"] == "-"]
    table = ""
    if failures:
        table = ("<h3>Failed</h3><table class=\"failures\">" + "".join(
            f"<tr><td><code>{_e(r['label'])}</code></td><td>{_e(r['failure'] or 'failed')}</td></tr>" for r in failures)
            + "</table>")
    notes = _notes(record)
    return (f"<section class=\"entry\" id=\"{view.anchor}\" data-kind=\"{_e(entry.kind)}\" "
            f"data-source=\"{_e(view.source or '')}\"><h2>{_e(entry.kind)} {_e(entry.name)}"
            f" &nbsp;<small>key {_e(entry.key)}</small></h2><p class=\"meta\">{' · '.join(facts)}</p>{same}"
            f"{_why(view)}<p class=\"origin\"><b>From:</b> {_e(origin[1])}</p>{_timeline(record)}"
            + (f"<p class=\"common\">every candidate: {_e(view.common)}</p>" if view.common else "")
            + _chart(view, "full") + _chart(view, "screening") + _heatmap(view) + table
            + (f"<details class=\"notes\"><summary>tuning notes</summary><ul>{notes}</ul></details>" if notes else "")
            + f"<p class=\"meta\">file: {_e(entry.path)}</p></section>")


def _verdict(view: _View) -> tuple:
    """``(class, short text, sentence)``: the pick's margin to the runner-up against the noise."""
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
    runner = others[0]
    margin = runner["ms"] - pick["ms"]
    text = (f"the runner-up {runner['label']} took {_ms(margin)} ({margin / pick['ms']:.0%}) longer "
            f"({_ms(runner['ms'])} against {_ms(pick['ms'])})")
    spreads = [r["p80"] - r["p20"] for r in (pick, runner) if r["p20"] is not None]
    if len(spreads) < 2:
        return "noise", f"+{margin / pick['ms']:.0%}, noise not recorded", f"{text[0].upper()}{text[1:]}; no " \
            "spread of the runs was recorded, so how much of that margin is noise is unknown."
    noise = max(spreads)
    ratio = f"the margin is {margin / noise:.2g}x the wider p20–p80 spread ({_ms(noise)})" if noise > 0 else \
        "neither has any spread"
    if runner["p20"] > pick["p80"]:
        return "clear", f"+{margin / pick['ms']:.0%}, clear of the noise", (
            f"{text[0].upper()}{text[1:]}. \x02Clear of the noise\x03: the runner-up's p20 "
            f"({_ms(runner['p20'])}) is above the pick's p80 ({_ms(pick['p80'])}); {ratio}.")
    return "noise", f"+{margin / pick['ms']:.0%}, within the noise", (
        f"{text[0].upper()}{text[1:]}. \x02Within the noise\x03: their p20–p80 ranges overlap "
        f"(pick {_ms(pick['p20'])}–{_ms(pick['p80'])}, runner-up {_ms(runner['p20'])}–{_ms(runner['p80'])}); "
        f"{ratio}. Either would do.")


def _why(view: _View) -> str:
    kind, _, sentence = _verdict(view)
    pick = view.pick
    head = f"<b>Why this pick?</b> <code>{_e(pick['label'])}</code>: " if pick else "<b>Why this pick?</b> "
    # ``sentence`` marks its verdict with \x02...\x03; everything else in it is text, escaped here.
    text = _e(sentence).replace("\x02", '<span class="verdict">').replace("\x03", "</span>")
    return f"<p class=\"why {kind}\">{head}{text}</p>"


def _origin(view: _View) -> tuple:
    """``(short, sentence)``: where the entry's pick came from."""
    entry, record = view.entry, view.record
    if not record:
        return ("Triton's cache", "Triton's own cache file, written by @triton.autotune(cache_results=True) or "
                "TRITON_CACHE_AUTOTUNING=1: Triton measured every candidate fully and keeps no pick, so the pick "
                "shown is its fastest.")
    tuned = _when(record.get("timestamp"))
    try:
        written = os.stat(entry.path).st_mtime
    except (OSError, ValueError, TypeError):
        written = None
    took = record.get("bench_time_s")
    how = f", in {took:.2f} s" if isinstance(took, (int, float)) and not isinstance(took, bool) else ""
    if tuned is not None and written is not None and written - tuned > IMPORTED_AFTER_S:
        return ("imported", f"imported: tuned {str(entry.when)[:19]} UTC{how}, and written to this cache "
                f"{_duration(written - tuned)} later, by `triton-dist-tune import`, TRITON_DIST_AUTOTUNE_MANIFEST or "
                "a copy; its times are from the machine that tuned it (same hardware and versions, or import "
                "skips it).")
    return ("tuned here", f"tuned here: a process on this machine (or one sharing this directory) tuned it "
            f"{str(entry.when)[:19]} UTC{how} and stored it in the file store; later processes read it from "
            "there (or from a cache store holding the same record) and time nothing.")


def _when(text: Any) -> Optional[float]:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


_STEPS = {
    "compiling": re.compile(r"\bcompiled \d+ candidates in ([\d.]+)s"),
    "screened": re.compile(r"\bscreened \d+ of \d+ candidates in ([\d.]+)s"),
    "second": re.compile(r"then the best \d+ for \d+ runs in ([\d.]+)s"),
    "measuring": re.compile(r"\bmeasured \d+ finalists in ([\d.]+)s"),
}


def _phases(record: dict) -> Optional[list]:
    """``[(class, label, seconds)]`` of a tuning, from its notes and ``bench_time_s``; None when
    the entry recorded no time."""
    total = _number(record.get("bench_time_s"))
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


def _timeline(record: dict) -> str:
    steps = _phases(record)
    if steps is None:
        return ""
    total = sum(s[2] for s in steps) or 1.0
    taken = _number(record.get("bench_time_s")) or 0.0
    bar = "".join(f"<div class=\"phase {cls}\" style=\"width:{100 * sec / total:.2f}%\" title=\"{_e(label)}: "
                  f"{sec:.2f} s\"></div>" for cls, label, sec in steps)
    told = " · ".join(f"<span class=\"step\"><i class=\"swatch {cls}\"></i>{_e(label)} {_seconds(sec)}</span>"
                      for cls, label, sec in steps)
    screened = any(isinstance(c, dict) and c.get("measured") is False and c.get("ms") is not None
                   for c in record.get("candidates", []) if isinstance(record.get("candidates"), list))
    unknown = screened and not isinstance(record.get("notes"), list)  # screened, but no notes of its steps
    return (f"<h3>Tuning took {_seconds(taken)}</h3><div class=\"phases\">{bar}</div><p class=\"meta\">{told}"
            + (" (this entry recorded no breakdown of its steps)" if unknown else "") + "</p>")


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.1f} ms"


def _chart(view: _View, kind: str) -> str:
    """The candidates of one round, fastest first, on an axis of their own."""
    rows = sorted((r for r in view.rows if r["round"] == kind), key=lambda r: r["ms"])
    hidden = rows[SHOWN:] if not any(r["pick"] for r in rows[SHOWN:]) else []
    rows = rows[:SHOWN] if hidden else rows
    if not rows:
        return "<p>No candidate has a time.</p>" if kind == "full" and not any(
            r["round"] == "screening" for r in view.rows) else ""
    top = _nice(max(max(r["ms"], r["p80"] or 0.0) for r in rows))
    title = ("Measured fully" + (" (the pick is the fastest of these)" if any(r["pick"] for r in rows) else "")
             if kind == "full" else "Screened out: timed by screening rounds only, on an axis of their own (not "
             "comparable with the full measurements above)")
    cells = []
    for r in rows:
        cls = "pick" if r["pick"] else kind
        width = max(0.3, 100 * r["ms"] / top)
        spread = ""
        if r["p20"] is not None:
            spread = (f"<div class=\"spread\" style=\"left:{100 * r['p20'] / top:.2f}%;"
                      f"width:{max(0.2, 100 * (r['p80'] - r['p20']) / top):.2f}%\"></div>")
        told = f"{_ms(r['ms'])}" + (f" <small>(p20–p80 {r['p20']:.4g}–{r['p80']:.4g})</small>"
                                     if r["p20"] is not None else "")
        cells.append(f"<div class=\"label\">{_e(r['label'])}</div>"
                     f"<div class=\"track candidate {cls}\" data-ms=\"{r['ms']!r}\" title=\"{_e(r['config'])}: "
                     f"{_ms(r['ms'])}, {_e(NAMES[kind])}\"><div class=\"bar\" style=\"width:{width:.2f}%;"
                     f"background:{COLORS[cls]}\"></div>{spread}</div><div class=\"value\">{told}"
                     + (" <b>pick</b>" if r["pick"] else "") + "</div>")
    ticks = "".join(f"<span class=\"tick{' first' if i == 0 else ' last' if i == 4 else ''}\" "
                    f"style=\"left:{25 * i}%\">{top * i / 4:.4g}</span>" for i in range(5))
    cells.append(f"<div></div><div class=\"axis\" data-max=\"{top!r}\">{ticks}</div><div class=\"value\">ms</div>")
    # One label column for both charts of an entry, as wide as its longest label (up to 40 characters).
    width = min(40, max((len(r["label"]) for r in view.rows), default=8) + 1)
    more = (f"<p class=\"meta\">and {len(hidden)} slower ones, up to {_ms(hidden[-1]['ms'])} "
            "(<code>triton-dist-tune show</code> lists them all)</p>") if hidden else ""
    return (f"<h3>{_e(title)}</h3><div class=\"chart {kind}\" style=\"--label:{width}ch\">"
            f"{''.join(cells)}</div>{more}")


def _nice(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-9))


def _order(values: set) -> list:
    def key(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)
    return sorted(values, key=key)


def _heatmap(view: _View) -> str:
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
    low, high = math.log(min(timed)), math.log(max(timed))
    rest = [k for k in varying if k not in axes]
    body = []
    for yv in ys:
        tds = []
        for xv in xs:
            here = cells.get((xv, yv), [])
            best = min((r for r in here if r["ms"] is not None), key=lambda r: (not r["pick"], r["ms"]), default=None)
            if best is None:
                text = "failed" if here else "not a candidate"
                tds.append(f"<td class=\"empty\" title=\"{_e(text)}\">{'&times;' if here else '&middot;'}</td>")
                continue
            t = 0.0 if high == low else (math.log(best["ms"]) - low) / (high - low)
            cls = ("pick " if best["pick"] else "") + best["round"]
            tds.append(f"<td class=\"{cls}\" style=\"background:hsl({120 * (1 - t):.0f},62%,{78 - 10 * t:.0f}%)\" "
                       f"title=\"{_e(best['config'])}: {_ms(best['ms'])}, {_e(NAMES[best['round']])}\">"
                       f"{best['ms']:.4g}{' &#9733;' if best['pick'] else ''}</td>")
        body.append(f"<tr><th>{_e(y)}={_e(yv)}</th>{''.join(tds)}</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{_e(x)}={_e(xv)}</th>" for xv in xs) + "</tr>"
    note = f"; each cell is its fastest over {', '.join(rest)}" if rest else ""
    return (f"<h3>The space: {_e(x)} &times; {_e(y)}</h3><table class=\"heatmap\">{head}{''.join(body)}</table>"
            f"<p class=\"meta\">ms, green fastest (log scale); &#9733; the pick; upright: measured fully, "
            f"<i>italic: a screening round's time</i>; &times; failed{_e(note)}</p>")


def _notes(record: dict) -> str:
    notes = record.get("notes")
    if not isinstance(notes, list):
        return ""
    return "".join(f"<li>{_e(str(n)[:1000])}</li>" for n in notes[:100] if isinstance(n, str))


def _ms(value: float) -> str:
    return f"{value:.4f} ms"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
