"""The layouts older releases wrote, still read: each is checked in its own layout (``check``,
field by field and for sense, as those releases checked it) and then brought into the layout this
version writes (``normalise``), so that past this boundary every reader sees one layout.

- function entries, formats 1 and 2: a row's ``ms`` is the whole timing (``[p50, p20, p80]``, a
  number, or null), the pick is ``pick`` (a position in ``config_space``), ``retained`` lists the
  positions ``prune_fn`` kept; there is no ``context``, and the entry's id covers none.
- kernel entries, format 2: a row has ``ms`` (the p50) and ``timing`` beside it but no
  ``index``; the pick is ``pick_config`` alone; ``context`` is required, and the id covers it.

A function entry of these formats was tuned before entries were keyed on the search and its
effort: it is read as tuned under the defaults (``fingerprint.tuning_context(unset=True)``), so
it is served while ``TRITON_DIST_AUTOTUNE_SEARCH`` and ``TRITON_DIST_AUTOTUNE_EFFORT`` are unset
(or set to their defaults), and tuned again under any other search or effort.
"""

from __future__ import annotations

from typing import Any

from . import fingerprint
from . import record_fields as f

READS = {"function": (1, 2), "kernel": (2,)}


def check(record: dict, kind: str) -> None:
    """``record`` fits the layout of its (older) format; ``RecordError`` naming the first field that does not."""
    f.header(record, kind)
    if kind == "kernel" or "context" in record:
        f.plain_dict(record.get("context"), "context")
    candidates = f.a_list(record.get("candidates"), "candidates")
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        if not isinstance(c, dict):
            f.fail(where, f"is {type(c).__name__}, expected an object")
        f.text(c.get("config"), f"{where}.config")
        f.text(c.get("failure"), f"{where}.failure", optional=True)
        if not isinstance(c.get("measured", False), bool):
            f.fail(f"{where}.measured", "is not true or false")
        if kind == "kernel":  # the p50 alone, and upstream's shape of the timing beside it
            f.number(c.get("ms"), f"{where}.ms", optional=True)
            f.timing(c.get("timing"), f"{where}.timing")
        else:
            f.timing(c.get("ms"), f"{where}.ms")
            f.number(c.get("index"), f"{where}.index", integer=True)
    for name in ("model", "decision"):
        if name in record:
            f.plain_dict(record[name], name)
    if kind == "kernel":
        if "space" in record:
            for i, d in enumerate(f.a_list(record["space"], "space")):
                f.text(d, f"space[{i}]")
    else:
        f.number(record.get("pick"), "pick", integer=True)
        for i, r in enumerate(f.a_list(record.get("retained"), "retained")):
            f.number(r, f"retained[{i}]", integer=True)
    _sense(record, kind, candidates)


def _sense(record: dict, kind: str, candidates: list) -> None:
    """Each candidate listed once, a time or a failure where it claims one, and the pick one of
    them, timed fully and not failed."""
    seen: dict = {}
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        ident = c["config"] if kind == "kernel" else c["index"]
        if ident in seen:
            f.fail(where, f"repeats candidates[{seen[ident]}]: each candidate is listed once")
        seen[ident] = i
        if kind == "kernel" and c.get("ms") != f.first(c.get("timing")):
            f.fail(f"{where}.timing",
                   f"has the p50 {f.first(c.get('timing'))!r:.40}, yet its ms is {c.get('ms')!r:.40}")
        f.row_sense(c, where)
    if kind == "function":
        retained = record["retained"]
        f.retained_sense(retained, seen)
        if record["pick"] not in retained:
            f.fail("pick", f"is {record['pick']}, which 'retained' does not list")
    name = "pick_config" if kind == "kernel" else "pick"
    pick = record[name]
    if pick not in seen:
        f.fail(name, f"is {str(pick)[:80]!r}, none of the candidates listed")
    where = f"candidates[{seen[pick]}]"
    if kind == "function" and candidates[seen[pick]]["config"] != record["pick_config"]:
        f.fail("pick_config", f"is not the config of {where}, the pick")
    f.pick_sense(candidates[seen[pick]], name, where)


def normalise(record: dict, kind: str, version: int) -> dict:
    """A checked record of an older format in the layout of ``version``: each row with its
    ``index``, ``ms`` (the p50) and ``timing`` (the whole timing), ``measured`` where older rows
    left it out (all were), the pick as ``pick`` too, and a ``context`` for both kinds."""
    rows = []
    for i, c in enumerate(record["candidates"]):
        timing: Any = c.get("timing") if kind == "kernel" else c.get("ms")
        rows.append({"index": i if kind == "kernel" else c["index"], "config": c["config"],
                     "ms": f.first(timing), "timing": timing, "failure": c.get("failure"),
                     "measured": c.get("measured", True)})
    if kind == "kernel":  # its rows in the order written: the position stands in for the index it lacked
        pick = next(r["index"] for r in rows if r["config"] == record["pick_config"])
        context = record["context"]
    else:
        pick, context = record["pick"], fingerprint.tuning_context(unset=True)
    return {**record, "format": version, "pick": pick, "context": dict(context), "candidates": rows}
