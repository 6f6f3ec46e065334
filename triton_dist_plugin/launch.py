"""What the patched ``Autotuner`` does on a launch, on a miss, and when a subclass times.

The cache-hit path is the hot path: compute the key (upstream's exact tuple), look it up, and
launch with the config's keyword arguments merged once and kept (through ``direct`` on a GPU).
No environment reads, no per-call dictionaries of every argument, and no writes to shared state
except ``best_config``.

On a miss, tuning runs under one process-wide lock with all per-call state held locally, so
threads launching the same kernel with different keys never see each other's arguments
(upstream keeps them in ``self.nargs``, which races).
"""

from __future__ import annotations

import operator
import threading
import time
import weakref
from typing import Any, Callable, Optional

from . import _compat, bus, direct, distributed, engine, settings, timing
from . import batch as _batch
from . import precompile as _precompile
from .requests import INF3, TuningRequest

ACCURACY_ENV = "TRITON_DIST_AUTOTUNE_CHECK_ACCURACY"
SEARCH_ENV = "TRITON_DIST_AUTOTUNE_SEARCH"  # "halving" (default) or "exhaustive"

_TUNE_LOCK = threading.RLock()
#: The contextual tuning session in progress (see ``autotuner.py``); it owns misses on its thread.
session: Any = None
_current = threading.local()  # the TuningRequest of the tuning in progress on this thread
_DTYPE_STR: dict = {}
#: True while the plugin is installed (``patch.activate`` sets it, ``deactivate`` clears it).
active = False
#: Autotuners that carry a per-instance fast ``run`` (removed again by ``deactivate``).
fast_instances: weakref.WeakSet[Any] = weakref.WeakSet()

#: Launch options every Triton interpreter accepts besides kernel parameters.
_UPSTREAM_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def dtype_str(dtype: Any) -> str:
    """``str(dtype)``, memoised: the key needs it for every tensor argument on every launch."""
    try:
        return _DTYPE_STR[dtype]
    except KeyError:
        _DTYPE_STR[dtype] = text = str(dtype)
        return text
    except TypeError:  # an unhashable dtype
        return str(dtype)


class KernelState:
    """Per-``Autotuner`` facts derived once: key positions and each config's launch keywords.

    ``fast`` maps a raw key (key values, then the dtype *objects* of tensor arguments, all passed
    positionally) to ``(config, launch keywords)``: the same information as upstream's ``cache``,
    without turning dtypes into strings on every launch. It is emptied whenever ``cache`` changes
    size, so clearing or editing upstream's ``cache`` is still honoured.
    """

    __slots__ = ("arg_names", "arg_set", "keys", "key_pos", "key_get", "min_args", "launch", "name", "fast",
                 "cache_len", "generate", "hints", "crossed", "interpreted", "__weakref__")

    def __init__(self, tuner: Any):
        self.arg_names = list(tuner.arg_names)
        self.arg_set = frozenset(self.arg_names)
        keys = tuner.keys
        # Triton-Ascend's AutoTilingTuner maps axis names to argument names.
        self.keys = list(keys.values()) if isinstance(keys, dict) else list(keys)
        self.key_pos = [self.arg_names.index(k) for k in self.keys if k in self.arg_set]
        self.key_get = _key_getter(self.key_pos)
        self.min_args = max(self.key_pos, default=-1) + 1
        self.launch: dict = {}
        self.fast: dict = {}
        self.cache_len = -1
        self.name = _compat.base_function(tuner.fn).__name__
        self.interpreted = _compat.is_interpreted(tuner.fn)
        self.hints = tuner.__dict__.get("tdp_hints") or {}
        self.crossed = False
        flag = tuner.__dict__.get("tdp_generate")
        if flag is None:  # decorated before activation: configs=[] left upstream's single empty Config
            flag = len(tuner.configs) == 1 and not tuner.configs[0].kwargs and _has_open_tiles(tuner)
        self.generate = bool(flag)

    def key(self, args: tuple, kwargs: dict) -> tuple:
        """Upstream's tuning key: the ``key`` argument values, then every tensor's dtype."""
        if self.arg_set.isdisjoint(kwargs):
            n = len(args)
            key = [args[i] for i in self.key_pos if i < n]
            for arg in args:
                if hasattr(arg, "dtype"):
                    key.append(dtype_str(arg.dtype))
            return tuple(key)
        # Some kernel arguments came by keyword: follow upstream's ordering exactly.
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        named = {k: v for k, v in named.items() if k in self.arg_set}
        key = [named[k] for k in self.keys if k in named]
        key += [dtype_str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        return tuple(key)

    def launch_kwargs(self, config: Any) -> dict:
        return self._entry(config)[1]

    def hit(self, config: Any, fn: Any) -> tuple:
        """What the fast path needs for ``config``: (config, launch keywords, direct launcher or None)."""
        entry = self._entry(config)
        if len(entry) == 2:
            launcher = direct.Launcher(fn, entry[1]) if direct.usable(fn) else None
            entry = self.launch[id(config)] = (config, entry[1], launcher)
        return entry

    def _entry(self, config: Any) -> tuple:
        entry = self.launch.get(id(config))
        if entry is None or entry[0] is not config:
            kwargs = config.all_kwargs()
            if self.interpreted:
                # Compile options (Triton 3.2's warp-spec fields, Ascend's multibuffer, ...) mean
                # nothing to the interpreter: newer ones drop them, older ones reject them. Any
                # other kernel object gets every keyword, as upstream passes them.
                kwargs = {k: v for k, v in kwargs.items() if k in self.arg_set or k in _UPSTREAM_OPTIONS}
            entry = self.launch[id(config)] = (config, kwargs)
        return entry


_NO_DTYPE = object()


def _has_open_tiles(tuner: Any) -> bool:
    try:
        from .tiling.analysis import analyse

        an = analyse(tuner.fn)
    except Exception:
        return False
    return any(not an.constexprs[name] for name in an.tiles)


def _key_getter(key_pos: list):
    """A function of the positional arguments giving the raw key: key values, then each argument's
    dtype object (a marker where it has none), one attribute lookup per argument."""
    if len(key_pos) == 1:
        (pos,) = key_pos
        return lambda args: (args[pos], *[getattr(a, "dtype", _NO_DTYPE) for a in args])
    values = operator.itemgetter(*key_pos) if key_pos else (lambda args: ())
    return lambda args: (*values(args), *[getattr(a, "dtype", _NO_DTYPE) for a in args])


def state_of(tuner: Any) -> KernelState:
    state = tuner.__dict__.get("_tdp_state")
    if state is None:
        state = tuner.__dict__["_tdp_state"] = KernelState(tuner)
        tuner.__dict__.setdefault("nargs", None)  # upstream's run sets it each time and leaves None
    return state


# -------------------------------------------------------------------------------------------
# Autotuner.run
# -------------------------------------------------------------------------------------------


def run_wrapper(wrapped, instance, args, kwargs):
    """``Autotuner.run``: upstream's behaviour, with the engine on a miss."""
    state = instance.__dict__.get("_tdp_state") or state_of(instance)
    if len(instance.configs) > 1 or state.generate or state.hints:
        key = state.key(args, kwargs)
        config = instance.cache.get(key)
        if config is None:
            active = session
            if active is not None and active.thread == threading.get_ident():
                return active.launch(instance, state, key, args, kwargs)
            config = tune(instance, state, key, args, kwargs)
        cache = instance.cache
        if len(cache) != state.cache_len:
            state.fast.clear()
            state.cache_len = len(cache)
        if len(kwargs) == 2 and len(args) >= state.min_args and config.pre_hook is None:
            state.fast[state.key_get(args)] = state.hit(config, instance.fn)
    else:
        config = instance.configs[0]
    instance.best_config = config
    meta = state.launch_kwargs(config)
    if wrapped is not None and "run" not in instance.__dict__ and _plain_run(instance):
        instance.__dict__["run"] = _fast_run(instance, state)
        fast_instances.add(instance)
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


def _hooks(instance: Any):
    """Thread-safe stand-ins for upstream's default reset/restore hooks (user hooks kept).

    As upstream's, they look names up in the whole launch (positional and keyword arguments),
    zero ``reset_to_zero`` before every call and copy ``restore_value`` just before it (after the
    config's own ``pre_hook``), restoring it after; the copies live in this tuning's closure rather
    than on the shared ``Autotuner``.
    """
    user_pre = getattr(instance, "user_defined_pre_hook", False)
    user_post = getattr(instance, "user_defined_post_hook", False)
    zero = list(getattr(instance, "reset_to_zero", None) or [])
    restore = list(getattr(instance, "restore_value", None) or [])
    saved: dict = {}

    def pre(full: dict, reset_only: bool = False) -> None:
        if user_pre:
            instance.pre_hook(full, reset_only=reset_only) if reset_only else instance.pre_hook(full)
            return
        for n in zero:
            if full.get(n) is not None:
                full[n].zero_()
        if not reset_only:
            saved.clear()
            saved.update((n, full[n].clone()) for n in restore if full.get(n) is not None)

    def post(full: dict, exception: Optional[BaseException]) -> None:
        if user_post:
            instance.post_hook(full, exception=exception)
            return
        for n, value in saved.items():
            full[n].copy_(value)
        saved.clear()

    return pre, post


def _make_call_factory(instance: Any, state: KernelState, args: tuple, kwargs: dict, pre, post):
    def make_call(config):
        current = {**kwargs, **state.launch_kwargs(config)}
        full = {**dict(zip(state.arg_names, args)), **current}
        run = instance.fn.run

        def call():
            if config.pre_hook:
                config.pre_hook(full)
            pre(full)
            try:
                run(*args, **current)
            except Exception as exc:
                post(full, exc)
                raise
            post(full, None)

        return call

    return make_call


def user_do_bench(instance: Any):
    """The kernel's own ``do_bench=`` (it wins over every hook), or None.

    The benchmarker upstream builds from the deprecated ``warmup=``/``rep=``/``use_cuda_graph=``
    counts as the kernel's own on a device; under the interpreter, where it would ask for a
    driver that does not exist, the plugin's own timing stands in.
    """
    # ``tuner.do_bench = f`` (allowed upstream: 3.4+'s ``do_bench`` is a cached property, 3.2's an
    # attribute) wins over ``do_bench=`` given at construction, as an instance attribute does there.
    bench = instance.__dict__.get("do_bench")
    if bench is None or isinstance(bench, HookBench) or bench is _eager_marker or _is_default(bench):
        bench = instance.__dict__.get("_do_bench") if _compat.LAZY_BENCH else None
    if bench is not None and _compat.interpret() and _from_deprecated_counts(bench):
        return None
    return bench


def _from_deprecated_counts(bench: Any) -> bool:
    """The benchmarker upstream's ``__init__`` builds from ``warmup=``/``rep=``/``use_cuda_graph=``."""
    return getattr(bench, "__module__", None) == _compat.Autotuner.__module__ and \
        getattr(bench, "__name__", None) == "<lambda>"


def screen_for(instance: Any, do_bench: Optional[Callable]) -> Optional[engine.Screen]:
    """The screening rounds for this kernel, or None to time every candidate fully.

    Screening times with device events, as Triton's ``do_bench`` does, so it stands in only for
    that: the default benchmarker, or the one upstream builds from the deprecated ``warmup=`` and
    ``rep=`` (``do_bench`` with other budgets; the finalists are still timed by it). A kernel's
    own timer, or ``use_cuda_graph=True``, measures what events may not: it times every candidate.
    """
    if do_bench is not None and (not _from_deprecated_counts(do_bench) or getattr(instance, "use_cuda_graph", False)):
        return None
    return engine.Screen() if settings.value(SEARCH_ENV) != "exhaustive" else None


def _is_default(bench: Any) -> bool:
    """The driver's own benchmarker, resolved (and kept) before the plugin was active."""
    try:
        return bench is _compat.default_benchmarker()
    except Exception:
        return False


def tune(instance: Any, state: KernelState, key: tuple, args: tuple, kwargs: dict):
    """Tune ``instance`` for ``key`` and store the pick in ``instance.cache`` (upstream's attributes)."""
    settings.validate()  # a bad setting fails here, before any work or collective
    with _TUNE_LOCK:
        config = instance.cache.get(key)
        if config is not None:  # another thread finished it while we waited
            return config
        nargs, launch, named, meta = split_launch(state, args, kwargs)
        device = _compat.active_device(required=user_do_bench(instance) is None)
        request = TuningRequest(state.name, key, device, named, meta, autotuner=instance, grid=kwargs.get("grid"))
        previous, _current.request = getattr(_current, "request", None), request
        instance.nargs = nargs  # read by prune_configs and perf models, as upstream
        try:
            configs = _candidates(instance, state, request, kwargs)
            _check_conflicts(state.name, launch, configs)
            if len(configs) == 1:  # nothing to compare, as upstream
                instance.cache[key] = configs[0]
                return configs[0]
            return _bench_and_record(instance, state, request, key, args, kwargs, named, configs)
        finally:
            _current.request = previous
            instance.nargs = None


def split_launch(state: KernelState, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    """A launch's arguments four ways: ``nargs`` (positional ones by name: upstream's
    ``self.nargs``), ``launch`` (keywords but ``grid``/``warmup``), ``named`` (every kernel
    argument, positional or keyword: what hooks and ``reset_to_zero``/``restore_value`` see) and
    ``meta`` (keywords that are not kernel arguments)."""
    nargs = dict(zip(state.arg_names, args))
    launch = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    named = {**nargs, **{k: v for k, v in launch.items() if k in state.arg_set}}
    return nargs, launch, named, {k: v for k, v in launch.items() if k not in state.arg_set}


def _check_conflicts(name: str, meta: dict, configs: list) -> None:
    for cfg in configs:
        conflicts = meta.keys() & cfg.kwargs.keys()
        if conflicts:
            raise ValueError(
                f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
                f"re-define auto-tuned symbols: {name} tunes them, so do not pass them at launch."
            )


def _candidates(instance: Any, state: KernelState, request: TuningRequest, kwargs: dict) -> list:
    """Explicit configs (crossed with hints once) through Triton's pruning, or generated ones."""
    from .tiling import hints as _hints

    if not state.crossed:
        state.hints = _hints.validate(state.hints, state.arg_names, state.name)
        if state.hints and not state.generate:
            instance.configs = _hints.cross(instance.configs, state.hints)
        state.crossed = True
    if not state.generate:
        return instance.prune_configs(kwargs)
    configs = bus.first_result("tdp_generate_configs", _config_list, request=request)
    if not configs:
        raise ValueError(f"no tdp_generate_configs implementation produced candidates for {state.name}; "
                         "write triton.Config candidates for this kernel")
    return bus.prune(request, configs)


def _config_list(value: Any) -> list:
    if not isinstance(value, (list, tuple)) or not all(hasattr(c, "all_kwargs") for c in value):
        raise TypeError("expected a list of triton.Config")
    return list(value)


def _bench_and_record(instance, state, request, key, args, kwargs, named, configs):
    """Time ``configs`` (``named``: every kernel argument of the launch, by name) and keep the pick."""
    method = timing.resolve_method(request.device)
    pre, post = _hooks(instance)
    make_call = _make_call_factory(instance, state, args, kwargs, pre, post)
    outcome = None
    group = distributed.kernel_group()
    _agree(group, state, key, configs)

    def bench():
        nonlocal outcome
        failed = _compile_all(instance, state, request, args, kwargs, configs)
        # A candidate that failed to compile is still launched and timed, as upstream does: its
        # hooks and the kernel's own do_bench see the failure (a post_hook gets the exception).
        wrong = check_accuracy(configs, make_call, named, failed) if accuracy_check_enabled(instance) else {}
        do_bench = user_do_bench(instance)
        outcome = engine.run_candidates(request, configs, make_call, method=method, do_bench=do_bench, group=group,
                                        screen=screen_for(instance, do_bench), known_failures=wrong,
                                        upstream_errors=True)
        instance.bench_time = outcome.bench_time
        instance.configs_timings = {c: engine.raw(t) for c, t in outcome.timings.items()}
        instance.cache[key] = outcome.best
        # Upstream's own dict, in its order: positional arguments, launch keywords, the pick's.
        pre({**dict(zip(state.arg_names, args)), **kwargs, **state.launch_kwargs(outcome.best)}, reset_only=True)

    cache_hit = False
    # Tuning together, a disk-cache hit on one rank and a miss on another would hang the others:
    # the group always tunes (and the slowest rank decides).
    if group is None and getattr(instance, "cache_results", False) and hasattr(instance, "check_disk_cache"):
        cache_hit = bool(instance.check_disk_cache(key, configs, bench))
    else:
        bench()
    best = instance.cache[key]
    timings = getattr(instance, "configs_timings", None) or {}
    engine.record(request, outcome, best, timings, method=method, cache_hit=cache_hit)
    listener = _compat.autotuning_listener()
    if listener is not None:
        listener(fn=_compat.jit_function(instance.fn), key=key, best_config=best, configs_timings=timings,
                 duration=None if cache_hit else outcome.bench_time, cache_hit=cache_hit)
    return best


def precompile(instance: Any, state: KernelState, args: tuple, kwargs: dict, configs: list) -> dict:
    """Compile every candidate up front (``precompile.py``); ``{config: reason}`` for failures."""
    return _precompile.precompile(instance.fn, args, kwargs, configs, state.launch_kwargs, state.arg_names)


def _compile_all(instance: Any, state: KernelState, request: TuningRequest, args: tuple, kwargs: dict,
                 configs: list) -> dict:
    """``precompile`` on a device, with a note in the report; ``{config: reason}`` for failures."""
    if request.device == "cpu":
        return {}
    started = time.perf_counter()
    failed = precompile(instance, state, args, kwargs, configs)
    request.notes.append(f"compiled {len(configs)} candidates in {time.perf_counter() - started:.2f}s"
                         f" ({_precompile.summary()})")
    return failed


def _agree(group: Any, state: KernelState, key: Any, configs: list) -> None:
    """Ranks tuning together check they tune the same key over the same candidates."""
    if group is not None:
        distributed.agree(group, state.name, key, [str(c) for c in configs], None)


def _record_failure(instance: Any, config: Any, reason: str) -> None:
    """A subclass keeps its candidates' failure reasons in ``tdp_failures``."""
    instance.__dict__.setdefault("tdp_failures", {})[config] = reason


def accuracy_check_enabled(instance: Any) -> bool:
    flag = instance.__dict__.get("tdp_check_accuracy")
    return bool(flag) if flag is not None else settings.value(ACCURACY_ENV)


def _tolerance(tensor: Any) -> tuple[float, float]:
    name = str(tensor.dtype)
    if "float16" in name or "bfloat16" in name or "float8" in name:
        return 2e-2, 2e-2
    if "float" in name:
        return 1e-3, 1e-3
    return 0.0, 0.0


def check_accuracy(configs: list, make_call, named: dict, failed: dict) -> dict:
    """Run every candidate once on the same inputs and compare every tensor argument (outputs and
    anything mutated; ``named`` holds them, positional and keyword) with the first working
    candidate's; returns the ones that disagree."""
    import torch

    tensors = {n: v for n, v in named.items() if isinstance(v, torch.Tensor)}
    original = {n: v.clone() for n, v in tensors.items()}
    reference, ref_config, wrong = None, None, {}
    try:
        for config in configs:
            if config in failed:
                continue
            for n, v in tensors.items():
                v.copy_(original[n])
            try:
                make_call(config)()
            except Exception as exc:
                wrong[config] = engine.describe(exc)
                continue
            result = {n: v.clone() for n, v in tensors.items()}
            if reference is None:
                reference, ref_config = result, config
                continue
            for n, value in result.items():
                rtol, atol = _tolerance(value)
                if not torch.allclose(value.float(), reference[n].float(), rtol=rtol, atol=atol, equal_nan=True):
                    diff = (value.float() - reference[n].float()).abs().max().item()
                    wrong[config] = (f"wrong result: argument {n!r} differs from {ref_config}'s "
                                     f"(max abs diff {diff:.3g})")
                    break
    finally:
        for n, v in tensors.items():
            v.copy_(original[n])
    return wrong


# -------------------------------------------------------------------------------------------
# Autotuner.prune_configs and Autotuner._bench: what subclasses with their own run() call
# -------------------------------------------------------------------------------------------


def prune_wrapper(wrapped, instance, args, kwargs):
    configs = wrapped(*args, **kwargs)
    state = state_of(instance)
    if not configs:
        raise ValueError(
            f"No valid autotuner configs after pruning {state.name}: `early_config_prune` (prune_configs_by) "
            "must return at least one config."
        )
    request = getattr(_current, "request", None)
    if request is None or request.autotuner is not instance:  # a subclass's own run() is tuning
        launch = args[0] if args else kwargs.get("kwargs", {})
        request = TuningRequest(state.name, (), _compat.active_device(required=user_do_bench(instance) is None),
                                dict(getattr(instance, "nargs", None) or {}), dict(launch), autotuner=instance)
        configs = bus.prune(request, configs)
        _batch.expect(instance, configs)
        return configs
    return bus.prune(request, configs)


def bench_wrapper(wrapped, instance, args, kwargs):
    """Upstream's ``_bench`` with timing through the hook bus; failures time as infinity.

    Inside a subclass's own tuning loop (``batch.py``), the candidates it just pruned are
    compiled in parallel and screened together on the first ``_bench``.
    """
    meta = dict(kwargs)
    config = meta.pop("config")
    state = state_of(instance)
    _check_conflicts(state.name, split_launch(state, args, meta)[1], [config])
    found = _batch.answer(instance, config, args, meta, lambda configs: _subclass_round(instance, state, args,
                                                                                          meta, configs))
    if found is not None:
        return found
    device = _compat.active_device(required=user_do_bench(instance) is None)
    cand = engine.CandidateRequest(call=_subclass_calls(instance, state, args, meta)(config), config=config,
                                   kernel_name=state.name, key=(), device=device, method=timing.resolve_method(device))
    value, reason = engine.time_one(cand, user_do_bench(instance))
    if reason is not None:
        _record_failure(instance, config, reason)
    return engine.raw(value)


def batch_bench_wrapper(wrapped, instance, args, kwargs):
    """A subclass's own ``_batch_bench(*args, configs=..., **kwargs)`` (Triton-Ascend's newer
    ``AutoTilingTuner``): it compiles and times its candidates itself (its UB tuner rescues
    compiles that overflow the unified buffer), each timing going through ``self.do_bench`` and
    so through ``tdp_time_candidate``. Its timings then go through ``tdp_reduce_timings`` (ranks
    agree and take the slowest), and ``tdp_on_tuned`` receives the record."""
    state = state_of(instance)
    meta = {k: v for k, v in kwargs.items() if k != "configs"}
    _, launch, named, rest = split_launch(state, args, meta)
    wrong: dict = {}
    configs = kwargs.get("configs")
    if accuracy_check_enabled(instance) and isinstance(configs, (list, tuple)) and len(configs) > 1:
        # Candidates whose results differ never reach the subclass's own timing.
        wrong = check_accuracy(list(configs), _subclass_calls(instance, state, args, meta), named, {})
        kwargs = {**kwargs, "configs": [c for c in configs if c not in wrong]}
    timings = wrapped(*args, **kwargs)
    if not isinstance(timings, dict):
        return timings
    for config in wrong:
        timings[config] = list(INF3) if any(isinstance(t, (list, tuple)) for t in timings.values()) else INF3[0]
        _record_failure(instance, config, wrong[config])
    if len(timings) < 2:
        return timings
    device = _compat.active_device(required=False)
    request = TuningRequest(state.name, state.key(args, launch), device, named, rest, autotuner=instance,
                            grid=meta.get("grid"))
    configs = list(timings)
    group = distributed.kernel_group()
    _agree(group, state, request.key, configs)
    lists = {c: bus.as_timing(t) if t is not None else list(INF3) for c, t in timings.items()}
    reduced = bus.first_result("tdp_reduce_timings", engine.same_keys(lists), request=request, timings=lists,
                               group=group) or lists
    failures = {c: wrong.get(c, "timed as infinity") for c, t in reduced.items() if not t[0] < float("inf")}
    best = min(reduced, key=lambda c: reduced[c][0])
    outcome = engine.Outcome(best=best, timings=reduced, failures=failures, bench_time=0.0, measured=configs)
    engine.record(request, outcome, best, reduced, method=timing.resolve_method(device), cache_hit=False)
    # In the shape the subclass produced: a bare number stays a number.
    return {c: (reduced[c] if isinstance(t, (list, tuple)) else reduced[c][0]) for c, t in timings.items()}


def _subclass_calls(instance: Any, state: KernelState, args: tuple, meta: dict):
    # Upstream's own hooks, as its _bench calls them (the subclass owns this tuning loop).
    return _make_call_factory(instance, state, args, meta, lambda full: instance.pre_hook(full),
                              lambda full, exc: instance.post_hook(full, exception=exc))


def _subclass_round(instance: Any, state: KernelState, args: tuple, meta: dict, configs: list) -> dict:
    """Compile ``configs`` in parallel, screen and time them: ``{config: timing}`` for a subclass."""
    settings.validate()
    device = _compat.active_device(required=user_do_bench(instance) is None)
    _, launch, named, rest = split_launch(state, args, meta)
    request = TuningRequest(state.name, state.key(args, launch), device, named, rest, autotuner=instance,
                            grid=meta.get("grid"))
    method = timing.resolve_method(device)
    make_call = _subclass_calls(instance, state, args, meta)
    started = time.perf_counter()
    _compile_all(instance, state, request, args, meta, configs)  # failures show again when timed, as upstream
    do_bench = user_do_bench(instance)
    screen = screen_for(instance, do_bench)
    wrong = check_accuracy(configs, make_call, named, {}) if accuracy_check_enabled(instance) else {}
    group = distributed.kernel_group()  # only inside tuning_group(): the user asked for it
    _agree(group, state, request.key, configs)

    def measure(candidates: list, **options):
        try:
            return engine.run_candidates(request, candidates, make_call, method=method, do_bench=do_bench,
                                         upstream_errors=True, group=group,
                                         known_failures={c: r for c, r in wrong.items() if c in candidates}, **options)
        except engine.NoValidConfig as exc:  # every one failed: the subclass's loop decides, as upstream
            return engine.Outcome(best=None, timings={c: list(INF3) for c in candidates}, failures=exc.failures,
                                  bench_time=time.perf_counter() - started)

    outcome = measure(configs, screen=screen)
    timings = _batch.settle(outcome.timings, set(outcome.measured), lambda under: measure(under).timings)
    for config, reason in outcome.failures.items():
        _record_failure(instance, config, reason)
    best = min(timings, key=lambda c: timings[c][0])
    engine.record(request, outcome, best, timings, method=method, cache_hit=False)
    return {c: engine.raw(t) for c, t in timings.items()}


# -------------------------------------------------------------------------------------------
# do_bench: the benchmarker an Autotuner uses when the kernel did not pass its own
# -------------------------------------------------------------------------------------------


class HookBench:
    """Stands in for the driver's benchmarker: times through ``tdp_time_candidate``.

    Used for code that calls ``self.do_bench(kernel_call, quantiles)`` itself. Once the plugin
    is deactivated it defers to the driver's own benchmarker again.
    """

    def __init__(self, tuner: Any):
        self.tuner = tuner

    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8), **kwargs):
        if not active:
            return _compat.default_benchmarker()(kernel_call, quantiles=quantiles, **kwargs)
        device = _compat.active_device()
        name = state_of(self.tuner).name if self.tuner is not None else "kernel"
        cand = engine.CandidateRequest(call=kernel_call, config=None, kernel_name=name, key=(), device=device,
                                       method=timing.resolve_method(device), quantiles=tuple(quantiles or (0.5,)))
        value = bus.first_result("tdp_time_candidate", bus.as_timing, request=cand)
        return value if quantiles else value[0]


def _eager_marker(kernel_call, quantiles=(0.5, 0.2, 0.8), **kwargs):
    """Passed as ``do_bench`` to Triton 3.2's eager ``__init__`` so it does not ask for a driver."""
    return HookBench(None)(kernel_call, quantiles=quantiles, **kwargs)


class DoBench:
    """Replaces 3.4+'s ``do_bench`` cached property while active: the kernel's own benchmarker,
    else one that times through the hooks. Like the property it replaces it defines only
    ``__get__``, so ``tuner.do_bench = f`` stores ``f`` on the instance, where it wins."""

    def __init__(self, doc: Optional[str] = None):
        self.__doc__ = doc

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        own = instance.__dict__.get("_do_bench")
        return own if own is not None else HookBench(instance)


def init_wrapper(wrapped, instance, args, kwargs):
    """Triton < 3.4 resolves the benchmarker in ``__init__``: hand it ours so no driver is needed."""
    import inspect

    bound = inspect.signature(wrapped).bind(*args, **kwargs)
    if bound.arguments.get("do_bench") is None and "do_bench" in inspect.signature(wrapped).parameters:
        bound.arguments["do_bench"] = _eager_marker
    wrapped(*bound.args, **bound.kwargs)
    if instance.__dict__.get("do_bench") is _eager_marker:
        instance.do_bench = HookBench(instance)


# -------------------------------------------------------------------------------------------
# triton.autotune: accepts hints= (and check_accuracy=) once the plugin is active
# -------------------------------------------------------------------------------------------


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
        return tuner

    return decorate


def _parameters(fn: Any) -> frozenset:
    import inspect

    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()
