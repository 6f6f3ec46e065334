"""What the patched ``Autotuner`` does on a launch: the cache-hit path, and tuning on a miss.

The cache-hit path is the hot path: compute the key (upstream's exact tuple), look it up, and
launch with the config's keyword arguments merged once and kept (through ``direct`` on a GPU).
No environment reads, no per-call dictionaries of every argument, and no writes to shared state
except ``best_config``.

On a miss, tuning runs under one process-wide lock with all per-call state held locally, so
threads launching the same kernel with different keys never see each other's arguments
(upstream keeps them in ``self.nargs``, which races).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .. import _compat, distributed, engine, settings, timing, untuned
from ..compiling import forked_compile
from ..compiling.precompile import never_timed
from ..isolation import isolate, isolate_source
from ..reporting import report
from ..requests import TuningRequest
from ..search import strategy as search
from ..store import cache, persist
from . import kernel_state
from .accuracy import accuracy_check_enabled, check_accuracy
from .benchmarker import screen_for, user_do_bench
from .candidates import agree, call_hooks, check_conflicts, compile_all, make_call_factory, select_configs, split_launch
from .kernel_state import KernelState, state_of

_TUNE_LOCK = threading.RLock()


def run_wrapper(wrapped, instance, args, kwargs):
    """``Autotuner.run``: upstream's behaviour, with the engine on a miss."""
    state = instance.__dict__.get("_tdp_state") or state_of(instance)
    if len(instance.configs) > 1 or state.generate or state.hints:
        key = state.key(args, kwargs)
        config = instance.cache.get(key)
        if config is None:
            active = kernel_state.session
            if active is not None and active.thread == threading.get_ident():
                return active.launch(instance, state, key, args, kwargs)
            if untuned.capturing():  # nothing may be timed: raise, or launch a fixed config untuned
                config = untuned.fallback(state.name, key, instance.cache, instance.configs[0], instance)
                return _launch(instance, state, config, args, kwargs)
            config = tune(instance, state, key, args, kwargs)
        cache = instance.cache
        if len(cache) != state.cache_len:
            state.fast.clear()
            state.cache_len = len(cache)
        if len(kwargs) == 2 and len(args) >= state.min_args and config.pre_hook is None:
            state.fast[state.key_get(args)] = state.hit(config, instance.fn)
    else:
        config = instance.configs[0]
    if wrapped is not None and "run" not in instance.__dict__ and _plain_run(instance):
        instance.__dict__["run"] = _fast_run(instance, state)
        kernel_state.fast_instances.add(instance)
    return _launch(instance, state, config, args, kwargs)


def _launch(instance: Any, state: KernelState, config: Any, args: tuple, kwargs: dict):
    instance.best_config = config
    meta = state.launch_kwargs(config)
    if config.pre_hook is not None:
        config.pre_hook({**dict(zip(state.arg_names, args)), **kwargs, **meta})
    return instance.fn.run(*args, **kwargs, **meta)


def _plain_run(instance: Any) -> bool:
    """True when ``instance.run`` is the patched ``Autotuner.run`` (its class does not replace it)."""
    for klass in type(instance).__mro__:
        if "run" in klass.__dict__:
            return klass is _compat.Autotuner
    return False


def _fast_run(instance: Any, state: KernelState):
    """The cache-hit path, bound to one ``Autotuner`` as an instance attribute.

    Looking ``run`` up on the instance finds this closure before the class's wrapper, so a tuned
    launch pays for one key and one dict lookup, not for a wrapper call; on a GPU the hit is
    launched by the config's ``direct.Launcher`` rather than ``JITFunction.run``. Anything unusual
    (keywords for kernel arguments, a changed ``cache``, a miss, a config ``pre_hook``) takes the
    full path above.
    """
    fast, fast_key, min_args = state.fast, state.key_get, state.min_args

    def run(*args, **kwargs):
        # Two keywords can only be ``grid`` and ``warmup``: Triton's run() requires both, so a
        # launch with two keywords passed every kernel argument positionally.
        if len(kwargs) == 2 and len(args) >= min_args and len(instance.cache) == state.cache_len:
            hit = fast.get(fast_key(args))
            if hit is not None:
                instance.best_config = hit[0]
                if hit[2] is not None and not kwargs["warmup"]:
                    return hit[2](args, kwargs["grid"])
                return instance.fn.run(*args, **kwargs, **hit[1])
        return run_wrapper(None, instance, args, kwargs)

    return run


def tune(instance: Any, state: KernelState, key: tuple, args: tuple, kwargs: dict):
    """Tune ``instance`` for ``key`` and store the pick in ``instance.cache`` (upstream's attributes)."""
    settings.validate()  # a bad setting fails here, before any work or collective
    with _TUNE_LOCK:
        config = instance.cache.get(key)
        if config is not None:  # another thread finished it while we waited
            return config
        nargs, launch, named, meta = split_launch(state, args, kwargs)
        forked_compile.prestarted()  # the driver's first use below takes what it built
        device = _compat.active_device(required=user_do_bench(instance) is None)
        request = TuningRequest(state.name, key, device, named, meta, autotuner=instance, grid=kwargs.get("grid"))
        previous, kernel_state.current.request = getattr(kernel_state.current, "request", None), request
        instance.nargs = nargs  # read by prune_configs and perf models, as upstream
        try:
            configs = select_configs(instance, state, request, kwargs)
            check_conflicts(state.name, launch, configs)
            if len(configs) == 1:  # nothing to compare, as upstream
                instance.cache[key] = configs[0]
                return configs[0]
            return _bench_and_record(instance, state, request, key, args, kwargs, named, configs)
        finally:
            kernel_state.current.request = previous
            instance.nargs = None


def _bench_and_record(instance, state, request, key, args, kwargs, named, configs):
    """Time ``configs`` (``named``: every kernel argument of the launch, by name) and keep the pick."""
    method = timing.resolve_method(request.device)
    pre, post = call_hooks(instance)
    make_call = make_call_factory(instance, state, args, kwargs, pre, post)
    outcome = None
    group = distributed.kernel_group()
    # Keyed on every check it is made with: a pick stored without the accuracy check or isolation
    # is never reused with them.
    store = persist.KernelStore(state.name, instance.fn, request.device, distributed.world_size(group), configs,
                                method, accuracy_check_enabled(instance), isolate.enabled(state.generate)) \
        if persist.enabled(instance) else None
    found = store.read(key, configs) if store is not None else None
    stored = agree(group, state, key, configs, found[0] if found is not None else None)

    def reset_only(config: Any) -> None:
        # Upstream's own dict, in its order: positional arguments, launch keywords, the pick's.
        pre({**dict(zip(state.arg_names, args)), **kwargs, **state.launch_kwargs(config)}, reset_only=True)

    def bench():
        nonlocal outcome
        worker, runs = _isolation(instance, state, args, kwargs, configs, request)  # runs candidates as they compile
        position = {id(c): i for i, c in enumerate(configs)}
        checking, memo = accuracy_check_enabled(instance), {}

        def prepare(subset: list, stream: Any = None) -> dict:
            """Compile ``subset`` (all the candidates, or a search's step), run it in the isolation
            worker, check its results: ``{config: reason}`` for those never to be timed. Without
            isolation or accuracy checks, ``stream`` screens each as it compiles, and may leave
            hopeless ones uncompiled (``stream.py``); with them, nothing runs here before both."""
            streaming = stream is not None and worker is None and not checking

            def ready(j: int) -> None:  # subset[j] compiled: the worker runs it now, or it is screened
                if worker is None:
                    stream.ready(subset[j])
                    return
                i = position[id(subset[j])]
                worker.submit(i, *runs[i])

            failed = compile_all(instance, state, request, args, kwargs, subset, group,
                                 ready if worker is not None or streaming else None,
                                 (lambda j: stream.wanted(subset[j])) if streaming else None)
            skipped = {c: r for c, r in failed.items() if never_timed(r)}  # left out, or given up
            unsafe = _isolated(worker, request, configs, {position[id(c)]: runs[position[id(c)]] for c in subset},
                               failed) if worker is not None else {}
            # A candidate that failed to compile is still launched and timed, as upstream does: its
            # hooks and the kernel's own do_bench see the failure (a post_hook gets the exception).
            # One that crashed or hung the isolation worker is never run here.
            wrong = check_accuracy(subset, make_call, named, {**failed, **unsafe}, memo) if checking else {}
            return {**skipped, **unsafe, **wrong}

        do_bench = user_do_bench(instance)
        bar, seen = report.progress_bar(len(configs), state.name, not distributed.rank(group)), set()

        def advance(config, timing, reason):  # each candidate once, whatever round timed it
            if id(config) not in seen:
                seen.add(id(config))
                bar.update(1)

        request.prior, request.prior_key, request.prior_unseen = warm_start(state, store, key, configs, group)
        try:
            outcome = engine.run_candidates(request, configs, make_call, method=method, do_bench=do_bench,
                                            group=group, screen=screen_for(instance, do_bench),
                                            upstream_errors=True, on_candidate=advance if bar is not None else None,
                                            prepare=prepare)
        finally:
            if bar is not None:
                bar.close()
        state.rankings[key] = ([cache.describe(c) for c in search.ranked(outcome.timings)],
                               [cache.describe(c) for c in configs] if len(configs) <= search.whole_limit() else None)
        instance.bench_time = outcome.bench_time
        instance.configs_timings = {c: engine.raw(t) for c, t in outcome.timings.items()}
        instance.cache[key] = outcome.best
        reset_only(outcome.best)

    cache_hit = False
    # Tuning together, a disk-cache hit on one rank and a miss on another would hang the others:
    # the group always tunes (and the slowest rank decides).
    if group is None and getattr(instance, "cache_results", False) and hasattr(instance, "check_disk_cache"):
        cache_hit = bool(instance.check_disk_cache(key, configs, bench))
    elif stored is not None:  # tuned before, in this process or another: nothing is timed
        instance.cache[key] = configs[stored]
        # Upstream's attributes as after a tuning: the stored timings (another rank's hit: none here).
        instance.configs_timings = dict(found[1]) if found is not None and found[0] == stored else {}
        instance.bench_time = 0.0
        reset_only(configs[stored])
        request.notes.append(f"pick read from {found[2]}" if found is not None and found[0] == stored else
                             "pick shared by a rank")
        cache_hit = True
    elif untuned.frozen():  # a miss never times anything: raise, or launch the nearest key's pick
        tuned = {**(store.picks(configs) if store is not None else {}), **instance.cache}
        instance.cache[key] = untuned.frozen_miss(state.name, key, tuned, configs[0], instance, request.device)
        return instance.cache[key]
    else:
        try:
            bench()
        except engine.NoValidConfig as exc:
            if not engine.all_upstream_failures(exc.failures):
                raise
            # As upstream: every candidate infinitely slow, the first is kept (in memory only) and
            # its launch raises what stopped it (OutOfResources, say), which code may catch.
            instance.cache[key] = configs[0]
            return configs[0]
        if store is not None and distributed.writes_cache(group):
            _persist(store, state, key, outcome, method, request.notes)
    best = instance.cache[key]
    timings = getattr(instance, "configs_timings", None) or {}
    # The record holds [p50, p20, p80] lists; configs_timings keeps what the benchmarker returned.
    listed = outcome.timings if outcome is not None else {
        c: list(t) if isinstance(t, (list, tuple)) else [t] * 3 for c, t in timings.items()}
    # A hit's record tells the stored full measurements from the screening rounds, as a tuning's does.
    engine.record(request, outcome, best, listed, method=method, cache_hit=cache_hit,
                  measured=found[3] if cache_hit and found is not None and found[0] == stored else None)
    listener = _compat.autotuning_listener()
    if listener is not None:
        listener(fn=_compat.jit_function(instance.fn), key=key, best_config=best, configs_timings=timings,
                 duration=None if cache_hit else outcome.bench_time, cache_hit=cache_hit)
    return best


def _persist(store: persist.KernelStore, state: KernelState, key: tuple, outcome: engine.Outcome,
             method: str, notes: list) -> None:
    try:
        store.store(key, outcome.best, outcome.timings, outcome.failures, outcome.measured, method, outcome.bench_time,
                    space=state.rankings[key][1], notes=notes)
    except OSError as exc:  # a full disk or an unwritable directory must not lose the tuning
        cache.warn_unwritable(store.name, store.dir, key, exc, stacklevel=5)


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
            request.notes.append(f"not isolated: its grid could not be computed ahead ({type(exc).__name__}: {exc})")
            return None, {}
    worker = isolate.worker()
    worker.prepare(instance.fn, type(instance.fn).__name__, args, launch)
    return worker, runs


def warm_start(state: KernelState, store: Any, key: tuple, configs: list, group: Any) -> tuple:
    """``(prior, prior_key, unseen)``: ``configs`` as the nearest tuned key ranked them (fastest
    first), from this process's tunings and the picks on disk, and those of ``configs`` that
    key's space did not hold where it was small enough to be kept (``configs=[]`` generates per
    shape: nothing is known of the others); ``(None, None, [])`` when no tuned key is near
    (``untuned.nearest``: same non-numeric parts, closest shapes; and within
    ``search.WARM_DISTANCE``: shapes at most 16 times apart in all), or with
    ``TRITON_DIST_AUTOTUNE_WARM_START=0``. Under a group every rank takes the group's rank 0's
    (the rank that writes the picks to disk, so the one that holds them)."""
    prior = near = None
    unseen: list = []
    if settings.value(search.WARM_ENV):
        tuned = {**(store.rankings() if store is not None else {}), **state.rankings}
        tuned.pop(key, None)
        near = untuned.nearest(list(tuned), key)
        if near is not None and untuned.distance(near, key) <= search.WARM_DISTANCE:
            by_name = {cache.describe(c): c for c in configs}
            ranking, held = tuned[near]
            prior = [by_name[d] for d in ranking if d in by_name] or None
            if prior and held is not None:
                held = set(held)
                unseen = [c for d, c in by_name.items() if d not in held]
    if group is not None:  # the ranks tune the same candidates (checked): rank 0's ranking, by position
        position = {id(c): i for i, c in enumerate(configs)}
        shared = distributed.from_first(group, [[position[id(c)] for c in prior or []], repr(near) if prior else None,
                                                [position[id(c)] for c in unseen]],
                                        f"sharing a warm start for {state.name}")
        prior, near, unseen = [configs[i] for i in shared[0]] or None, shared[1], [configs[i] for i in shared[2]]
    return prior, (near if prior else None), (unseen if prior else [])


def _isolated(worker: Any, request: TuningRequest, configs: list, runs: dict, failed: dict) -> dict:
    """Each candidate run once in the isolation worker: ``{config: reason}`` for those that crashed,
    hung or raised there (see ``isolate.py``)."""
    started = time.perf_counter()
    todo = {i: run for i, run in runs.items() if configs[i] not in failed}  # did not compile: nothing to run
    try:
        unsafe = worker.finish(todo)
    except isolate.Unisolated as exc:
        request.notes.append(f"not isolated: {exc}")
        return {}
    request.notes.append(f"ran {len(todo)} candidates in the isolation worker, done "
                         f"{time.perf_counter() - started:.2f}s after compiling ({worker.timeline()}); "
                         f"{len(unsafe)} failed there")
    return {configs[i]: reason for i, reason in unsafe.items()}


def autotune_wrapper(wrapped, instance, args, kwargs):
    """``triton.autotune(configs, key, ..., hints=None, check_accuracy=None)``.

    ``configs=[]`` asks for generated candidates; ``hints`` adds search dimensions (kernel
    parameters or compile options); ``check_accuracy=True`` compares every candidate's outputs
    with a reference candidate's before timing. Where Triton's own ``autotune`` takes ``hints``
    (Triton-Ascend's), they keep its meaning and reach it unchanged, and a tuner class that runs
    its own tuning (Triton-Ascend's ``AutoTilingTuner``) generates its own candidates.
    """
    native_hints = "hints" in _parameters(wrapped)
    hints = None if native_hints else kwargs.pop("hints", None)
    check = kwargs.pop("check_accuracy", None)
    configs = kwargs["configs"] if "configs" in kwargs else (args[0] if args else None)
    decorator = wrapped(*args, **kwargs)

    def decorate(fn):
        tuner = decorator(fn)
        tuner.tdp_hints = hints
        tuner.tdp_generate = not configs and _plain_run(tuner)
        tuner.tdp_check_accuracy = check
        isolate.prestart(tuner.fn, tuner.tdp_generate)  # its slow start off the first call's path
        forked_compile.prestart()  # likewise what every compile, and the driver, first need
        return tuner

    return decorate


def _parameters(fn: Any) -> frozenset:
    import inspect

    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()
