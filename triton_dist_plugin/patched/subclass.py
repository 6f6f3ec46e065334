"""Tuner subclasses with their own ``run()``: the ``prune_configs``, ``_bench`` and
``_batch_bench`` they call.

Their loops keep upstream's semantics, while the candidates one loop pruned are compiled in
parallel and screened together on its first ``_bench`` (``batch``). A subclass with its own
``_batch_bench`` (Triton-Ascend's newer ``AutoTilingTuner``) compiles and times its candidates
itself: the plugin's pruning then acts on the list handed to ``_batch_bench``, that is, after the
subclass's own ``prune_configs`` (its cost model included), and the plugin never compiles a
candidate the subclass remembers as a failed compile.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .. import _compat, bus, engine, frozen, job, settings
from ..failures import NoValidConfig, raw
from ..hook_objects import INF3, TuningRequest
from . import batch as _batch
from . import kernel_state
from .accuracy import Gate, accuracy_check_enabled, reference_order
from .benchmarker import screen_for, user_do_bench
from .candidates import check_conflicts, compile_all, make_call_factory, record_failure, split_launch
from .kernel_state import KernelState, state_of
from .loop_job import LoopJob


def prune_wrapper(wrapped, instance, args, kwargs):
    configs = wrapped(*args, **kwargs)
    state = state_of(instance)
    # Pruning (every front end's goes through here) may have changed configs in place, shared ones too.
    kernel_state.forget_changed_everywhere([*instance.configs, *(configs or [])])
    if not configs:
        raise ValueError(
            f"No valid autotuner configs after pruning {state.name}: prune_configs_by left none "
            f"({_emptied_by(instance)}); it must keep at least one config."
        )
    request = getattr(kernel_state.current, "request", None)
    if request is None or request.autotuner is not instance:  # a subclass's own run() is tuning
        cls = type(instance)
        if _own(cls, "_batch_bench"):
            # Its own prune_configs may narrow this list further once we return (Triton-Ascend's
            # cost model does): the plugin prunes what reaches _batch_bench (batch_bench_wrapper).
            return configs
        launch = args[0] if args else kwargs.get("kwargs", {})
        request = TuningRequest(state.name, (), _compat.active_device(required=user_do_bench(instance) is None),
                                dict(getattr(instance, "nargs", None) or {}), dict(launch), autotuner=instance)
        configs = bus.prune(request, configs)
        if not _own(cls, "prune_configs"):  # an override may drop some: never batch-time those
            _batch.expect(instance, configs)
        # A new loop: what its candidates timed one at a time are checked against (_checked_alone).
        instance.__dict__["_tdp_pruned"] = list(configs)
        instance.__dict__.pop("_tdp_loop_gate", None)
        instance.__dict__.pop("_tdp_frozen", None)
        return configs
    return bus.prune(request, configs)


def _emptied_by(instance: Any) -> str:
    """Which part of ``prune_configs_by`` can have left no config: an ``early_config_prune``
    that returned none, or a ``top_k`` (with a ``perf_model``) that rounds down to zero."""
    top_k = getattr(instance, "configs_top_k", 1.0)
    if getattr(instance, "perf_model", None) is not None and (top_k == 0 or (
            isinstance(top_k, float) and int(len(instance.configs) * top_k) == 0)):
        return f"top_k={top_k!r} keeps no config of {len(instance.configs)}"
    return "early_config_prune returned none"


def _own(cls: type, name: str) -> bool:
    """``cls`` defines ``name`` itself, below ``Autotuner``."""
    for klass in cls.__mro__:
        if klass is _compat.Autotuner:
            return False
        if name in klass.__dict__:
            return True
    return False


def bench_wrapper(wrapped, instance, args, kwargs):
    """Upstream's ``_bench`` with timing through the hook bus; failures time as infinity.

    Inside a subclass's own tuning loop (``batch.py``), the candidates it just pruned are
    compiled in parallel and screened together on the first ``_bench``; each is otherwise timed
    alone. Either way the loop's tuning is a job (``loop_job``).
    """
    meta = dict(kwargs)
    config = meta.pop("config")
    state = state_of(instance)
    check_conflicts(state.name, split_launch(state, args, meta)[1], [config])
    found = _batch.answer(instance, config, args, meta, lambda configs: job.run(
        LoopJob(instance, state, args, meta, configs, _subclass_round)))
    if found is not None:
        return found
    return job.run(LoopJob(instance, state, args, meta, [config], _time_alone, lambda timings: raw(timings[config]),
                           alone=True))


def _time_alone(loop: LoopJob) -> engine.Outcome:
    """One candidate of a loop without a batch (parallel compilation off, its own ``prune_configs``,
    a config it did not just prune), timed by itself as upstream's ``_bench`` does."""
    instance, state, config = loop.instance, loop.state, loop.configs[0]
    if accuracy_check_enabled(instance):  # timed alone, but checked as the loop's batch would be
        wrong = _checked_alone(instance, state, loop.args, loop.meta, config)
        if wrong is not None:
            record_failure(instance, config, wrong)
            return engine.Outcome(best=config, timings={config: list(INF3)}, failures={config: wrong}, bench_time=0.0)
    cand = engine.CandidateRequest(call=_subclass_calls(instance, state, loop.args, loop.meta)(config), config=config,
                                   kernel_name=state.name, key=(), device=loop.request.device, method=loop.method)
    value, reason = engine.time_one(cand, user_do_bench(instance))
    if reason is not None:
        record_failure(instance, config, reason)
    if loop.group is not None:  # every rank's loop then keeps the same candidate (the slowest rank's times)
        value = _reduced(loop, {config: value})[config]
    return engine.Outcome(best=config, timings={config: value}, failures={config: reason} if reason else {},
                          bench_time=0.0)


def _reduced(loop: LoopJob, lists: dict) -> dict:
    """``lists`` (``{config: [p50, p20, p80]}``) through ``tdp_reduce_timings`` over the loop's group."""
    return bus.first_result("tdp_reduce_timings", engine.same_keys(lists), request=loop.request, timings=lists,
                            group=loop.group) or lists


def batch_bench_wrapper(wrapped, instance, args, kwargs):
    """A subclass's own ``_batch_bench(*args, configs=..., **kwargs)`` (Triton-Ascend's newer
    ``AutoTilingTuner``): it compiles and times its candidates itself (its UB tuner rescues
    compiles that overflow the unified buffer, its negative cache skips those that failed
    before), each timing going through ``self.do_bench`` and so through ``tdp_time_candidate``.
    The ``tdp_prune_configs`` hooks first prune the candidates it was handed; its timings then
    go through ``tdp_reduce_timings`` (ranks agree and take the slowest), and ``tdp_on_tuned``
    receives the record."""
    state = state_of(instance)
    if frozen.capturing():  # before any hook of the user's runs (the pruning below), as every job checks
        frozen.refuse(state.name)
    configs = kwargs.get("configs")
    if not isinstance(configs, (list, tuple)) or not configs:
        return wrapped(*args, **kwargs)
    settings.validate()
    own = _OwnBatch(wrapped, kwargs)
    loop = LoopJob(instance, state, args, {k: v for k, v in kwargs.items() if k != "configs"}, list(configs), own,
                   own.shape, device_required=False)
    loop.configs = bus.prune(loop.request, loop.configs)  # what the subclass's own pruning kept
    loop.labels = [str(c) for c in loop.configs]
    return job.run(loop)


class _OwnBatch:
    """The subclass's ``_batch_bench`` over what the accuracy check let through, its timings
    reduced over the group and handed back in the shape it gave them (a bare number stays one)."""

    def __init__(self, wrapped: Any, kwargs: dict):
        self.wrapped, self.kwargs, self.given = wrapped, kwargs, None

    def __call__(self, loop: LoopJob) -> engine.Outcome:
        instance, state, configs = loop.instance, loop.state, loop.configs
        wrong: dict = {}
        if accuracy_check_enabled(instance) and len(configs) > 1:
            wrong = _wrong_results(instance, state, loop.args, loop.meta, loop.named, configs)
        self.given = timings = self.wrapped(*loop.args, **{**self.kwargs,
                                                           "configs": [c for c in configs if c not in wrong]})
        if not isinstance(timings, dict):  # not timings: handed back untouched
            return engine.Outcome(best=None, timings={}, failures={}, bench_time=0.0)
        for config in wrong:
            timings[config] = list(INF3) if any(isinstance(t, (list, tuple)) for t in timings.values()) else INF3[0]
            record_failure(instance, config, wrong[config])
        lists = {c: bus.as_timing(t) if t is not None else list(INF3) for c, t in timings.items()}
        reduced = lists
        if loop.group is not None:
            # Every rank reduces the same candidates in the same order, whatever each got back (it may
            # leave out one that failed to compile there): one missing on any rank fails on all.
            reduced = {c: t for c, t in _reduced(loop, {c: lists.get(c, list(INF3)) for c in configs}).items()
                       if c in timings}
        elif len(lists) > 1:
            reduced = _reduced(loop, lists)
        failures = {c: wrong.get(c, "timed as infinity") for c, t in reduced.items() if not t[0] < float("inf")}
        return engine.Outcome(best=min(reduced, key=lambda c: reduced[c][0], default=None), timings=reduced,
                              failures=failures, bench_time=0.0, measured=list(timings))

    def shape(self, timings: dict) -> Any:
        given = self.given
        if given is None:  # frozen mode: nothing was timed
            return timings
        if not isinstance(given, dict) or len(given) < 2:
            return given
        return {c: (timings[c] if isinstance(t, (list, tuple)) else timings[c][0]) for c, t in given.items()}


def _wrong_results(instance: Any, state: KernelState, args: tuple, meta: dict, named: dict, configs: list) -> dict:
    """The accuracy check before a subclass's ``_batch_bench``: ``{config: reason}`` for the
    candidates whose results differ, never handed to it. One that raises is handed over all the
    same: the subclass compiles it itself, so its UB tuner may rescue it and its negative cache
    remembers it if it stays broken. One that cache already holds is not run here at all."""
    known = {c: "a failed compile Triton-Ascend remembers"
             for c in _compat.remembered_compile_failures(instance, configs, args, meta)}
    found = _checked(instance, state, configs, _subclass_calls(instance, state, args, meta), named, known)
    return {c: reason for c, reason in found.items() if reason.startswith("wrong result")}


def _checked(instance: Any, state: KernelState, configs: list, make_call, named: dict, known: dict) -> dict:
    """The accuracy check of every one of ``configs`` (a subclass's loop readied them all):
    ``{config: reason}`` for those that raise or disagree with the reference, sought in the
    kernel's own order whatever order the subclass's pruning left."""
    gate = Gate(state.name, reference_order(configs, instance.configs), make_call, named)
    wrong = gate.check(configs, known)
    gate.finish()
    return wrong


def _checked_alone(instance: Any, state: KernelState, args: tuple, meta: dict, config: Any) -> Optional[str]:
    """Why ``config``, timed alone by a subclass's loop (no batch: parallel compilation off, its
    own ``prune_configs``, a config it did not just prune), is wrong, or None. One gate serves the
    loop (the same arguments), its reference sought among what the loop's pruning kept, in the
    kernel's own order; it is let go once every one of those was checked, or at the next pruning."""
    held = instance.__dict__.get("_tdp_loop_gate")
    if held is None or not _batch.same_launch(args, meta, held[0], held[1]):
        pruned = instance.__dict__.get("_tdp_pruned") or []
        pool = pruned if any(c is config for c in pruned) else list(instance.configs)
        pool = pool if any(c is config for c in pool) else pool + [config]
        gate = Gate(state.name, reference_order(pool, instance.configs), _subclass_calls(instance, state, args, meta),
                    split_launch(state, args, meta)[2])
        held = instance.__dict__["_tdp_loop_gate"] = (args, dict(meta), gate, {id(c) for c in pool})
    reason = held[2].check([config], {}).get(config)
    held[3].discard(id(config))
    if not held[3]:
        instance.__dict__.pop("_tdp_loop_gate", None)
    return reason


def _subclass_calls(instance: Any, state: KernelState, args: tuple, meta: dict):
    # Upstream's own hooks, as its _bench calls them (the subclass owns this tuning loop).
    return make_call_factory(instance, state, args, meta, lambda full: instance.pre_hook(full),
                              lambda full, exc: instance.post_hook(full, exception=exc))


def _subclass_round(loop: LoopJob) -> engine.Outcome:
    """Compile the loop's candidates in parallel, screen and time them: the subclass then reads
    each one's timing from the outcome (``batch.answer``)."""
    instance, state, configs, request = loop.instance, loop.state, loop.configs, loop.request
    args, meta, group = loop.args, loop.meta, loop.group
    make_call = _subclass_calls(instance, state, args, meta)
    started = time.perf_counter()
    compile_all(instance, state, request, args, meta, configs)  # failures show again when timed, as upstream
    do_bench = user_do_bench(instance)
    wrong = _checked(instance, state, configs, make_call, loop.named, {}) if accuracy_check_enabled(instance) else {}

    def measure(candidates: list, **options):
        try:
            # profile_shorts off: the candidates left unmeasured are measured again below, apart, by
            # the method given, and compared with these.
            return engine.run_candidates(request, candidates, make_call, method=loop.method, do_bench=do_bench,
                                         upstream_errors=True, group=group, profile_shorts=False,
                                         known_failures={c: r for c, r in wrong.items() if c in candidates}, **options)
        except NoValidConfig as exc:  # every one failed: the subclass's loop decides, as upstream
            return engine.Outcome(best=None, timings={c: list(INF3) for c in candidates}, failures=exc.failures,
                                  bench_time=time.perf_counter() - started)

    outcome = measure(configs, screen=screen_for(instance, do_bench))
    measured = set(outcome.measured)
    timings = _batch.settle(outcome.timings, measured, lambda under: measure(under).timings)
    for config, reason in outcome.failures.items():
        record_failure(instance, config, reason)
    return engine.Outcome(best=min(timings, key=lambda c: timings[c][0]), timings=timings, failures=outcome.failures,
                          bench_time=outcome.bench_time, measured=[c for c in configs if c in measured],
                          decision=outcome.decision)
