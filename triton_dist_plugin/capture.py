"""A miss while a CUDA graph is being captured.

Tuning times candidates and synchronises, which a capture forbids: upstream tries anyway, the
capture is invalidated and the process is left unusable. Here nothing is enqueued. By default
the launch raises ``TuningDuringCapture`` (the capture and the process stay usable); with
``TRITON_DIST_AUTOTUNE_ON_CAPTURE=fallback`` it launches a fixed config instead (the pick of the
nearest tuned key, else the first config), warns, and records the miss. The key stays untuned,
so a launch after the capture tunes it. Keys tuned before the capture launch as usual.
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Any

from . import engine, settings
from .requests import TuningRequest

ENV = "TRITON_DIST_AUTOTUNE_ON_CAPTURE"


class TuningDuringCapture(RuntimeError):
    """A kernel met a key it never tuned while a CUDA graph was being captured."""


def capturing() -> bool:
    """True while the current CUDA stream is capturing a graph (only asked on a miss)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def refuse(name: str) -> None:
    """A tuner subclass's own loop met an untuned key during a capture: it decides what runs, so
    there is no fallback to offer; raise before its first timing."""
    raise TuningDuringCapture(
        f"{name}: its tuner's own loop started tuning while a CUDA graph is being captured, where "
        "candidates can neither be timed nor synchronised. Nothing was enqueued: the capture and the "
        "process are still usable. Launch the kernel once with these shapes and dtypes before capturing.")


def fallback(name: str, key: Any, tuned: dict, first: Any, autotuner: Any = None) -> Any:
    """What to run for untuned ``key`` during a capture (``tuned``: key -> pick so far, ``first``:
    the first candidate), or raise ``TuningDuringCapture`` unless the setting asks for a fallback."""
    if settings.value(ENV) != "fallback":
        raise TuningDuringCapture(
            f"{name}: key {key} was never tuned, and a CUDA graph is being captured, where tuning can neither "
            "time nor synchronise. Nothing was enqueued: the capture and the process are still usable. Launch "
            "the kernel once with these shapes and dtypes before capturing (a warm-up step tunes it), or set "
            f"{ENV}=fallback to launch a fixed config during capture.")
    near = nearest(list(tuned), key)
    config = tuned[near] if near is not None else first
    source = f"the pick for the nearest tuned key {near}" if near is not None else "the first config"
    warnings.warn(f"{name}: key {key} was never tuned and a CUDA graph is being captured; launching {source} "
                  f"({config}) without tuning ({ENV}=fallback). A launch after the capture tunes this key.",
                  RuntimeWarning, stacklevel=4)
    request = TuningRequest(name, key, "cuda", autotuner=autotuner)
    request.notes.append(f"untuned key met during CUDA graph capture: launched {source}")
    engine.record(request, None, config, {}, method="none", cache_hit=False)
    return config


def nearest(keys: list, key: tuple) -> Any:
    """The tuned key most like ``key``: same length and same non-numeric parts (dtypes, flags),
    closest in the ratios of its numbers (shapes); None if no key is comparable."""
    best, best_distance = None, math.inf
    for other in keys:
        if not isinstance(other, tuple) or len(other) != len(key):
            continue
        distance = 0.0
        for a, b in zip(key, other):
            if _number(a) and _number(b):
                distance += abs(math.log((abs(a) + 1) / (abs(b) + 1)))
            elif a != b:
                distance = math.inf
                break
        if distance < best_distance:
            best, best_distance = other, distance
    return best


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
