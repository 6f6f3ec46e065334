"""Tuning on a miss, once ``launch.tune`` has chosen the candidates: the persisted pick looked up
and agreed on, or the candidates readied (compiled, run in the isolation worker, checked) and
timed by the engine, and the pick kept in upstream's attributes and on disk.

Apart from ``launch`` so that the hot path's module holds only what a launch runs every time;
this is what a miss runs once per key.
"""

from __future__ import annotations

import time
from typing import Any

from .. import _compat, distributed, engine, failures, frozen, job, timing
from ..compiling.precompile import never_timed
from ..hook_objects import TuningRequest
from ..isolation import isolate, isolate_source
from ..reporting import report
from ..search import strategy as search
from ..store import cache, describe, keys, persist
from . import accuracy, machine_fill
from .accuracy import accuracy_check_enabled
from .benchmarker import screen_for, user_do_bench
from .candidates import call_hooks, compile_all, make_call_factory, split_launch
from .kernel_state import KernelState
from .warm_start import warm_start


class _KeepFirst(Exception):
    """Every candidate failed as upstream times a failure (infinitely slow): as upstream, the
    first is kept (in memory only) and its launch raises what stopped it, which code may catch."""


def bench_and_record(instance: Any, state: KernelState, request: TuningRequest, key: tuple, args: tuple,
                     kwargs: dict, named: dict, configs: list) -> Any:
    """Time ``configs`` (``named``: every kernel argument of the launch, by name) and keep the pick:
    the one tuning job (``job.run``), but where upstream's own disk cache (``cache_results``) is in
    charge: its flow then, with the engine as its benchmark."""
    miss = KernelJob(instance, state, request, key, args, kwargs, named, configs)
    try:
        # Tuning together, a disk-cache hit on one rank and a miss on another would hang the others:
        # the group always takes the job's path (and the slowest rank decides).
        if miss.group is None and getattr(instance, "cache_results", False) and hasattr(instance, "check_disk_cache"):
            cache_hit = bool(instance.check_disk_cache(key, configs, miss.bench))
            miss.record(None if cache_hit else miss.outcome, instance.cache[key], None)
            return instance.cache[key]
        return job.run(miss)
    except _KeepFirst:
        instance.cache[key] = configs[0]
        return configs[0]


class KernelJob(job.Job):
    """A miss of a patched ``Autotuner``: its picks live in upstream's attributes (``cache``,
    ``configs_timings``, ``bench_time``) and in the kernel-level store (``persist``)."""

    def __init__(self, instance: Any, state: KernelState, request: TuningRequest, key: tuple, args: tuple,
                 kwargs: dict, named: dict, configs: list):
        self.instance, self.state, self.request, self.key = instance, state, request, key
        self.args, self.kwargs, self.named, self.configs = args, kwargs, named, configs
        self.name, self.labels, self.group = state.name, [str(c) for c in configs], request.group
        self.method = timing.resolve_method(request.device)
        self.method_named = timing.method_named(request.device, self.method)  # stored and shown: picks keyed on it
        self.pre, post = call_hooks(instance)
        self.make_call = make_call_factory(instance, state, args, kwargs, self.pre, post)
        self.checks = {"accuracy": accuracy_check_enabled(instance), "isolated": isolate.enabled(state.generate)}
        self.outcome: Any = None
        self.worker: Any = None  # the isolation worker this tuning used, if any
        # Keyed on every check it is made with: a pick stored without the accuracy check or isolation
        # is never reused with them.
        self.store = persist.KernelStore(state.name, instance.fn, request.device,
                                         distributed.world_size(self.group), configs, self.method_named,
                                         self.checks["accuracy"], self.checks["isolated"]) \
            if persist.enabled(instance) else None

    def read(self) -> Any:
        found = self.store.read(self.key, self.configs) if self.store is not None else None
        return job.Found(*found) if found is not None else None

    def reset_only(self, config: Any) -> None:
        # Upstream's own dict, in its order: positional arguments, launch keywords, the pick's.
        self.pre({**dict(zip(self.state.arg_names, self.args)), **self.kwargs, **self.state.launch_kwargs(config)},
                 reset_only=True)

    def hit(self, index: int, found: Any) -> Any:
        """Tuned before, in this process or another (or on another rank): nothing is timed, and
        upstream's attributes read as after a tuning (the stored timings; another rank's hit: none)."""
        instance, config = self.instance, self.configs[index]
        instance.cache[self.key] = config
        instance.configs_timings = dict(found.timings) if found is not None else {}
        instance.bench_time = 0.0
        self.reset_only(config)
        self.request.found.notes.append(f"pick read from {found.where}" if found is not None else
                                        "pick shared by a rank")
        return config

    def frozen_miss(self) -> Any:
        instance, state, key, configs = self.instance, self.state, self.key, self.configs
        fill = machine_fill.for_launch(instance, state.keys, self.named, self.request.grid) \
            if self.store is not None else None
        near = self.store.frozen_pick(key, configs, fill) if self.store is not None else None  # from the index
        # Keys tuned in this process, not those given a substitute in frozen mode (no chain of guesses).
        tuned = {**({near[0]: near[1]} if near is not None else {}),
                 **{k: c for k, c in instance.cache.items() if k not in state.substituted}}
        # The weighted pick is from the stored keys: a closer key this process knows keeps its own.
        favoured = near[1] if near is not None and near[2] and keys.nearest(list(tuned), key) == near[0] else None
        config = frozen.on_miss(state.name, key, tuned, configs[0], instance, self.request.device, favoured=favoured)
        instance.cache[key] = frozen.shared_pick(self.group, config, [*configs, *tuned.values()], state.name)
        state.substituted.add(key)
        return instance.cache[key]

    def tune(self) -> engine.Outcome:
        try:
            self.bench()
        except failures.NoValidConfig as exc:
            if not failures.all_upstream_failures(exc.failures):
                raise
            raise _KeepFirst() from None
        return self.outcome

    def keep(self, outcome: engine.Outcome) -> Any:
        return self.instance.cache[self.key]  # set by ``bench``, as upstream's own flow sets it

    def persist(self, outcome: engine.Outcome) -> None:
        if self.store is not None:
            _persist(self.store, self.state, self.key, outcome, self.method_named, self.request)

    def record(self, outcome: Any, best: Any, found: Any) -> None:
        instance, cache_hit = self.instance, outcome is None
        timings = getattr(instance, "configs_timings", None) or {}
        # The record holds [p50, p20, p80] lists; configs_timings keeps what the benchmarker returned.
        listed = outcome.timings if outcome is not None else {
            c: list(t) if isinstance(t, (list, tuple)) else [t] * 3 for c, t in timings.items()}
        # A hit's record tells the stored full measurements from the screening rounds, as a tuning's does.
        engine.record(self.request, outcome, best, listed, method=self.method_named, cache_hit=cache_hit,
                      measured=found.measured if found is not None else None,
                      decision=found.decision if found is not None else None,
                      timer=found.timer if found is not None else None,
                      stored_in=found.stored_in if found is not None else None)
        listener = _compat.autotuning_listener()
        if listener is not None:
            listener(fn=_compat.jit_function(instance.fn), key=self.key, best_config=best, configs_timings=timings,
                     duration=None if cache_hit else outcome.bench_time, cache_hit=cache_hit)

    def bench(self) -> None:
        """Ready and time the candidates, and set upstream's attributes from the outcome (also
        upstream's ``check_disk_cache``'s benchmark)."""
        instance, state, request, key, configs, group = (self.instance, self.state, self.request, self.key,
                                                         self.configs, self.group)
        bar, seen = None, set()

        def advance(config, timing, reason):  # each candidate once, whatever round timed it
            if id(config) not in seen:
                seen.add(id(config))
                bar.update(1)

        try:  # (the isolation worker, taken by ``readying``, is given back whatever happens after)
            prepare, gate = self.readying()
            do_bench = user_do_bench(instance)
            bar = report.progress_bar(len(configs), state.name, not distributed.rank(group))
            findings = request.found
            findings.prior, findings.prior_key, findings.prior_unseen = warm_start(state, self.store, key, configs,
                                                                                   group)
            self.outcome = outcome = engine.run_candidates(
                request, configs, self.make_call, method=self.method, do_bench=do_bench, group=group,
                screen=screen_for(instance, do_bench), upstream_errors=True,
                on_candidate=advance if bar is not None else None, prepare=prepare,
                anchor=(lambda: gate.anchor(group)) if gate else None)
        finally:
            if bar is not None:
                bar.close()
            if self.worker is not None:
                isolate.done(self.worker)
        if gate is not None:
            gate.finish()
        whole = len(configs) <= search.whole_limit()
        state.rankings[key] = ([describe.describe(c) for c in search.ranked(outcome.timings)],
                               [describe.describe(c) for c in configs] if whole else None)
        instance.bench_time = outcome.bench_time
        instance.configs_timings = {c: failures.raw(t) for c, t in outcome.timings.items()}
        instance.cache[key] = outcome.best
        self.reset_only(outcome.best)

    def readying(self) -> tuple:
        """``(prepare, gate)``: the engine's ``prepare`` (compile a step, run it in the isolation
        worker, check its results), and the accuracy check's ``Gate`` (None where it is off)."""
        instance, state, request, configs = self.instance, self.state, self.request, self.configs
        args, kwargs, named, group, make_call = self.args, self.kwargs, self.named, self.group, self.make_call
        worker, runs = _isolation(instance, state, args, kwargs, configs, request)  # runs candidates as they compile
        self.worker = worker
        position = {id(c): i for i, c in enumerate(configs)}

        def ready(subset: list, stream: Any = None, together: bool = True) -> tuple[dict, dict]:
            """Compile ``subset`` and run it in the isolation worker: ``(failed, unsafe)``, the
            compile failures and those that crashed or hung the worker. ``stream`` screens each
            as it compiles, and may leave hopeless ones uncompiled (``stream.py``). ``together``:
            every rank of the group readies the same ones now, and may split the compiles."""

            def arrived(j: int) -> None:  # subset[j] compiled: the worker runs it now, or it is screened
                if worker is None:
                    stream.ready(subset[j])
                    return
                i = position[id(subset[j])]
                worker.submit(i, *runs[i])

            failed = compile_all(instance, state, request, args, kwargs, subset, group if together else None,
                                 arrived if worker is not None or stream is not None else None,
                                 (lambda j: stream.wanted(subset[j])) if stream is not None else None)
            unsafe = _isolated(worker, request, configs, {position[id(c)]: runs[position[id(c)]] for c in subset},
                               failed) if worker is not None else {}
            return failed, unsafe

        # The reference is sought on each rank from its own results, so a candidate readied for it
        # alone is compiled by this rank alone (no exchange another rank may not make).
        gate = accuracy.Gate(state.name, accuracy.reference_order(configs, instance.configs, request.found.reference),
                             make_call, named, lambda extra: {k: v for d in ready(extra, together=False)
                                                              for k, v in d.items()}) \
            if accuracy_check_enabled(instance) else None

        def prepare(subset: list, stream: Any = None) -> dict:
            """Ready ``subset`` (all the candidates, or a search's step) and check its results:
            ``{config: reason}`` for those never to be timed. Without isolation or accuracy checks,
            ``stream`` screens each as it compiles; with them, nothing runs here before both."""
            failed, unsafe = ready(subset, stream if worker is None and gate is None else None)
            skipped = {c: r for c, r in failed.items() if never_timed(r)}  # left out, or given up
            # A candidate that failed to compile is still launched and timed, as upstream does: its
            # hooks and the kernel's own do_bench see the failure (a post_hook gets the exception).
            # One that crashed or hung the isolation worker is never run here.
            wrong = gate.check(subset, {**failed, **unsafe}) if gate is not None else {}
            return {**skipped, **unsafe, **wrong}

        return prepare, gate


def _persist(store: persist.KernelStore, state: KernelState, key: tuple, outcome: engine.Outcome,
             method: str, request: TuningRequest) -> None:
    try:
        store.store(key, outcome.best, outcome.timings, outcome.failures, outcome.measured, method, outcome.bench_time,
                    space=state.rankings[key][1], notes=request.found.notes, model=request.found.model,
                    decision=outcome.decision, timer=engine.shown_timer(request))
    except OSError as exc:  # a full disk or an unwritable directory must not lose the tuning
        cache.warn_unwritable(store.name, store.dir, key, exc)


def _isolation(instance: Any, state: KernelState, args: tuple, kwargs: dict, configs: list,
               request: TuningRequest) -> tuple[Any, dict]:
    """With isolation on: ``(worker, runs)``, the worker already started and given the kernel and
    its arguments, and ``runs[i]``: the launch of ``configs[i]`` (``(meta, grid)``) to hand it as
    each compiles. ``(None, {})`` with isolation off."""
    if not isolate.enabled(state.generate):
        return None, {}
    _, launch, named, _ = split_launch(state, args, kwargs)
    grid = kwargs.get("grid")
    layers = isolate_source.heuristics_of(instance.fn)[0]  # the grid sees their values, as at a launch
    runs: dict = {}
    for i, config in enumerate(configs):
        meta = state.launch_kwargs(config)
        try:
            full = isolate_source.with_heuristics(layers, args, launch, meta, grid) if layers else meta
            runs[i] = (meta, grid({**named, **launch, **full}) if callable(grid) else grid)
        except Exception as exc:  # noqa: BLE001 - the launch itself meets (and reports) the same error
            request.found.notes.append(
                f"not isolated: its grid could not be computed ahead ({type(exc).__name__}: {exc})")
            return None, {}
    worker = isolate.worker()
    worker.prepare(instance.fn, type(instance.fn).__name__, args, launch)
    return worker, runs


def _isolated(worker: Any, request: TuningRequest, configs: list, runs: dict, failed: dict) -> dict:
    """Each candidate run once in the isolation worker: ``{config: reason}`` for those that crashed,
    hung or raised there (see ``isolate.py``)."""
    started = time.perf_counter()
    todo = {i: run for i, run in runs.items() if configs[i] not in failed}  # did not compile: nothing to run
    try:
        unsafe = worker.finish(todo)
    except isolate.Unisolated as exc:
        request.found.notes.append(f"not isolated: {exc}")
        return {}
    request.found.notes.append(f"ran {len(todo)} candidates in the isolation worker, done "
                               f"{time.perf_counter() - started:.2f}s after compiling ({worker.timeline()}); "
                               f"{len(unsafe)} failed there")
    return {configs[i]: reason for i, reason in unsafe.items()}
