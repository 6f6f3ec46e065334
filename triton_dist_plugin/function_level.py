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
pick is kept in ``best_configs[key]`` and in a JSON disk cache (see :mod:`.store.cache`), and the
function is called once more with it; that call's result is returned. Threads calling with one
key tune it once: the first tunes under the key's lock, the others wait for its pick.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import warnings
from typing import Any, Callable, Optional

from . import _callsite, _compat, distributed, engine, frozen, job, settings
from .function_keys import _ADDRESS, _hashable, _require_value_key, _short, _unhashable
from .hook_objects import TuningRequest
from .reporting import report
from .search import strategy as search
from .store import cache, describe, filestore, manifest, records

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
        settings.validate()  # a bad setting fails here, before any work or collective
        return job.run(FunctionJob(self, key, args, kwargs, group, verbose, overwrite))


class FunctionJob(job.Job):
    """A miss of a function-level tuner: its picks live in ``best_configs`` and in its JSON cache
    (``store.cache.FunctionCache``); a candidate is a position in ``config_space``, timed as whole
    calls of the function, exactly ``N_WARMUP`` + ``N_REPEAT`` of them (as the seed says)."""

    def __init__(self, tuner: AutoTuner, key: Any, args: tuple, kwargs: dict, group: Any, verbose: bool,
                 overwrite: bool):
        self.tuner, self.key, self.args, self.kwargs, self.group, self.overwrite = (tuner, key, args, kwargs, group,
                                                                                    overwrite)
        self.name, space = tuner.name, tuner.config_space
        self.device = _device()
        self.method = "wall" if self.device == "cpu" else "event"  # the whole function, timed as the seed says
        self.world, self.rank = 1, 0
        if group is not None:
            import torch.distributed as dist

            self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if tuner._source is None:
            tuner._source = describe.source_digest(tuner.fn)
        # One directory per function name, as the seed API lays it out; same-named functions stay
        # apart through the source digest in each file's key.
        self.store = cache.FunctionCache(self.name, tuner._source, describe.hardware(self.device, self.world),
                                         tuner.fn.__name__)
        self.reprs = [describe.describe(c) for c in space]
        self.retained = [i for i, c in enumerate(space) if tuner.prune_fn is None or tuner.prune_fn(c, *args, **kwargs)]
        if not self.retained:
            raise ValueError(f"{tuner.fn.__qualname__}: prune_fn kept none of the {len(space)} "
                             f"candidates for key {key!r}; it must keep at least one")
        # The candidates themselves, not their positions: equal-length spaces with other values differ.
        self.labels, self.checks = [self.reprs[i] for i in self.retained], {}
        if not tuner._told_address and _ADDRESS.search(repr(key)):
            tuner._told_address = True
            warnings.warn(f"autotune({self.name}): key_fn returned {_short(key)}, whose text holds a memory address; "
                          "it differs in every process, so each process tunes again and writes a new cache file. "
                          "Make key_fn return values that print the same in every run (shapes, ints, str(dtype)).",
                          RuntimeWarning, stacklevel=_callsite.stacklevel())
        self.logger = _logger(verbose and self.rank == 0)
        self.request = TuningRequest(self.name, key if _hashable(key) else repr(key), self.device, {}, dict(kwargs),
                                     group=group)
        self.lines: list[str] = []

    def read(self) -> Optional[job.Found]:
        manifest.load_from_env()
        found = self.store.find(self.key, self.reprs)
        if found is None or found[1]["pick"] not in self.retained:
            return None
        where, record, store = found
        items = record["candidates"]  # in this version's layout, whatever format it was stored in
        # Equal entries of config_space share a description: the pick's own row speaks for it.
        timings = {c["config"]: _stored_ms(c["timing"]) for c in items if c["index"] != record["pick"]}
        timings.update({c["config"]: _stored_ms(c["timing"]) for c in items if c["index"] == record["pick"]})
        return job.Found(record["pick"], timings, where, [c["config"] for c in items if c["measured"]],
                         record.get("decision"), record.get("timer"), filestore.other_than_files(store))

    def hit(self, index: int, found: Optional[job.Found]) -> dict:
        self.logger.info("%s: key %r found in the cache: %s", self.name, self.key, self.reprs[index])
        self.tuner.best_configs[self.key] = self.tuner.config_space[index]
        self.request.found.notes.append(f"pick read from {found.where}" if found is not None else
                                        "pick shared by a rank")
        return self.tuner.config_space[index]

    def during_capture(self) -> dict:
        # Raise, or run a fixed config untuned; never kept in best_configs, so a call after the
        # capture tunes the key.
        return frozen.fallback(self.name, self.key, self.tuner.best_configs, self.tuner.config_space[0])

    def frozen_miss(self) -> dict:
        tuner = self.tuner
        tuner.best_configs[self.key] = frozen.on_miss(self.name, self.key, tuner.best_configs, tuner.config_space[0],
                                                      device=self.device)
        return tuner.best_configs[self.key]

    def tune(self) -> engine.Outcome:
        tuner, space, reprs, logger = self.tuner, self.tuner.config_space, self.reprs, self.logger
        logger.info("%s: tuning key %r over %d of %d candidates on %s%s", self.name, self.key, len(self.retained),
                    len(space), self.device, f" with {self.world} ranks" if self.world > 1 else "")
        bar = report.progress_bar(len(self.retained), tuner.fn.__qualname__, self.rank == 0)

        def make_call(index: int) -> Callable[[], Any]:
            call_kwargs = {**self.kwargs, **space[index]} if not self.overwrite else {**space[index], **self.kwargs}
            return lambda: tuner.fn(*self.args, **call_kwargs)

        def on_candidate(index: int, timing: list, reason: Optional[str]) -> None:
            text = f"candidate {index} {reprs[index]}: " + (f"{timing[0]:.4f} ms" if reason is None else
                                                             f"failed: {reason}")
            self.lines.append(text)
            logger.info("  %s", text)
            if bar is not None:
                bar.update(1)

        try:
            # A large space is searched (``search/``), the candidates compiling on their first call;
            # a small one is measured whole, each candidate fully.
            large = len(self.retained) > search.whole_limit() and settings.value(search.SEARCH_ENV) != "exhaustive"
            return engine.run_candidates(self.request, self.retained, make_call, method=self.method,
                                         n_warmup=N_WARMUP, n_repeat=N_REPEAT, group=self.group,
                                         on_candidate=on_candidate, screen=engine.Screen() if large else None,
                                         features=lambda index: dict(space[index]), settled=False)
        finally:
            if bar is not None:
                bar.close()

    def keep(self, outcome: engine.Outcome) -> dict:
        self.logger.info("%s: picked candidate %d %s in %.2fs", self.name, outcome.best, self.reprs[outcome.best],
                         outcome.bench_time)
        self.tuner.best_configs[self.key] = self.tuner.config_space[outcome.best]  # kept whatever happens on disk
        return self.tuner.best_configs[self.key]

    def persist(self, outcome: engine.Outcome) -> None:
        import datetime as dt

        best, reprs = outcome.best, self.reprs
        try:
            self.store.store(self.key, {
                "pick": best, "pick_config": reprs[best], "method": self.method,
                "bench_time_s": outcome.bench_time, "retained": self.retained,
                # A timing with any part not finite is stored as none (the candidate "timed as infinity").
                "candidates": [records.row(i, reprs[i], t if all(map(_finite, t)) else [None] * len(t),
                                           outcome.failures.get(i), i in outcome.measured)
                               for i, t in outcome.timings.items()],
                **({"decision": dict(outcome.decision)} if outcome.decision else {}),
                **({"timer": timer} if (timer := engine.shown_timer(self.request)) else {}),
            })
        except OSError as exc:  # a full disk, an unwritable directory or a store that is down
            cache.warn_unwritable(self.name, self.store.dir, self.key, exc)
        stamp = dt.datetime.now(dt.timezone.utc).isoformat()
        self.store.log(self.key, f"[{stamp}] {self.name} key={self.key!r} device={self.device} world={self.world}\n"
                       + "".join(f"  {line}\n" for line in self.lines)
                       + f"  pick: candidate {best} {reprs[best]} ({outcome.bench_time:.2f}s)\n")

    def record(self, outcome: Optional[engine.Outcome], best: dict, found: Optional[job.Found]) -> None:
        """Observers and the report see the configurations themselves, by their description."""
        reprs = self.reprs
        if outcome is None:  # a hit: the stored entry's timings (another rank's hit: none here)
            engine.record(self.request, None, describe.describe(best), found.timings if found else {},
                          method=self.method, cache_hit=True, measured=found.measured if found else None,
                          decision=found.decision if found else None, timer=found.timer if found else None,
                          stored_in=found.stored_in if found else None)
            return
        named = engine.Outcome(best=reprs[outcome.best], timings={reprs[i]: t for i, t in outcome.timings.items()},
                               failures={reprs[i]: r for i, r in outcome.failures.items()},
                               bench_time=outcome.bench_time, measured=[reprs[i] for i in outcome.measured],
                               decision=outcome.decision)
        engine.record(self.request, named, named.best, named.timings, method=self.method, cache_hit=False)


def _stored_ms(timing: Any) -> list:
    """A stored candidate's ``timing`` (a number, or one to three numbers: what ``records.check``
    lets through) as ``[p50, p20, p80]``; a failed one (no time) as infinity."""
    values = [timing] if not isinstance(timing, (list, tuple)) else list(timing)
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float("inf")] * 3
    return [float(v) for v in (values + [values[0]] * 2)[:3]]


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))


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
