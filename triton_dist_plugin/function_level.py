"""Function-level autotuning: pick the fastest configuration of a whole host function.

.. code-block:: python

    from triton_dist_plugin.tune import autotune

    @autotune(config_space=[{"cfg": c} for c in configs], key_fn=lambda x, alpha: (tuple(x.shape), str(x.dtype)))
    def scale(x, alpha, cfg):
        ...

    y = scale(x, 2.5)                      # tunes once per key, then reuses the pick
    y = scale(x, 2.5, autotune_pg=group)   # every rank of ``group`` picks the same config

Each retained candidate runs 5 warm-up and 10 timed calls of the whole function (device events,
the wall clock on the CPU); a candidate that raises is timed as infinity and tuning goes on. The
pick is kept in ``best_configs[key]`` and in a JSON disk cache (see :mod:`.cache`), and the
function is called once more with it; that call's result is returned. Threads calling with one
key tune it once: the first tunes under the key's lock, the others wait for its pick.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import threading
import warnings
from typing import Any, Callable, Optional

from . import _callsite, _compat, distributed, engine, frozen, settings
from .hook_objects import TuningRequest
from .reporting import report
from .search import strategy as search
from .store import cache, describe, manifest

log = logging.getLogger("triton_dist_plugin.tune")

N_WARMUP, N_REPEAT = 5, 10


def _device() -> str:
    if _compat.interpret():
        return "cpu"
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    return "npu" if npu is not None and npu.is_available() else "cpu"


class AutoTuner:
    """What ``@autotune`` returns: call it like the function; ``best_configs`` holds the picks."""

    def __init__(self, fn: Callable, config_space: list, key_fn: Callable, prune_fn: Optional[Callable] = None):
        if not callable(fn):
            raise TypeError(f"@autotune decorates a function, got {fn!r}")
        if not isinstance(config_space, (list, tuple)) or not config_space:
            raise ValueError(f"autotune({getattr(fn, '__qualname__', fn)}): config_space must be a non-empty list of "
                             "dicts of keyword arguments; put a stable configuration first (used when autotune=False)")
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for i, entry in enumerate(config_space):
            if not isinstance(entry, dict) or not entry:
                raise ValueError(f"config_space[{i}] of {fn.__qualname__} must be a non-empty dict, got {entry!r}")
            unknown = [k for k in entry if not takes_any and k not in params]
            if unknown:
                raise ValueError(f"config_space[{i}] of {fn.__qualname__} sets {', '.join(unknown)}, which "
                                 f"{fn.__qualname__}() does not accept; add them as keyword parameters")
        if not callable(key_fn):
            raise TypeError(f"autotune({fn.__qualname__}): key_fn must be callable")
        if prune_fn is not None and not callable(prune_fn):
            raise TypeError(f"autotune({fn.__qualname__}): prune_fn must be callable or None")
        self.fn, self.config_space, self.key_fn, self.prune_fn = fn, list(config_space), key_fn, prune_fn
        self.fields = {k for entry in self.config_space for k in entry}
        self.best_configs: dict = {}
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self._source: Optional[str] = None
        self._told_address = False  # warned that key_fn's keys hold a memory address
        self._key_locks: dict = {}  # one per key ever tuned: small, and never swapped under a waiter
        self._locks_guard = threading.Lock()
        functools.update_wrapper(self, fn)

    def _call(self, args: tuple, kwargs: dict, config: dict, allow_overwrite: bool):
        conflicts = sorted(self.fields & kwargs.keys())
        if conflicts and not allow_overwrite:
            raise ValueError(f"{self.fn.__qualname__}: {', '.join(conflicts)} passed by the caller, but they are "
                             "tuned configuration fields; drop them or pass autotune_allow_arg_overwrite=True")
        return self.fn(*args, **{**config, **kwargs})

    def __call__(self, *args: Any, autotune: bool = True, autotune_verbose: bool = False,
                 autotune_allow_arg_overwrite: bool = False, autotune_pg: Any = None, **kwargs: Any):
        if not autotune:
            return self._call(args, kwargs, self.config_space[0], autotune_allow_arg_overwrite)
        key = self.key_fn(*args, **kwargs)
        try:
            best = self.best_configs.get(key)
        except TypeError as exc:  # an unhashable key: say which function returned it, and what to return
            raise TypeError(_unhashable(self.name, key, exc)) from None
        if best is None:
            _require_value_key(self.name, key, lambda: self.key_fn(*args, **kwargs))
            if self.fields & kwargs.keys() and not autotune_allow_arg_overwrite:
                return self._call(args, kwargs, {}, False)  # raises the clear error before any tuning
            if frozen.capturing():  # timing would break the capture: raise, or run a fixed config untuned
                config = frozen.fallback(self.name, key, self.best_configs, self.config_space[0])
                return self._call(args, kwargs, config, autotune_allow_arg_overwrite)
            # Reentrant, so a function that calls itself for the same key while tuning cannot deadlock.
            with self._key_lock(key):
                best = self.best_configs.get(key)  # another thread may have tuned it while we waited
                if best is None:
                    best = self._tune(key, args, kwargs, distributed.function_group(autotune_pg), autotune_verbose,
                                      autotune_allow_arg_overwrite)
        return self._call(args, kwargs, best, autotune_allow_arg_overwrite)

    def _key_lock(self, key: Any) -> threading.RLock:
        with self._locks_guard:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.RLock()
            return lock

    # -- tuning -------------------------------------------------------------------------------

    def _tune(self, key: Any, args: tuple, kwargs: dict, group: Any, verbose: bool, overwrite: bool) -> dict:
        import datetime as dt

        settings.validate()  # a bad setting fails here, before any work or collective
        device = _device()
        method = "wall" if device == "cpu" else "event"  # the whole function, timed as the seed says
        world = 1
        rank = 0
        if group is not None:
            import torch.distributed as dist

            world, rank = dist.get_world_size(group), dist.get_rank(group)
        if self._source is None:
            self._source = describe.source_digest(self.fn)
        # One directory per function name, as the seed API lays it out; same-named functions stay
        # apart through the source digest in each file's key.
        store = cache.FunctionCache(self.name, self._source, describe.hardware(device, world), self.fn.__name__)
        reprs = [describe.describe(c) for c in self.config_space]
        retained = [i for i, c in enumerate(self.config_space) if self.prune_fn is None or
                    self.prune_fn(c, *args, **kwargs)]
        if not retained:
            raise ValueError(f"{self.fn.__qualname__}: prune_fn kept none of the {len(self.config_space)} "
                             f"candidates for key {key!r}; it must keep at least one")
        if not self._told_address and _ADDRESS.search(repr(key)):
            self._told_address = True
            warnings.warn(f"autotune({self.name}): key_fn returned {_short(key)}, whose text holds a memory address; "
                          "it differs in every process, so each process tunes again and writes a new cache file. "
                          "Make key_fn return values that print the same in every run (shapes, ints, str(dtype)).",
                          RuntimeWarning, stacklevel=_callsite.stacklevel())
        manifest.load_from_env()
        record = store.load(key, reprs)
        cached = record["pick"] if record is not None and record["pick"] in retained else None
        if group is not None:
            # The candidates themselves, not their positions: equal-length spaces with other values differ.
            cached = distributed.agree(group, self.name, key, [reprs[i] for i in retained], cached)
        logger = _logger(verbose and rank == 0)
        if cached is not None:
            logger.info("%s: key %r found in the cache: %s", self.name, key, reprs[cached])
            self.best_configs[key] = self.config_space[cached]
            return self.config_space[cached]
        if frozen.mode():  # a miss never times anything: raise, or the nearest key's pick
            self.best_configs[key] = frozen.on_miss(self.name, key, self.best_configs, self.config_space[0],
                                                         device=device)
            return self.best_configs[key]

        logger.info("%s: tuning key %r over %d of %d candidates on %s%s", self.name, key, len(retained),
                    len(self.config_space), device, f" with {world} ranks" if world > 1 else "")
        request = TuningRequest(self.name, key if _hashable(key) else repr(key), device, {}, dict(kwargs))
        bar = report.progress_bar(len(retained), self.fn.__qualname__, rank == 0)
        lines: list[str] = []

        def make_call(index: int) -> Callable[[], Any]:
            call_kwargs = {**kwargs, **self.config_space[index]} if not overwrite else {**self.config_space[index],
                                                                                        **kwargs}
            return lambda: self.fn(*args, **call_kwargs)

        def on_candidate(index: int, timing: list, reason: Optional[str]) -> None:
            text = f"candidate {index} {reprs[index]}: " + (f"{timing[0]:.4f} ms" if reason is None else
                                                             f"failed: {reason}")
            lines.append(text)
            logger.info("  %s", text)
            if bar is not None:
                bar.update(1)

        try:
            # A large space is searched (``search.py``), the candidates compiling on their first call;
            # a small one is measured whole, each candidate fully.
            large = len(retained) > search.whole_limit() and settings.value(search.SEARCH_ENV) != "exhaustive"
            outcome = engine.run_candidates(request, retained, make_call, method=method,
                                            n_warmup=N_WARMUP, n_repeat=N_REPEAT, group=group,
                                            on_candidate=on_candidate, screen=engine.Screen() if large else None,
                                            features=lambda index: dict(self.config_space[index]),
                                            settled=False)
        finally:
            if bar is not None:
                bar.close()
        best = outcome.best
        # Observers and the report see the configurations themselves, by their description.
        named = engine.Outcome(best=reprs[best], timings={reprs[i]: t for i, t in outcome.timings.items()},
                               failures={reprs[i]: r for i, r in outcome.failures.items()},
                               bench_time=outcome.bench_time, measured=[reprs[i] for i in outcome.measured])
        engine.record(request, named, named.best, named.timings, method=method, cache_hit=False)
        logger.info("%s: picked candidate %d %s in %.2fs", self.name, best, reprs[best], outcome.bench_time)
        self.best_configs[key] = self.config_space[best]  # kept whatever happens on disk
        if distributed.writes_cache(group):
            try:
                store.store(key, {
                    "pick": best, "pick_config": reprs[best], "method": method,
                    "bench_time_s": outcome.bench_time, "retained": retained,
                    "candidates": [{"index": i, "config": reprs[i], "ms": t if all(map(_finite, t)) else None,
                                    "failure": outcome.failures.get(i), "measured": i in outcome.measured}
                                   for i, t in outcome.timings.items()],
                })
            except OSError as exc:  # a full disk, an unwritable directory or a store that is down
                cache.warn_unwritable(self.name, store.dir, key, exc)
            stamp = dt.datetime.now(dt.timezone.utc).isoformat()
            store.log(key, f"[{stamp}] {self.name} key={key!r} device={device} world={world}\n"
                      + "".join(f"  {line}\n" for line in lines)
                      + f"  pick: candidate {best} {reprs[best]} ({outcome.bench_time:.2f}s)\n")
        return self.config_space[best]


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))


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


def _logger(verbose: bool) -> logging.Logger:
    if verbose and not any(getattr(h, "_tdp", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[triton-dist-plugin] %(message)s"))
        handler._tdp = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)
    return log


def autotune(
    config_space: list, key_fn: Callable, prune_fn: Optional[Callable] = None
) -> Callable[[Callable], AutoTuner]:
    """Decorate a host function to pick, per ``key_fn(*args, **kwargs)``, the fastest entry of
    ``config_space`` (dicts injected as keyword arguments); ``prune_fn(entry, *args, **kwargs)``
    drops candidates before timing."""
    return lambda fn: AutoTuner(fn, config_space, key_fn, prune_fn)
