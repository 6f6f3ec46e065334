"""The field checks every layout of a stored record is held to (``records`` for the layout this
version writes, ``records_legacy`` for the older ones it still reads): each raises
``RecordError`` naming the field, so whoever reads a bad entry can say which field was wrong.
Beyond types they bound what later code would trip on: numbers that are not finite (or too large
for a float), negative times, strings and lists of absurd length."""

from __future__ import annotations

import math
from typing import Any, Optional

from . import keys

TEXT = 1 << 16  # the longest text a field may hold (a config description, a failure reason)
ITEMS = 1 << 16  # the most candidates an entry may list


class RecordError(ValueError):
    """A stored record that does not fit the layout; the message names the field."""


def fail(where: str, what: str) -> None:
    raise RecordError(f"field {where!r} {what}")


def text(value: Any, where: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        fail(where, f"is {type(value).__name__}, expected text")
    if len(value) > TEXT:
        fail(where, f"holds {len(value)} characters, more than {TEXT}")
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON allows it, no file or terminal does
        fail(where, "holds text that is not valid Unicode")


def number(value: Any, where: str, optional: bool = False, integer: bool = False) -> None:
    """A finite, non-negative number that a float holds (a JSON integer may exceed it)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        fail(where, f"is {type(value).__name__}, expected {'a whole number' if integer else 'a number'}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite or value < 0:
        fail(where, f"is {value!r:.40}, expected a finite number >= 0")


def a_list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        fail(where, f"is {type(value).__name__}, expected a list")
    if len(value) > ITEMS:
        fail(where, f"lists {len(value)} items, more than {ITEMS}")
    return value


def plain_dict(value: Any, where: str) -> None:
    """An object of text keys and scalar values (hardware, versions, context)."""
    if not isinstance(value, dict):
        fail(where, f"is {type(value).__name__}, expected an object")
    for k, v in value.items():
        text(k, f"{where} key")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            number(abs(v), f"{where}.{k}")
        elif not isinstance(v, (str, bool)) and v is not None:
            fail(f"{where}.{k}", f"is {type(v).__name__}, expected text, a number, true/false or null")
        elif isinstance(v, str):
            text(v, f"{where}.{k}")


def timing(value: Any, where: str) -> None:
    """Infinity is stored as null; a timing is a number or upstream's list of up to three."""
    if isinstance(value, list):
        if not 1 <= len(value) <= 3:
            fail(where, f"lists {len(value)} numbers, expected 1 to 3")
        for i, v in enumerate(value):
            number(v, f"{where}[{i}]", optional=True)
    else:
        number(value, where, optional=True)


def first(value: Any) -> Optional[float]:
    """A timing's p50 (the number, or a list's first), None where it has none."""
    return (value[0] if value else None) if isinstance(value, list) else value


def header(record: dict, kind: str) -> None:
    """The fields every layout starts with: what was tuned, its key, source, hardware, versions,
    when, how it was timed and the pick's description."""
    text(record.get(kind), kind)
    for name in ("key", "source", "timestamp", "method", "pick_config"):
        text(record.get(name), name)
    try:
        keys.check_text(record["key"])
    except keys.BadKey as exc:
        fail("key", f"{exc}: no tuning key does")
    plain_dict(record.get("hardware"), "hardware")
    plain_dict(record.get("versions"), "versions")
    number(record.get("bench_time_s"), "bench_time_s", optional=True)


def row_sense(c: dict, where: str) -> None:
    """A candidate's time and failure agree: never both, and one of them where it claims a full
    measurement (a row without ``measured`` is of an older layout, where all were)."""
    timed = first(c.get("ms")) is not None
    if timed and c.get("failure") is not None:
        fail(where, "has both a time and a failure: a failed candidate has no time")
    if c.get("measured", True) and not timed and c.get("failure") is None:
        fail(f"{where}.measured", "is true, yet it has neither a time nor a failure")


def retained_sense(retained: list, seen: dict) -> None:
    """``retained`` lists each position once, and every candidate's position (``seen``: position
    -> row) among them; a set, so a record of 65,536 rows is checked in linear time."""
    kept = set(retained)
    if len(kept) != len(retained):
        fail("retained", "lists a candidate twice")
    outside = [ident for ident in seen if ident not in kept]
    if outside:
        fail(f"candidates[{seen[outside[0]]}].index", f"is {outside[0]}, which 'retained' does not list")


def pick_sense(row: dict, name: str, where: str) -> None:
    """The row a record names as its pick (through the field ``name``) was timed fully and did not fail."""
    if row.get("failure") is not None:
        fail(name, f"names {where}, which failed ({str(row['failure'])[:80]}): a pick never failed")
    if first(row.get("ms")) is None:
        fail(name, f"names {where}, which has no time: a pick has its own full measurement")
    if row.get("measured", True) is not True:
        fail(name, f"names {where}, which was not measured fully: a pick always was")
