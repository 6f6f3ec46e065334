"""The one boundary every stored record passes before the plugin uses it, and the one layout both
kinds of entry (function-level and kernel-level picks) are written in.

An entry read from a file, from a user's store (``tdp_cache_get``, e.g. Redis), from a manifest
or by the command line may come from another version, another user or an attacker. ``check``
holds it against its format's layout, field by field, and raises ``RecordError`` naming the first
field that does not fit; callers warn, ignore the record, re-tune and replace it, and never
raise. A record of an older format is checked in its own layout and returned in this version's
(``records_legacy``), so that past ``check`` every reader sees one layout:

- ``format`` (3), ``function`` or ``kernel`` (what was tuned), ``key``, ``source``,
  ``hardware``, ``versions``, ``timestamp``, ``method``, ``bench_time_s``;
- ``context``: what the pick is keyed on beyond them (for both kinds the search and its effort,
  ``fingerprint.tuning_context``; for kernels also Triton's hash and the checks, ``persist.context``);
- ``pick`` (the ``index`` of the pick's row) and ``pick_config`` (its description);
- ``candidates``: one row per candidate timed or given up, each with ``index`` (its position
  among the candidates: ``config_space`` for a function, the configs tuned for a kernel),
  ``config`` (its description), ``ms`` (the p50, null without a time), ``timing`` (the whole
  timing: upstream's number or list of up to three, null inside for infinity), ``failure`` (the
  reason, or null) and ``measured`` (timed fully, not only screened);
- optional, for either kind: ``retained`` (the positions ``prune_fn`` kept), ``space`` (every
  candidate's description, for warm starts), ``notes``, ``model`` and ``decision`` (for the report),
  ``timer`` (what timed, where it was not the built-in timer of ``method``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from . import record_fields as f
from . import records_legacy
from .record_fields import RecordError

FORMAT = 3  # 3: one layout for both kinds; function entries keyed on the search and its effort too
_READS = {kind: (*older, FORMAT) for kind, older in records_legacy.READS.items()}
KINDS = ("function", "kernel")
_ROW = ("index", "config", "ms", "timing", "failure", "measured")  # a candidate's row, either kind

__all__ = ["FORMAT", "KINDS", "RecordError", "check", "id_context", "parse", "row", "valid"]


def parse(raw: bytes) -> dict:
    """The JSON object ``raw`` holds; ``RecordError`` saying what it is instead (not UTF-8 text,
    not JSON or cut short, nested too deeply, not an object)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError("not UTF-8 text (binary, or damaged)") from None
    except ValueError as exc:
        raise RecordError(f"not JSON, or cut short ({str(exc)[:200]})") from None
    except RecursionError:
        raise RecordError("nested too deeply") from None
    if not isinstance(data, dict):
        raise RecordError(f"a JSON {type(data).__name__}, not an object")
    return data


def check(record: Any, kind: str) -> dict:
    """``record`` if it is a valid entry of ``kind`` (``"function"`` or ``"kernel"``) in this
    version's layout; a valid entry of an older format that this version reads, in this version's
    layout (a new dict); else ``RecordError`` naming the first field that is not valid."""
    if not isinstance(record, dict):
        raise RecordError(f"is {type(record).__name__}, expected an object")
    if kind not in _READS:
        raise RecordError(f"is of kind {kind!r}, expected one of {', '.join(KINDS)}")
    if isinstance(record.get("format"), bool) or record.get("format") not in _READS[kind]:
        raise RecordError(f"has format {str(record.get('format'))[:40]}, this version reads "
                          f"{' or '.join(map(str, _READS[kind]))}: written by another version of triton-dist-plugin")
    if record["format"] == FORMAT:
        _check(record, kind)
        return record
    records_legacy.check(record, kind)
    current = records_legacy.normalise(record, kind, FORMAT)
    _check(current, kind)  # what an older layout holds fits this one too, or the entry is refused here
    return current


def valid(record: Any, kind: str) -> bool:
    try:
        check(record, kind)
    except RecordError:
        return False
    return True


def id_context(record: dict, kind: str) -> Optional[dict]:
    """What of a stored record's ``context`` its id (``describe.entry_digest``) covers: all of
    it, except in a function entry of format 1 or 2, which had none. ``record`` as stored."""
    return None if kind == "function" and record.get("format") in records_legacy.READS["function"] \
        else record.get("context")


def row(index: int, config: str, timing: Any, failure: Optional[str], measured: bool) -> dict:
    """A candidate's row as both kinds write it: its timing as JSON holds it (upstream's shape,
    infinity as null), none for a failed candidate (a reduction may have given it one), and a
    reason for one whose time is not finite."""
    timing = [_finite(v) for v in timing] if isinstance(timing, (list, tuple)) else _finite(timing)
    if failure is not None:
        timing = [None] * len(timing) if isinstance(timing, list) else None
    ms = f.first(timing)
    if ms is None and failure is None:
        failure = "timed as infinity"
    return {"index": index, "config": config, "ms": ms, "timing": timing, "failure": failure, "measured": measured}


def _finite(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) else None


def _check(record: dict, kind: str) -> None:
    """``record`` fits this version's layout (both kinds alike), field by field, then for sense."""
    f.header(record, kind)
    f.plain_dict(record.get("context"), "context")
    f.number(record.get("pick"), "pick", integer=True)
    candidates = f.a_list(record.get("candidates"), "candidates")
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        if not isinstance(c, dict):
            f.fail(where, f"is {type(c).__name__}, expected an object")
        for name in _ROW:
            if name not in c:
                f.fail(f"{where}.{name}", "is missing: every row lists " + ", ".join(_ROW))
        f.number(c.get("index"), f"{where}.index", integer=True)
        f.text(c.get("config"), f"{where}.config")
        f.number(c.get("ms"), f"{where}.ms", optional=True)
        f.timing(c.get("timing"), f"{where}.timing")
        f.text(c.get("failure"), f"{where}.failure", optional=True)
        if not isinstance(c.get("measured"), bool):
            f.fail(f"{where}.measured", "is not true or false")
    for name in ("model", "decision"):  # how the cost model and the final decision went (the report shows them)
        if name in record:
            f.plain_dict(record[name], name)
    f.text(record.get("timer"), "timer", optional=True)
    if isinstance(record.get("timer"), str) and (len(record["timer"]) > 200 or not record["timer"].isprintable()):
        f.fail("timer", "is not a short line of text (at most 200 printable characters)")
    for name in ("space", "notes"):
        for i, d in enumerate(f.a_list(record[name], name) if name in record else []):
            f.text(d, f"{name}[{i}]")
    for i, r in enumerate(f.a_list(record["retained"], "retained") if "retained" in record else []):
        f.number(r, f"retained[{i}]", integer=True)
    _sense(record, kind, candidates)


def _sense(record: dict, kind: str, candidates: list) -> None:
    """The record agrees with itself: each candidate listed once (by its index; a kernel's also
    by its description, which readers match it by), its ``ms`` the p50 of its ``timing``, a time
    or a failure where it claims one, every index one ``retained`` lists (where it is kept), and
    the pick one of them, with its description, timed fully and not failed."""
    seen: dict = {}
    described: dict = {}
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        for ident, held in ((c["index"], seen), (c["config"], described if kind == "kernel" else {})):
            if ident in held:
                f.fail(where, f"repeats candidates[{held[ident]}]: each candidate is listed once")
            held[ident] = i
        if c["ms"] != f.first(c["timing"]):
            f.fail(f"{where}.timing", f"has the p50 {f.first(c['timing'])!r:.40}, yet its ms is {c['ms']!r:.40}")
        f.row_sense(c, where)
    retained = record.get("retained")
    if retained is not None:
        f.retained_sense(retained, seen)
    if record["pick"] not in seen:
        f.fail("pick", f"is {record['pick']}, none of the candidates' index")
    where = f"candidates[{seen[record['pick']]}]"
    if candidates[seen[record["pick"]]]["config"] != record["pick_config"]:
        f.fail("pick_config", f"is not the config of {where}, the pick")
    f.pick_sense(candidates[seen[record["pick"]]], "pick", where)
