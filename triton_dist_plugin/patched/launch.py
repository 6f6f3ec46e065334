"""What the patched ``Autotuner`` does on a launch: the cache-hit path, and tuning on a miss.

The cache-hit path is the hot path: compute the key (upstream's exact tuple), look it up, and
launch with the config's keyword arguments merged once and kept (through ``direct`` on a GPU).
No environment reads, no per-call dictionaries of every argument, and no writes to shared state
except ``best_config``.

On a miss, tuning runs under one process-wide lock with all per-call state held locally, so
threads launching the same kernel with different keys never see each other's arguments
(upstream keeps them in ``self.nargs``, which races). ``tune`` chooses the candidates; what
follows (the stored pick, or readying and timing them, and keeping the pick) is ``tuning``'s.
A front end above that owns a thread's misses for a while (the contextual tuner) says so with
``misses_to``, never by putting itself into a global of this layer.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from .. import _compat, distributed, frozen, settings
from ..compiling import prestart
from ..hook_objects import TuningRequest
from ..isolation import isolate, worker_start
from . import compiled_hit, direct, kernel_state, tuning
from .benchmarker import user_do_bench
from .candidates import check_conflicts, select_configs, split_launch
from .kernel_state import KernelState, state_of

_TUNE_LOCK = threading.RLock()
_MISSES = threading.local()  # ``handler``: who owns this thread's misses (``misses_to``), if anyone


@contextlib.contextmanager
def misses_to(handler: Callable[..., Any]) -> Iterator[None]:
    """Within the block, every miss on this thread (a key not in ``cache``) is handed to
    ``handler(instance, state, key, args, kwargs)``, whose return is the launch's: the contextual
    tuner discovers and times its kernels this way. Other threads tune as usual."""
    if getattr(_MISSES, "handler", None) is not None:
        raise RuntimeError("this thread's misses are already handed to another owner")
    _MISSES.handler = handler
    try:
        yield
    finally:
        _MISSES.handler = None


def run_wrapper(wrapped, instance, args, kwargs):
    """``Autotuner.run``: upstream's behaviour, with the engine on a miss."""
    state = instance.__dict__.get("_tdp_state") or state_of(instance)
    own_run = not _plain_run(instance)  # a subclass's ``run`` that calls this one: no fast closure for it
    if len(instance.configs) > 1 or state.generate or state.hints:
        key = state.key(args, kwargs)
        config = instance.cache.get(key)
        if config is not None and own_run and config.pre_hook is None and "grid" in kwargs and \
                "warmup" in kwargs and not kwargs["warmup"] and _kernel_keywords(state, kwargs):
            # Its hits (fla's CachedAutotuner, say) take the config's direct launcher, as the closure's
            # do, and only where the closure's would: no keyword but kernel arguments, grid and warmup
            # (a compile option by keyword, ``enable_fp_fusion=False`` say, selects another binary).
            launcher = state.hit(config, instance.fn, key)[2]
            if launcher is not None:
                instance.best_config = config
                return launcher(args, kwargs)
        if config is None:
            # Nothing may be timed inside a capture, whoever owns the miss: raise, or launch a fixed
            # config untuned (the contextual tuner's session never sees it).
            if frozen.capturing():
                config = frozen.fallback(state.name, key, instance.cache, instance.configs[0], instance)
                return _launch(instance, state, config, args, kwargs)
            owner = getattr(_MISSES, "handler", None)
            if owner is not None:
                return owner(instance, state, key, args, kwargs)
            config = tune(instance, state, key, args, kwargs)
        raw = state.raw_key(args, kwargs) if config.pre_hook is None and not own_run else None
        if raw is not None:
            state.fast[raw] = state.hit(config, instance.fn, key)
    else:
        config = instance.configs[0]
    if wrapped is not None and "run" not in instance.__dict__ and not own_run:
        instance.__dict__["run"] = _fast_run(instance, state)
        kernel_state.fast_instances.add(instance)
    return _launch(instance, state, config, args, kwargs)


def _kernel_keywords(state: KernelState, kwargs: dict) -> bool:
    """Whether every keyword of a launch is a kernel argument, ``grid`` or ``warmup``."""
    return all(k in state.arg_set or k == "grid" or k == "warmup" for k in kwargs)


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


#: Called with the compiled module by each tuner's first compiled hit (``activation.subscript``).
on_compiled: list = []


def _fast_run(instance: Any, state: KernelState):
    """The cache-hit path, bound to one ``Autotuner`` as an instance attribute.

    Looking ``run`` up on the instance finds this closure before the class's wrapper, so a tuned
    launch pays for one key and one dict lookup, not for a wrapper call; on a GPU the hit is
    launched by the config's ``direct.Launcher`` rather than ``JITFunction.run``. A hit stands only
    while upstream's ``cache`` holds that very config for the key (one more dict lookup), so any
    edit of ``cache`` is honoured. Kernel arguments given by keyword (as libraries and
    ``triton.heuristics`` pass them) find their raw key through the launch's shape (how many
    positional arguments, which keywords in which order). Anything unusual (a keyword that is no
    kernel argument, a changed ``cache``, a miss, a config ``pre_hook``) takes the full path above.
    """
    fast, fast_key, min_args, shapes = state.fast, state.key_get, state.min_args, state.shapes

    def run(*args, **kwargs):
        # Entries exist only for what ``KernelState.raw_key`` admits; a launch unlike those (an
        # unhashable value, a dtype of another kind) misses, or fails to hash, and goes the full way.
        try:
            if len(kwargs) == 2:  # ``grid`` and ``warmup``: every kernel argument positional
                hit = fast.get(fast_key(args)) if "warmup" in kwargs and "grid" in kwargs and len(
                    args) >= min_args else None
            else:
                keyed = shapes.get((len(args), tuple(kwargs)))
                hit = None if keyed is None else fast.get(keyed(args, kwargs))
        except TypeError:
            hit = None
        if hit is not None and instance.cache.get(hit[3]) is hit[0] and hit[0].pre_hook is None:
            instance.best_config = hit[0]
            if hit[2] is not None and not kwargs["warmup"]:
                return hit[2](args, kwargs)
            return instance.fn.run(*args, **kwargs, **hit[1])
        return run_wrapper(None, instance, args, kwargs)

    compiled = compiled_hit.module() if direct.usable(instance.fn) else None
    if compiled is None:
        return run
    for hook in on_compiled:  # activation's: ``tuner[grid]`` in C too, from the first compiled hit on
        hook(compiled)
    # The same path in C; it hands every launch it does not serve to ``run``.
    return compiled.Hit(instance, fast, shapes, tuple(state.key_pos), kernel_state.NO_DTYPE, run, min_args)


def is_fast_run(run: Any) -> bool:
    """Whether ``run`` (an ``Autotuner``'s own attribute) is one ``_fast_run`` made (a ``Hit`` holds its ``slow``)."""
    return getattr(getattr(run, "slow", run), "__qualname__", "").startswith("_fast_run")


def tune(instance: Any, state: KernelState, key: tuple, args: tuple, kwargs: dict):
    """Tune ``instance`` for ``key`` and store the pick in ``instance.cache`` (upstream's attributes)."""
    settings.validate()  # a bad setting fails here, before any work or collective
    with _TUNE_LOCK:
        config = instance.cache.get(key)
        if config is not None:  # another thread finished it while we waited
            return config
        nargs, launch, named, meta = split_launch(state, args, kwargs)
        prestart.prestarted()  # the driver's first use below takes what it built
        device = _compat.active_device(required=user_do_bench(instance) is None)
        # Over the group it tunes in, from the first hook on: every hook sees this one request.
        request = TuningRequest(state.name, key, device, named, meta, autotuner=instance, grid=kwargs.get("grid"),
                                group=distributed.kernel_group())
        previous, kernel_state.current.request = getattr(kernel_state.current, "request", None), request
        instance.nargs = nargs  # read by prune_configs and perf models, as upstream
        try:
            configs = select_configs(instance, state, request, kwargs)
            check_conflicts(state.name, launch, configs)
            if len(configs) == 1:  # nothing to compare, as upstream
                instance.cache[key] = configs[0]
                return configs[0]
            best = tuning.bench_and_record(instance, state, request, key, args, kwargs, named, configs)
            state.release(configs, [*instance.configs, best])
            return best
        finally:
            kernel_state.current.request = previous
            instance.nargs = None


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
        if not worker_start.serving():
            isolate.prestart(tuner.fn, tuner.tdp_generate)  # its slow start off the first call's path
            prestart.prestart()  # likewise what every compile, and the driver, first need
            compiled_hit.start()  # and the compiled cache-hit path, by the first hit
        return tuner

    return decorate


def _parameters(fn: Any) -> frozenset:
    import inspect

    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()
