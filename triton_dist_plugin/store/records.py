"""The one boundary every stored record passes before the plugin uses it.

An entry read from a file, from a user's store (``tdp_cache_get``, e.g. Redis), from a manifest
or by the command line may come from another version, another user or an attacker. ``check``
holds it against the layout this version writes, field by field, and raises ``RecordError``
naming the first field that does not fit; callers warn, ignore the record, re-tune and replace
it, and never raise. Beyond types it bounds what later code would trip on: numbers that are not
finite (or too large for a float), negative times, strings and lists of absurd length.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from . import keys

FORMAT = 2  # 2: kernel entries keyed on Triton's and the backend's hashes and the plugin's own inputs
_READS = {"function": (1, 2), "kernel": (2,)}  # a function-level entry's layout and key are as in 1
KINDS = ("function", "kernel")
_TEXT = 1 << 16  # the longest text a field may hold (a config description, a failure reason)
_ITEMS = 1 << 16  # the most candidates an entry may list


class RecordError(ValueError):
    """A stored record that does not fit the layout; the message names the field."""


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


def _fail(where: str, what: str) -> None:
    raise RecordError(f"field {where!r} {what}")


def _text(value: Any, where: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        _fail(where, f"is {type(value).__name__}, expected text")
    if len(value) > _TEXT:
        _fail(where, f"holds {len(value)} characters, more than {_TEXT}")
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON allows it, no file or terminal does
        _fail(where, "holds text that is not valid Unicode")


def _number(value: Any, where: str, optional: bool = False, integer: bool = False) -> None:
    """A finite, non-negative number that a float holds (a JSON integer may exceed it)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        _fail(where, f"is {type(value).__name__}, expected {'a whole number' if integer else 'a number'}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite or value < 0:
        _fail(where, f"is {value!r:.40}, expected a finite number >= 0")


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        _fail(where, f"is {type(value).__name__}, expected a list")
    if len(value) > _ITEMS:
        _fail(where, f"lists {len(value)} items, more than {_ITEMS}")
    return value


def _plain_dict(value: Any, where: str) -> None:
    """An object of text keys and scalar values (hardware, versions, context)."""
    if not isinstance(value, dict):
        _fail(where, f"is {type(value).__name__}, expected an object")
    for k, v in value.items():
        _text(k, f"{where} key")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            _number(abs(v), f"{where}.{k}")
        elif not isinstance(v, (str, bool)) and v is not None:
            _fail(f"{where}.{k}", f"is {type(v).__name__}, expected text, a number, true/false or null")
        elif isinstance(v, str):
            _text(v, f"{where}.{k}")


def _timing(value: Any, where: str) -> None:
    """Infinity is stored as null; a timing is a number or upstream's list of up to three."""
    if isinstance(value, list):
        if not 1 <= len(value) <= 3:
            _fail(where, f"lists {len(value)} numbers, expected 1 to 3")
        for i, v in enumerate(value):
            _number(v, f"{where}[{i}]", optional=True)
    else:
        _number(value, where, optional=True)


def check(record: Any, kind: str) -> dict:
    """``record`` if it is a valid entry of ``kind`` (``"function"`` or ``"kernel"``) in this
    version's layout; else ``RecordError`` naming the first field that is not."""
    if not isinstance(record, dict):
        raise RecordError(f"is {type(record).__name__}, expected an object")
    if kind not in _READS:
        raise RecordError(f"is of kind {kind!r}, expected one of {', '.join(KINDS)}")
    if isinstance(record.get("format"), bool) or record.get("format") not in _READS[kind]:
        raise RecordError(f"has format {str(record.get('format'))[:40]}, this version reads "
                          f"{' or '.join(map(str, _READS[kind]))}: written by another version of triton-dist-plugin")
    _text(record.get(kind), kind)
    for name in ("key", "source", "timestamp", "method", "pick_config"):
        _text(record.get(name), name)
    try:
        keys.check_text(record["key"])
    except keys.BadKey as exc:
        _fail("key", f"{exc}: no tuning key does")
    _plain_dict(record.get("hardware"), "hardware")
    _plain_dict(record.get("versions"), "versions")
    if kind == "kernel" or "context" in record:
        _plain_dict(record.get("context"), "context")
    _number(record.get("bench_time_s"), "bench_time_s", optional=True)
    candidates = _list(record.get("candidates"), "candidates")
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        if not isinstance(c, dict):
            _fail(where, f"is {type(c).__name__}, expected an object")
        _text(c.get("config"), f"{where}.config")
        _text(c.get("failure"), f"{where}.failure", optional=True)
        if not isinstance(c.get("measured", False), bool):
            _fail(f"{where}.measured", "is not true or false")
        if kind == "kernel":  # the p50 alone, and upstream's shape of the timing beside it
            _number(c.get("ms"), f"{where}.ms", optional=True)
            _timing(c.get("timing"), f"{where}.timing")
        else:
            _timing(c.get("ms"), f"{where}.ms")
            _number(c.get("index"), f"{where}.index", integer=True)
    for name in ("model", "decision"):  # how the cost model and the final decision went (the report shows them)
        if name in record:
            _plain_dict(record[name], name)
    if kind == "kernel":
        if "space" in record:
            for i, d in enumerate(_list(record["space"], "space")):
                _text(d, f"space[{i}]")
    else:
        _number(record.get("pick"), "pick", integer=True)
        for i, r in enumerate(_list(record.get("retained"), "retained")):
            _number(r, f"retained[{i}]", integer=True)
    _sense(record, kind, candidates)
    return record


def _first(timing: Any) -> Optional[float]:
    """A timing's p50 (the number, or a list's first), None where it has none."""
    return (timing[0] if timing else None) if isinstance(timing, list) else timing


def _sense(record: dict, kind: str, candidates: list) -> None:
    """The record agrees with itself: each candidate listed once, a time or a failure where it
    claims one, and the pick one of them, timed fully and not failed (``_pick``)."""
    seen: dict = {}
    for i, c in enumerate(candidates):
        where = f"candidates[{i}]"
        ident = c["config"] if kind == "kernel" else c["index"]
        if ident in seen:
            _fail(where, f"repeats candidates[{seen[ident]}]: each candidate is listed once")
        seen[ident] = i
        timed = _first(c.get("ms")) is not None
        if kind == "kernel" and c.get("ms") != _first(c.get("timing")):
            _fail(f"{where}.timing", f"has the p50 {_first(c.get('timing'))!r:.40}, yet its ms is {c.get('ms')!r:.40}")
        if timed and c.get("failure") is not None:
            _fail(where, "has both a time and a failure: a failed candidate has no time")
        if c.get("measured", True) and not timed and c.get("failure") is None:  # older layouts: all measured
            _fail(f"{where}.measured", "is true, yet it has neither a time nor a failure")
    if kind == "function":
        retained = record["retained"]
        if len(set(retained)) != len(retained):
            _fail("retained", "lists a candidate twice")
        outside = [ident for ident in seen if ident not in retained]
        if outside:
            _fail(f"candidates[{seen[outside[0]]}].index", f"is {outside[0]}, which 'retained' does not list")
        if record["pick"] not in retained:
            _fail("pick", f"is {record['pick']}, which 'retained' does not list")
    pick = record["pick_config"] if kind == "kernel" else record["pick"]
    if pick not in seen:
        _fail("pick_config" if kind == "kernel" else "pick", f"is {str(pick)[:80]!r}, none of the candidates listed")
    _pick(record, kind, candidates[seen[pick]], f"candidates[{seen[pick]}]")


def _pick(record: dict, kind: str, row: dict, where: str) -> None:
    name = "pick_config" if kind == "kernel" else "pick"
    if kind == "function" and row["config"] != record["pick_config"]:
        _fail("pick_config", f"is not the config of {where}, the pick")
    if row.get("failure") is not None:
        _fail(name, f"names {where}, which failed ({str(row['failure'])[:80]}): a pick never failed")
    if _first(row.get("ms")) is None:
        _fail(name, f"names {where}, which has no time: a pick has its own full measurement")
    if row.get("measured", True) is not True:
        _fail(name, f"names {where}, which was not measured fully: a pick always was")


def valid(record: Any, kind: str) -> bool:
    try:
        check(record, kind)
    except RecordError:
        return False
    return True
