"""Tuning keys as numbers: what a stored key may hold, and how far apart two keys are.

A stored key is text (its ``repr``) read back with ``ast.literal_eval``; it comes from outside,
so ``check_text`` bounds what the literal may hold (``records.check`` calls it): whole numbers
below 2**64 in size, finite floats, bounded text and nesting. The live key is the user's own and
may hold anything, so ``distance`` never raises and never returns NaN, whatever either key holds.

Two keys are comparable when they have the same length and the same non-numeric parts (dtypes,
flags): the same ``signature``. Their distance is the sum over their numbers of
``|ln(|x|+1) - ln(|y|+1)|``: the log-ratio of shapes, so 1000 and 2000 are as far apart as 10
and 20. ``vector`` gives those logarithms, the numbers an index of stored keys holds.
"""

from __future__ import annotations

import ast
import math
from typing import Any, Optional

#: the largest whole number a stored key may hold, in size (a shape, a stride, a count)
INT_LIMIT = 2 ** 64
DEPTH = 32  # how deeply a stored key's literal may nest
ITEMS = 1 << 16  # how many values it may hold in all
TEXT = 1 << 16  # the longest text inside it


class BadKey(ValueError):
    """A stored key's literal holds what no tuning key does; the message says what."""


def check_text(text: str) -> None:
    """Nothing if ``text`` is not a Python literal (a key whose ``repr`` is not one is compared as
    text only) or is one within bounds; ``BadKey`` naming the first value out of bounds."""
    try:
        value = ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, MemoryError, RecursionError: not a literal
        return
    _walk(value, 0, [0])


def _walk(value: Any, depth: int, count: list) -> None:
    count[0] += 1
    if count[0] > ITEMS:
        raise BadKey(f"holds more than {ITEMS} values")
    if depth > DEPTH:
        raise BadKey(f"nests deeper than {DEPTH}")
    if isinstance(value, bool) or value is None or value is Ellipsis:
        return
    if isinstance(value, int):
        if not -INT_LIMIT < value < INT_LIMIT:
            raise BadKey(f"holds a whole number of {len(str(abs(value)))} digits, outside +-2**64")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BadKey(f"holds the number {value!r}, expected a finite one")
    elif isinstance(value, complex):
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise BadKey(f"holds the number {value!r}, expected a finite one")
    elif isinstance(value, (str, bytes)):
        if len(value) > TEXT:
            raise BadKey(f"holds text of {len(value)} characters, more than {TEXT}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(k, depth + 1, count)
            _walk(v, depth + 1, count)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            _walk(v, depth + 1, count)
    else:  # literal_eval builds nothing else
        raise BadKey(f"holds a {type(value).__name__}")


def parse(text: Any) -> Optional[tuple]:
    """The stored key ``text`` as the tuple it was, if it is one within bounds; else None."""
    if not isinstance(text, str) or len(text) > TEXT:
        return None
    try:
        value = ast.literal_eval(text)
        if not isinstance(value, tuple):
            return None
        _walk(value, 0, [0])
    except Exception:  # noqa: BLE001 - not a literal, or out of bounds
        return None
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _log(x: Any) -> float:
    """``ln(|x|+1)``: any whole number (a huge one gives a large finite value), a float (infinity
    gives infinity, NaN gives NaN); never raises."""
    try:
        if isinstance(x, int):
            return math.log(abs(int(x)) + 1)
        x = float(x)
        return math.log(abs(x) + 1.0) if math.isfinite(x) else abs(x)
    except Exception:  # noqa: BLE001 - an int subclass with a hostile __abs__, say
        return math.nan


def signature(key: Any) -> Optional[tuple]:
    """What two keys must share to be compared: their length, and each non-numeric part by type
    and text (``#`` stands for a number); None if ``key`` is not a tuple or a part has no text."""
    if not isinstance(key, tuple):
        return None
    try:
        return tuple("#" if _number(v) else f"{type(v).__qualname__}:{v!r}" for v in key)
    except Exception:  # noqa: BLE001 - a part whose repr raises: comparable with nothing
        return None


def vector(key: tuple) -> tuple:
    """``ln(|x|+1)`` of each number of ``key``, in order."""
    return tuple(_log(v) for v in key if _number(v))


def distance(a: Any, b: Any) -> float:
    """How unlike two keys are: the sum over their numbers of ``|ln(|x|+1) - ln(|y|+1)|``, a
    finite number >= 0; infinite when their signatures differ, or a number is infinite or NaN
    (an equal pair counts 0). Never raises, never NaN."""
    sa, sb = signature(a), signature(b)
    if sa is None or sa != sb:
        return math.inf
    total = 0.0
    for x, y in zip(a, b):
        if not _number(x):
            continue
        try:
            if x == y:
                continue
        except Exception:  # noqa: BLE001
            return math.inf
        gap = abs(_log(x) - _log(y))
        if not gap < math.inf:  # NaN or infinite
            return math.inf
        total += gap
    return total if total < math.inf else math.inf


def nearest(tuned: list, key: Any) -> Any:
    """The tuned key most like ``key``: same length and same non-numeric parts (dtypes, flags),
    closest in the ratios of its numbers (shapes); None if no key is comparable. Never raises,
    whatever either key holds."""
    best, best_distance = None, math.inf
    for other in tuned:
        d = distance(other, key)
        if d < best_distance:
            best, best_distance = other, d
    return best
