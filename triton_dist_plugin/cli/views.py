"""The text the commands print: the tables of ``list``, ``show`` and ``misses``, and the manifest
``export`` writes. Kept apart from argument parsing so that what a command says about an entry
(which round timed each candidate, the pick's own time) is decided in one place. ``list`` prints
each row as its entry is read (``list_lines``), so a large cache lists in bounded memory, under a
line naming the place it was read from (docs/picks.md), and each pick as the HTML report labels it.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from itertools import chain, groupby, islice
from typing import Iterable, Iterator, Optional

from .. import frozen
from ..failures import round_of
from ..reporting import html_view, pick_reason
from ..store import cache
from .entries import Entry, heading, looked_in, matches

_SIZING = 200  # the rows of a listing that size its columns; later ones longer than those spill over


def _lines(rows: Iterable[tuple[list[str], str]], header: list[str]) -> Iterator[str]:
    """A table's lines, each as soon as its row is given, each row ``(cells, the line under it)``:
    the first rows size the columns (each cut at 100 characters)."""
    rows = iter(rows)
    first = list(islice(rows, _SIZING))
    widths = [min(max(len(str(x)) for x in col), 100) for col in zip(header, *(cells for cells, _ in first))]

    def line(r: list) -> str:
        return "  ".join(str(x)[:100].ljust(w) for x, w in zip(r, widths)).rstrip()

    yield line(header)
    yield "  ".join("-" * w for w in widths)
    for cells, under in chain(first, rows):
        yield line(cells)
        if under:
            yield under


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    widths = [min(w, 100) for w in widths]
    line = lambda r: "  ".join(str(x)[:w].ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fmt(ms: Optional[float]) -> str:
    return f"{ms:.4f}" if ms is not None else "-"


def _round(candidate: dict) -> str:
    """Which round a candidate's time is from (``failures.round_of``)."""
    return round_of(candidate.get("ms"), candidate.get("measured", True), candidate.get("failure"))


def _pick_ms(e: Entry) -> Optional[float]:
    """The pick's own time (its full measurement), never a faster screening round's."""
    return next((c["ms"] for c in e.candidates if c.get("config") == e.pick), None)


def _rounds(e: Entry) -> str:
    """How the entry's candidates were timed: ``2 full + 4 screened``, ``1 skipped`` and ``1 failed`` added."""
    counts = {"full": 0, "screening": 0, "skipped": 0, "-": 0}
    for c in e.candidates:
        counts[_round(c)] += 1
    parts = [f"{counts['full']} full"] + [f"{n} {what}" for what, n in (
        ("screened", counts["screening"]), ("skipped", counts["skipped"]), ("failed", counts["-"])) if n]
    return " + ".join(parts)


def _source(e: Entry) -> Optional[str]:
    """The digest of the kernel's (or function's) source the entry was tuned for, if recorded
    (``show`` prints it where entries of one name and key come from different sources)."""
    source = e.record.get("source")
    return source if isinstance(source, str) else None


def _cut(text: str, most: int = 100) -> str:
    """``text``, or its start and ``...`` where it is longer than ``most``."""
    return text if len(text) <= most else text[:most - 3] + "..."


def _pick_label(e: Entry) -> str:
    """The pick as the HTML report labels it: only the parameters that differ among the entry's
    candidates (``html_view.labels``), so a listing line stays short."""
    configs = [str(c.get("config")) for c in e.candidates]
    if e.pick not in configs:
        configs.append(e.pick)
    return html_view.labels(configs)[0][configs.index(e.pick)]


LIST_HEADER = ["name", "pick", "pick ms", "decided", "timed", "when (UTC)"]  # decided: ``pick_reason.word``


def list_lines(entries: Iterable[Entry]) -> Iterator[str]:
    """The lines of ``list``, each as soon as its entry is read; none when there is no entry. The
    entries of each place (``entries.PLACES``) come under a line naming it and its directory, each
    as a row with its key on the line under it: a key and a pick side by side would not fit a
    terminal."""
    for i, (place, group) in enumerate(groupby(entries, key=lambda e: e.place)):
        if i:
            yield ""
        if place:
            yield heading(place)
        rows = (([e.name, _pick_label(e), _fmt(_pick_ms(e)), pick_reason.word(e.record.get("decision")), _rounds(e),
                  e.when[:19]], f"  key={_cut(str(e.key))}")
                for e in group)
        yield from _lines(rows, LIST_HEADER)


def cmd_list(entries: list[Entry]) -> str:
    return "\n".join(list_lines(entries)) or f"nothing tuned yet ({looked_in()})"


def cmd_show(entries: list[Entry]) -> str:
    parts = []
    sources: dict = {}  # (kind, name, key) -> the sources its entries were tuned from
    for e in entries:
        sources.setdefault((e.kind, e.name, e.key), set()).add(_source(e))
    for e in entries:
        # Full measurements first (the pick among them), then the screening rounds, then failures.
        order = sorted(e.candidates, key=lambda c: ("full", "screening", "skipped", "-").index(_round(c)))
        rows = [[c["config"], _fmt(c["ms"]), _round(c), c["failure"] or "", "*" if c["config"] == e.pick else ""]
                for c in order]
        source = _source(e)
        twins = sources[(e.kind, e.name, e.key)] - {None}
        timer = e.record.get("timer")
        why = pick_reason.line(_pick_ms(e), [c["ms"] for c in e.candidates if _round(c) == "full"
                                             and c["config"] != e.pick], e.record.get("decision"))
        parts.append(f"{e.kind} {e.name}  key={e.key}\n  file: {e.path}\n"
                     + (f"  source: {source} (entries of this name and key were tuned from {len(twins)} different "
                        "sources)\n" if source and len(twins) > 1 else "")
                     + (f"  timed by: {timer}\n" if isinstance(timer, str) else "")
                     + _table(rows, ["candidate", "ms", "round", "failure", "pick"])
                     + (f"\n  {why}" if why else f"\n  decided: {pick_reason.sentence(decision)}"
                        if (decision := pick_reason.decision_of(e.record.get("decision"))) else ""))
    if any(_round(c) == "screening" for e in entries for c in e.candidates):
        parts.append("round: full = the p50 of a full measurement; screening = the p50 of the short round that "
                     "dropped the candidate, not comparable with a full measurement")
    if any(_round(c) == "skipped" for e in entries for c in e.candidates):
        parts.append("round: skipped = left out by the search (never compiled nor run), not a failure")
    return "\n\n".join(parts)


def cmd_export(entries: list[Entry], fmt: str) -> str:
    """``best_ms`` is the pick's own full measurement; each candidate says its ``round``."""
    if fmt == "json":
        items = [{**{k: v for k, v in asdict(e).items() if k not in ("restore", "record", "place")},
                  "best_ms": _pick_ms(e),
                  "candidates": [{**c, "measured": _round(c) == "full", "round": _round(c)} for c in e.candidates],
                  **e.restore} for e in entries]
        return json.dumps(items, indent=2, default=str)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["kind", "name", "key", "pick", "best_ms", "when", "path", "measured_fully", "screened"])
    for e in entries:
        best = _pick_ms(e)
        rounds = [_round(c) for c in e.candidates]
        writer.writerow([e.kind, e.name, e.key, e.pick, "" if best is None else best, e.when, e.path,
                         rounds.count("full"), rounds.count("screening")])
    return buf.getvalue()


def cmd_misses(name: Optional[str], exact: bool = False) -> Optional[str]:
    """The misses table; None when ``name`` matches none of the recorded misses."""
    seen: dict = {}
    recorded = frozen.misses()
    for item in recorded:
        if not matches(item["kernel"], name, exact):
            continue
        row = seen.setdefault((item["kernel"], item["key"]), {"count": 0, "why": set(), "last": ""})
        row["count"] += 1
        row["why"].add(str(item.get("why", "")))
        row["last"] = max(row["last"], str(item.get("timestamp", "")))
    if not seen:
        if name is not None:
            return None
        return f"no misses recorded (looked in {cache.cache_root() / frozen.MISSES})"
    rows = [[k, key, str(r["count"]), ", ".join(sorted(r["why"])), r["last"][:19]] for (k, key), r in seen.items()]
    return _table(rows, ["kernel", "key", "misses", "during", "last (UTC)"])
