"""A launch's candidates as calls the engine can time.

Which configs (explicit ones through Triton's pruning, or generated ones), each as a call with
upstream's hooks around it (``reset_to_zero`` and ``restore_value`` resolved against positional
and keyword arguments alike, their copies held by the tuning rather than the shared tuner),
compiled up front in parallel, and agreed on by the ranks tuning together.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from .. import bus
from ..compiling import precompile as _precompile
from ..hook_objects import TuningRequest
from .kernel_state import KernelState


def split_launch(state: KernelState, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    """A launch's arguments four ways: ``nargs`` (positional ones by name: upstream's
    ``self.nargs``), ``launch`` (keywords but ``grid``/``warmup``), ``named`` (every kernel
    argument, positional or keyword: what hooks and ``reset_to_zero``/``restore_value`` see) and
    ``meta`` (keywords that are not kernel arguments)."""
    nargs = dict(zip(state.arg_names, args))
    launch = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    named = {**nargs, **{k: v for k, v in launch.items() if k in state.arg_set}}
    return nargs, launch, named, {k: v for k, v in launch.items() if k not in state.arg_set}


def check_conflicts(name: str, meta: dict, configs: list) -> None:
    for cfg in configs:
        conflicts = meta.keys() & cfg.kwargs.keys()
        if conflicts:
            raise ValueError(
                f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
                f"re-define auto-tuned symbols: {name} tunes them, so do not pass them at launch."
            )


def select_configs(instance: Any, state: KernelState, request: TuningRequest, kwargs: dict) -> list:
    """Explicit configs (crossed with hints once) through Triton's pruning, or generated ones."""
    from ..tiling import hints as _hints

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


def call_hooks(instance: Any):
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


def make_call_factory(instance: Any, state: KernelState, args: tuple, kwargs: dict, pre, post):
    """``make_call(config, ran=None)``: a call that runs one candidate as upstream's ``_bench``
    does (the config's ``pre_hook``, the tuner's pre hook, the launch, the post hook); ``ran()``,
    if given, is called as soon as the launch returns, before the post hook puts anything back
    (the accuracy check reads what the kernel wrote there)."""
    def make_call(config, ran=None):
        current = {**kwargs, **state.launch_kwargs(config)}
        full = {**dict(zip(state.arg_names, args)), **current}
        run = instance.fn.run

        def call():
            if config.pre_hook:
                config.pre_hook(full)
            pre(full)
            try:
                run(*args, **current)
                if ran is not None:
                    ran()
            except Exception as exc:
                post(full, exc)
                raise
            post(full, None)

        return call

    return make_call


def precompile(instance: Any, state: KernelState, args: tuple, kwargs: dict, configs: list, group: Any = None,
               on_ready: Optional[Callable[[int], None]] = None,
               wanted: Optional[Callable[[int], bool]] = None) -> dict:
    """Compile every candidate up front (``precompile.py``); ``{config: reason}`` for failures.
    ``on_ready(i)`` runs as soon as ``configs[i]`` has compiled."""
    return _precompile.precompile(instance.fn, args, kwargs, configs, state.launch_kwargs, state.arg_names, group,
                                  on_ready, wanted, give_up=not observed(instance))


def observed(instance: Any) -> bool:
    """The kernel's own ``pre_hook``/``post_hook`` or ``do_bench`` see each candidate's launch.

    Upstream launches every candidate, however long it takes to compile, and hands its failure
    (``OutOfResources`` at load, say) to the ``post_hook``; where such code watches, no compile
    is given up for being slow, so each of its candidates still reaches it.
    """
    from .benchmarker import own_timer, user_do_bench

    hooked = getattr(instance, "user_defined_pre_hook", False) or getattr(instance, "user_defined_post_hook", False)
    return bool(hooked) or own_timer(instance, user_do_bench(instance))


def compile_all(instance: Any, state: KernelState, request: TuningRequest, args: tuple, kwargs: dict,
                 configs: list, group: Any = None, on_ready: Optional[Callable[[int], None]] = None,
                 wanted: Optional[Callable[[int], bool]] = None) -> dict:
    """Compile every candidate up front on a device (``precompile.py``; under ``group``, ranks
    sharing a compile cache split the work), with a note in the report; ``{config: reason}``
    for failures (``stream.SKIPPED`` for those ``wanted`` turned down before they started)."""
    if request.device == "cpu":
        return {}
    started = time.perf_counter()
    failed = precompile(instance, state, args, kwargs, configs, group, on_ready, wanted)
    left = sum(map(_precompile.never_timed, failed.values()))
    request.found.notes.append(f"compiled {len(configs) - left} candidates in {time.perf_counter() - started:.2f}s"
                               f" ({_precompile.summary()})")
    return failed


def record_failure(instance: Any, config: Any, reason: str) -> None:
    """A subclass keeps its candidates' failure reasons in ``tdp_failures``."""
    instance.__dict__.setdefault("tdp_failures", {})[config] = reason
