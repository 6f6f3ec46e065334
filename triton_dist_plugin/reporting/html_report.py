"""``triton-dist-tune report -o report.html``: one self-contained page of what was tuned.

For each kernel or function and key, the page answers "why this pick?": the pick's full
measurement against the runner-up's, with the noise (each one's p20-p80 spread); the candidates
measured fully and those a screening round dropped, each on its own axis (a screening round's
time is not comparable with a full measurement); the candidates on a grid of two tuned
parameters (a heatmap) where the space has one; how long compiling, screening and measuring
took, from the tuning's notes; where the pick came from; failures with their reasons, the timing
method and the hardware. Entries of the same name and key are told apart by their source's digest
(another version of the code), or said to hold the same code tuned over other candidates or
settings. No script, no network: the page opens anywhere, offline.

This module assembles the page (its style, the summary table and each entry's section);
``html_view`` reads each entry once, and ``html_charts`` draws the charts, the heatmap, the
"why this pick?" box and the phases.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Optional

from .html_charts import COLORS, chart, heatmap, timeline, verdict, why
from .html_view import View, esc, fmt_ms

IMPORTED_AFTER_S = 60  # a file written this much later than the tuning it holds was brought here

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
    """The page for ``entries`` (``cli.entries.Entry`` objects)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    legend = "".join(f'<span><i class="swatch" style="background:{COLORS[k]}"></i>{text}</span>' for k, text in (
        ("pick", "the pick (measured fully)"), ("full", "measured fully"),
        ("screening", "dropped after a short screening round"))) + \
        '<span>&#9500;&#9472;&#9508; p20&ndash;p80 of the candidate\'s runs</span>'
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>"
             f"<p class=\"meta\">{len(entries)} {'entry' if len(entries) == 1 else 'entries'}, written {stamp}</p>"
             f"<p class=\"legend\">{legend}</p>"]
    if not entries:
        parts.append("<p>Nothing tuned yet.</p>")
    views = [View(entry, i) for i, entry in enumerate(entries)]
    groups: dict = {}
    for view in views:
        groups.setdefault((view.entry.kind, view.entry.name, view.entry.key), []).append(view)
    if views:
        parts.append(_summary(views))
    for view in views:
        parts.append(_section(view, groups[(view.entry.kind, view.entry.name, view.entry.key)]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _summary(views: list) -> str:
    rows = []
    for v in views:
        pick = v.pick
        rows.append(f"<tr><td><a href=\"#{v.anchor}\">{esc(v.entry.kind)} {esc(v.entry.name)}</a>"
                    + (f" <small>source {esc(v.source[:10])}</small>" if v.source else "")
                    + f"</td><td>{esc(v.entry.key)}</td><td><code>{esc(pick['label'] if pick else v.entry.pick)}</code>"
                    f"</td><td>{fmt_ms(pick['ms']) if pick and pick['ms'] is not None else '-'}</td>"
                    f"<td>{esc(_rounds(v.rows))}</td><td>{esc(verdict(v)[1])}</td><td>{esc(_origin(v)[0])}</td></tr>")
    return ("<table class=\"summary\"><tr><th>entry</th><th>key</th><th>pick</th><th>pick's time</th>"
            "<th>timed</th><th>margin to the runner-up</th><th>from</th></tr>" + "".join(rows) + "</table>")


def _rounds(rows: list) -> str:
    counts = {k: sum(r["round"] == k for r in rows) for k in ("full", "screening", "skipped", "-")}
    return " + ".join([f"{counts['full']} measured fully"] + [f"{n} {what}" for what, n in (
        ("screened out", counts["screening"]), ("left out by the search", counts["skipped"]),
        ("failed", counts["-"])) if n])


def _section(view: View, group: list) -> str:
    entry, record = view.entry, view.record
    hw = record.get("hardware") if isinstance(record.get("hardware"), dict) else {}
    facts = []
    if view.source:
        facts.append(f"source <code class=\"source\">{esc(view.source[:16])}</code>")
    if isinstance(record.get("timer"), str):  # a plugin's timer (or the kernel's own do_bench) timed, not the method
        facts.append(f"timed by {esc(record['timer'])}")
    elif record.get("method"):
        facts.append(f"timing: {esc(record['method'])}")
    if hw:
        facts.append(f"on {esc(hw.get('name', '?'))} ({esc(hw.get('device', '?'))}"
                     + (f", {esc(hw['world_size'])} ranks" if hw.get("world_size", 1) != 1 else "") + ")")
    facts.append(f"when {esc(str(entry.when)[:19])} UTC")
    same = ""
    if len(group) > 1:
        others = [v for v in group if v is not view]
        told = ", ".join(f"<a href=\"#{v.anchor}\">source {esc((v.source or 'unknown')[:16])}</a> ("
                         + ("another version of the code" if v.source != view.source else
                            "the same code, tuned over other candidates or with other settings") + ")" for v in others)
        same = (f"<p class=\"same\">{len(group)} entries share this name and key: this one is source "
                f"{esc((view.source or 'unknown')[:16])}; the others: {told}.</p>")
    origin = _origin(view)
    failures = [r for r in view.rows if r["round"] == "-"]
    table = ""
    if failures:
        table = ("<h3>Failed</h3><table class=\"failures\">" + "".join(
            f"<tr><td><code>{esc(r['label'])}</code></td><td>{esc(r['failure'] or 'failed')}</td></tr>"
            for r in failures) + "</table>")
    notes = _notes(record)
    return (f"<section class=\"entry\" id=\"{view.anchor}\" data-kind=\"{esc(entry.kind)}\" "
            f"data-source=\"{esc(view.source or '')}\"><h2>{esc(entry.kind)} {esc(entry.name)}"
            f" &nbsp;<small>key {esc(entry.key)}</small></h2><p class=\"meta\">{' · '.join(facts)}</p>{same}"
            f"{why(view)}<p class=\"origin\"><b>From:</b> {esc(origin[1])}</p>{_judged(record)}{timeline(record)}"
            + (f"<p class=\"common\">every candidate: {esc(view.common)}</p>" if view.common else "")
            + chart(view, "full") + chart(view, "screening") + heatmap(view) + table
            + (f"<details class=\"notes\"><summary>tuning notes</summary><ul>{notes}</ul></details>" if notes else "")
            + f"<p class=\"meta\">file: {esc(entry.path)}</p></section>")


def _judged(record: dict) -> str:
    """How the cost model did (its recall: was the best screened among those it kept?); it comes
    from a file: shown only with the types written. (How the pick was decided among the finalists is
    the "why this pick?" box's, ``html_charts.verdict``: one margin and one noise per measurement.)"""
    parts = []
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    if all(isinstance(model.get(k), int) for k in ("kept", "of", "screened")):
        rho = model.get("rho") if isinstance(model.get("rho"), (int, float)) else "n/a"
        if model.get("trusted") is True:
            kept = ("the best screened was among them" if model.get("recall") is True else
                    "the best screened was not among them (a miss: the climb found it)")
            parts.append(("Cost model", f"kept {model['kept']} of {model['of']} candidates, {model['screened']} "
                                        f"screened in all; {kept} (rank correlation of its predicted and measured "
                                        f"times: {rho})"))
        else:
            parts.append(("Cost model", f"its ranking did not match the times of the {model['kept']} it kept (rank "
                                        f"correlation {rho}), so the search went on without it"))
    return "".join(f"<p class=\"origin\"><b>{label}:</b> {esc(text)}</p>" for label, text in parts)


def _origin(view: View) -> tuple:
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


def _notes(record: dict) -> str:
    notes = record.get("notes")
    if not isinstance(notes, list):
        return ""
    return "".join(f"<li>{esc(str(n)[:1000])}</li>" for n in notes[:100] if isinstance(n, str))
