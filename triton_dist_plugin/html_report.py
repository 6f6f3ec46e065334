"""``triton-dist-tune report -o report.html``: one self-contained page of what was tuned.

For each kernel or function and key: a bar chart (inline SVG) of every candidate's time, the
candidates measured fully told apart from those a screening round dropped, the pick, failures
with their reasons, the tuning time, the timing method and the hardware. No script, no network:
the page opens anywhere, offline.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from typing import Any

WIDTH, BAR, GAP, LABEL = 900, 18, 6, 380  # chart geometry, in pixels
COLORS = {"pick": "#1a7f37", "measured": "#2f6fdb", "screened": "#b8c4d6"}

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin: 28px 0 4px; }
.meta { color: #57606a; margin: 0 0 8px; } .legend span { margin-right: 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
table.failures { border-collapse: collapse; margin-top: 6px; } .failures td { padding: 2px 8px; color: #cf222e; }
svg text { font: 12px system-ui, sans-serif; }
"""


def render(entries: list, title: str = "triton-dist-plugin: what was tuned") -> str:
    """The page for ``entries`` (``cli.Entry`` objects)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    legend = "".join(f'<span><i class="swatch" style="background:{COLORS[k]}"></i>{text}</span>' for k, text in (
        ("pick", "the pick"), ("measured", "measured fully"), ("screened", "dropped after a short screening round")))
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>"
             f"<p class=\"meta\">{len(entries)} entries, written {stamp}</p><p class=\"legend\">{legend}</p>"]
    if not entries:
        parts.append("<p>Nothing tuned yet.</p>")
    for entry in entries:
        parts.append(_section(entry))
    parts.append("</body></html>")
    return "\n".join(parts)


def _section(entry: Any) -> str:
    record = entry.restore.get("record") or {}
    hw = record.get("hardware") if isinstance(record.get("hardware"), dict) else {}
    facts = [f"pick <b>{_e(entry.pick)}</b>"]
    if isinstance(record.get("bench_time_s"), (int, float)):
        facts.append(f"tuned in {record['bench_time_s']:.2f} s")
    if record.get("method"):
        facts.append(f"timing: {_e(record['method'])}")
    if hw:
        facts.append(f"on {_e(hw.get('name', '?'))} ({_e(hw.get('device', '?'))}"
                     + (f", {hw['world_size']} ranks" if hw.get("world_size", 1) != 1 else "") + ")")
    facts.append(f"when {_e(entry.when[:19])}")
    failures = [c for c in entry.candidates if c.get("ms") is None]
    rows = "".join(f"<tr><td>{_e(c['config'])}</td><td>{_e(c.get('failure') or 'failed')}</td></tr>"
                   for c in failures)
    table = f"<table class=\"failures\"><tr><td colspan=2><b>failed</b></td></tr>{rows}</table>" if rows else ""
    return (f"<section class=\"entry\" data-kind=\"{_e(entry.kind)}\"><h2>{_e(entry.kind)} {_e(entry.name)}"
            f" &nbsp;<small>key {_e(entry.key)}</small></h2><p class=\"meta\">{' · '.join(facts)}</p>"
            f"{_chart(entry)}{table}</section>")


def _chart(entry: Any) -> str:
    timed = [c for c in entry.candidates if c.get("ms") is not None]
    if not timed:
        return "<p>No candidate has a time.</p>"
    timed.sort(key=lambda c: c["ms"])
    top = max(c["ms"] for c in timed) or 1.0
    span = WIDTH - LABEL - 200  # room on the right for the time and its note
    height = len(timed) * (BAR + GAP) + GAP
    bars = []
    for i, c in enumerate(timed):
        y = GAP + i * (BAR + GAP)
        kind = "pick" if c["config"] == entry.pick else "measured" if c.get("measured", True) else "screened"
        width = max(1.0, span * c["ms"] / top) if math.isfinite(c["ms"]) else 1.0
        note = "" if kind != "screened" else " (screening round)"
        bars.append(
            f'<g class="candidate {kind}"><title>{_e(c["config"])}: {c["ms"]:.4f} ms{note}</title>'
            f'<text x="{LABEL - 8}" y="{y + BAR - 5}" text-anchor="end">{_e(_short(c["config"]))}</text>'
            f'<rect x="{LABEL}" y="{y}" width="{width:.1f}" height="{BAR}" fill="{COLORS[kind]}"/>'
            f'<text x="{LABEL + width + 6:.1f}" y="{y + BAR - 5}">{c["ms"]:.4f} ms{note}</text></g>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'role="img" aria-label="candidate times of {_e(entry.name)}">{"".join(bars)}</svg>')


def _short(text: str, limit: int = 50) -> str:
    """A bar's label: the config without its ``Config(...)`` wrapper, cut to fit the label column."""
    if text.startswith("Config(") and text.endswith(")"):
        text = text[len("Config("):-1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
