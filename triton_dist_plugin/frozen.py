"""Keys that may not be tuned now: a miss during CUDA graph capture, or in frozen mode.

**Capture.** Tuning times candidates and synchronises, which a capture forbids: upstream tries
anyway, the capture is invalidated and the process is left unusable. Here nothing is enqueued.
By default the launch raises ``TuningDuringCapture`` (the capture and the process stay usable);
with ``TRITON_DIST_AUTOTUNE_ON_CAPTURE=fallback`` it launches a fixed config instead, warns, and
records the miss. The key stays untuned, so a launch after the capture tunes it.

**Frozen** (``TRITON_DIST_AUTOTUNE_FROZEN``): a miss (a key neither in memory nor among the
persisted picks) never times anything. ``strict`` raises ``FrozenMiss``; ``nearest`` launches a
fixed config, keeps it for that key in this process, and records the miss.

The fixed config is the pick of the nearest tuned key (``store.keys.nearest``: same length, same
non-numeric parts such as dtypes, closest in the log-ratio of the numbers), else the first
config. Every miss is appended to ``misses.jsonl`` in the cache root, which
``triton-dist-tune misses`` lists.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

from . import _callsite, distributed, engine, settings
from .hook_objects import TuningRequest
from .store import cache, describe, filestore, keys

ENV = "TRITON_DIST_AUTOTUNE_ON_CAPTURE"
FROZEN_ENV = "TRITON_DIST_AUTOTUNE_FROZEN"
MISSES = "misses.jsonl"


class FrozenMiss(RuntimeError):
    """Frozen mode met a key that was never tuned."""


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
    """A miss met during a capture where no fixed config can stand in (a tuner subclass's own
    loop decides what runs; a contextual or function-level job without the fallback): raise
    before anything is timed."""
    raise TuningDuringCapture(
        f"{name}: tuning would start while a CUDA graph is being captured, where candidates can neither be "
        "timed nor synchronised. Nothing was enqueued: the capture and the process are still usable. Run it once "
        "with these shapes and dtypes before capturing (a warm-up step tunes it).")


def fallback(name: str, key: Any, tuned: dict, first: Any, autotuner: Any = None, device: str = "cuda") -> Any:
    """What to run for untuned ``key`` during a capture (``tuned``: key -> pick so far, ``first``:
    the first candidate), or raise ``TuningDuringCapture`` unless the setting asks for a fallback."""
    if settings.value(ENV) != "fallback":
        raise TuningDuringCapture(
            f"{name}: key {key} was never tuned, and a CUDA graph is being captured, where tuning can neither "
            "time nor synchronise. Nothing was enqueued: the capture and the process are still usable. Launch "
            "the kernel once with these shapes and dtypes before capturing (a warm-up step tunes it), or set "
            f"{ENV}=fallback to launch a fixed config during capture.")
    return _substitute(name, key, tuned, first, autotuner, device, "CUDA graph capture", f"{ENV}=fallback",
                       "A launch after the capture tunes this key.")


def mode() -> Optional[str]:
    """``strict``, ``nearest``, or None when tuning is allowed."""
    return settings.value(FROZEN_ENV) or None


def on_miss(name: str, key: Any, tuned: dict, first: Any, autotuner: Any = None, device: str = "",
            ahead: str = "", favoured: Any = None) -> Any:
    """Frozen mode's answer to a miss: raise (``strict``) or the config to launch (``nearest``).
    ``ahead``: how to tune this key ahead, where it is not the plugin's own store that keeps picks;
    ``favoured``: the config the stored keys around it favour, where the data trusts that over the
    nearest key's pick (``store/predict``)."""
    if mode() == "strict":
        record_miss(name, key, "strict")
        ahead = ahead or (f"run this launch once without {FROZEN_ENV} (the pick persists on disk for every later "
                          "process)")
        raise FrozenMiss(
            f"{name}: key {key} was never tuned, and {FROZEN_ENV}=strict forbids tuning. Tune it ahead: {ahead}, or "
            f"set {FROZEN_ENV}=nearest to launch the nearest tuned key's pick. 'triton-dist-tune misses' lists every "
            "key this met.")
    return _substitute(name, key, tuned, first, autotuner, device, "frozen mode", f"{FROZEN_ENV}=nearest",
                       "Tune it ahead to use its own pick.", favoured)


def shared_pick(group: Any, config: Any, known: list, name: str) -> Any:
    """Under a group, the config rank 0 chose for a frozen miss (each rank's memory and disk may
    hold other picks), found among ``known`` by its description; ``config`` alone, or where rank
    0's is unknown here."""
    if group is None:
        return config
    chosen = distributed.from_first(group, describe.describe(config), f"sharing the frozen pick of {name}")
    return next((c for c in known if describe.describe(c) == chosen), config)


def _substitute(name, key, tuned, first, autotuner, device, where, setting, advice, favoured=None) -> Any:
    near = keys.nearest(list(tuned), key)
    config = tuned[near] if near is not None else first
    source = f"the pick for the nearest tuned key {near}" if near is not None else "the first config"
    if favoured is not None:  # the stored keys around it agree on another config, and held out, it did better
        config, source = favoured, "the config the tuned keys around it favour"
    warnings.warn(f"{name}: key {key} was never tuned ({where}); launching {source} ({config}) without tuning "
                  f"({setting}). {advice}", RuntimeWarning, stacklevel=_callsite.stacklevel())
    request = TuningRequest(name, key, device, autotuner=autotuner)
    request.found.notes.append(f"untuned key met during {where}: launched {source}")
    engine.record(request, None, config, {}, method="none", cache_hit=False)
    record_miss(name, key, where)
    return config


def record_miss(name: str, key: Any, why: str) -> None:
    """Append the miss to ``misses.jsonl``; a failed write warns and never stops the launch."""
    root = cache.cache_root()
    if cache.blocked(root):
        return  # the one warning about the cache directory said it: no warning per miss
    path = root / MISSES
    line = json.dumps({"kernel": name, "key": repr(key), "why": why,
                       "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat()})
    try:
        filestore.append_line(path, line, root=root)  # one untearable write, never through a link
    except OSError as exc:
        warnings.warn(f"cannot record the miss of {name} key {key} in {path} ({exc})", RuntimeWarning,
                      stacklevel=_callsite.stacklevel())


def misses(root: Optional[Path] = None) -> list[dict]:
    """Every recorded miss, oldest first; unreadable lines are skipped."""
    root = root or cache.cache_root()
    raw = filestore.read_bytes(root / MISSES, root=root)
    out = []
    for text in (raw or b"").decode(errors="replace").splitlines():
        try:
            item = json.loads(text)
        except (ValueError, RecursionError):  # a torn or hostile line: skipped
            continue
        if isinstance(item, dict) and isinstance(item.get("kernel"), str) and isinstance(item.get("key"), str):
            out.append(item)
    return out
