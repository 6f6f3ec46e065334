"""What a function-level tuner's ``key_fn`` may return: a key compared by value, hashable, and
printed the same in every process; each refusal says which function returned what, and the fix."""

from __future__ import annotations

import re
import sys
from typing import Any, Callable

_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]{4,}")  # the default repr of an object: <... object at 0x7f...>


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _unhashable(name: str, key: Any, exc: TypeError) -> str:
    return (f"autotune({name}): key_fn returned {_short(key)} (a {type(key).__name__}), which cannot be a cache key "
            f"({exc}); make key_fn return a tuple of hashable values instead, for example tuple(x.shape) rather "
            "than list(x.shape)")


def _require_value_key(name: str, key: Any, again: Callable[[], Any]) -> None:
    """A key must compare by value: one that hashes by identity (a tensor, an object without value
    equality) is new at every call, so every call would tune again and write a new cache entry.
    Asked on a miss only: ``key_fn`` is called once more with the same arguments and must give
    an equal key with the same hash; a tensor is refused outright (a one-element tensor compares
    equal to another, yet hashes by identity)."""
    leaf = _identity_leaf(key)
    if leaf is None:
        second = again()
        try:
            if second == key and hash(second) == hash(key):
                return
        except Exception:  # noqa: BLE001 - a comparison that raises (a tensor's) is no value equality
            pass
        leaf = _identity_leaf(second, loose=True) or key
    raise TypeError(f"autotune({name}): key_fn returned {_short(key)}, which "
                    + (f"holds a {type(leaf).__name__}, which " if leaf is not key else "")
                    + "compares and hashes by identity: every call makes a new key, so every call would tune "
                    "again and write a new cache entry. Make key_fn return values that compare by value, for "
                    "example tuple(x.shape), x.numel() or str(x.dtype), rather than a tensor or an object")


def _identity_leaf(key: Any, loose: bool = False) -> Any:
    """The first value in ``key`` that compares by identity, or None: a tensor, a float NaN, or
    an object with neither value equality nor a text of its own (a handle made per call: nothing
    tells it from a long-lived one, and its text differs in every process; ``loose``: any value
    without value equality). Singletons such as ``torch.float16`` or None pass."""
    torch = sys.modules.get("torch")
    todo = [key]
    while todo:
        value = todo.pop(0)
        kind = type(value)
        if isinstance(value, (tuple, frozenset)):
            todo.extend(value)
        elif torch is not None and isinstance(value, torch.Tensor):
            return value
        elif isinstance(value, float) and value != value:  # NaN equals nothing: found again by identity only
            return value
        elif kind.__eq__ is object.__eq__ and (loose or kind.__repr__ is object.__repr__):
            return value
    return None


def _hashable(key: Any) -> bool:
    try:
        hash(key)
        return True
    except TypeError:
        return False
