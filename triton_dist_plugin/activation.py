"""Install and uninstall the plugin on Triton's ``Autotuner``, like an OpenTelemetry instrumentor.

Patching the class (not the ``triton.autotune`` decorator) covers kernels decorated before the
import, and subclasses: ``Autotuner.run`` carries the engine; ``_bench`` and ``prune_configs``
carry timing and pruning hooks into subclasses that replace ``run`` with their own (Triton-Ascend's
``AutoTilingTuner``, FlagGems-style tuners). Which pieces a Triton release needs is decided here,
once: 3.2 resolves its benchmarker in ``__init__``, 3.4+ through a ``do_bench`` property.

``__getitem__`` (``tuner[grid]``) is added in C once the compiled cache-hit path loads (``subscript``).
``deactivate()`` puts back exactly the attributes it replaced (and removes the one it added), and
only where it still finds its own, so another library's later patch is never undone by ours.
"""

from __future__ import annotations

import threading
import warnings

import wrapt

from . import _compat, bus
from .compiling import prestart
from .isolation import isolate, worker_start
from .patched import benchmarker, compiled_hit, kernel_state, launch, subclass

_lock = threading.Lock()
_installed: list[tuple[type, str, object, object]] = []  # (owner, attribute, original, ours)


def is_active() -> bool:
    """True while the plugin is installed on Triton's ``Autotuner``."""
    return bool(_installed)


def _wrap(owner: type, name: str, wrapper) -> None:
    original = owner.__dict__[name]
    wrapt.wrap_function_wrapper(owner, name, wrapper)
    _installed.append((owner, name, original, owner.__dict__[name]))


_ORIGINAL_AUTOTUNE = _compat.autotuner_module.autotune


def _wrap_module(module, name: str, wrapper) -> None:
    original = module.__dict__[name]
    wrapt.wrap_function_wrapper(module, name, wrapper)
    _installed.append((module, name, original, module.__dict__[name]))


def activate() -> None:
    """Patch ``triton.runtime.autotuner.Autotuner`` in place and load entry-point plugins.

    Idempotent: activating twice warns and does nothing more.
    """
    _activate()


def _activate() -> None:
    with _lock:
        if _installed:
            warnings.warn("triton_dist_plugin is already active", stacklevel=2)
            return
        cls = _compat.Autotuner
        try:
            _wrap(cls, "run", launch.run_wrapper)
            _wrap(cls, "_bench", subclass.bench_wrapper)
            _wrap(cls, "prune_configs", _prune_configs)
            import triton
            import triton.runtime

            for module in (triton, triton.runtime, _compat.autotuner_module):
                if module.__dict__.get("autotune") is _ORIGINAL_AUTOTUNE:
                    _wrap_module(module, "autotune", launch.autotune_wrapper)
            if _compat.LAZY_BENCH:
                original = cls.__dict__["do_bench"]
                ours = benchmarker.DoBench(original.__doc__)
                cls.do_bench = ours
                _installed.append((cls, "do_bench", original, ours))
            else:
                _wrap(cls, "__init__", benchmarker.init_wrapper)
            for sub in _subclasses(cls):  # those defined so far; later ones on their first pruning
                _wrap_batch_bench_of(sub)
            bus.load_entry_points()
            kernel_state.active = True
        except BaseException:
            _restore()
            raise
    # Outside the lock: a worker forked here must find it free (it gives Triton back as it was).
    isolate.prestart()  # with every kernel isolated, its worker starts alongside the program
    _prestart_compiling()


def _prestart_compiling() -> None:
    """``prestart.prestart`` now, so that its threads overlap the program's own start-up. A
    fork of the isolation worker made later waits for them (they hold locks while they work):
    deferring them past that fork instead put their work on the first call's path, from the
    decoration to the first result of a ``configs=[]`` softmax 1.47x its time with isolation off
    against 1.18x started here (H100; ``failure-modes.md``)."""
    if prestart.wanted():
        prestart.prestart()
    compiled_hit.start()


def _prune_configs(wrapped, instance, args, kwargs):
    """``Autotuner.prune_configs``: the plugin's pruning, and, for a subclass with its own
    ``_batch_bench``, the wrapper that carries reduction and reports into it (on first use)."""
    configs = subclass.prune_wrapper(wrapped, instance, args, kwargs)
    if type(instance) is not _compat.Autotuner:
        wrap_batch_bench(type(instance))
    return configs


def subscript(compiled) -> None:
    """``Autotuner.__getitem__`` (``tuner[grid]``) in C, ``compiled.Subscript`` (``_hit.c``): the
    callable it returns calls ``tuner.run`` as ``KernelInterface.__getitem__``'s lambda does, without
    a closure, a frame or a keyword dict per launch. Installed once the compiled module is loaded
    (the first compiled hit), while the plugin is active; removed with the rest."""
    cls = _compat.Autotuner
    # Not waiting: a hit inside activation itself (an entry-point plugin launching a tuned kernel as
    # it loads) holds the lock on this thread; the next tuner's first compiled hit installs it then.
    if not _lock.acquire(blocking=False):
        return
    try:
        if _installed and "__getitem__" not in cls.__dict__:  # (a release's own, or ours already)
            ours = compiled.Subscript()
            cls.__getitem__ = ours
            _installed.append((cls, "__getitem__", _ABSENT, ours))
    finally:
        _lock.release()


_ABSENT = object()  # an attribute the class did not have of its own before ours
launch.on_compiled.append(subscript)


def _restore() -> None:
    kernel_state.active = False
    while _installed:
        owner, name, original, ours = _installed.pop()
        if owner.__dict__.get(name) is not ours:
            where = getattr(owner, "__name__", owner)
            warnings.warn(f"{where}.{name} was re-patched by someone else; leaving it in place", stacklevel=3)
        elif original is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _subclasses(cls: type) -> list:
    found, todo = [], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        if sub not in found:
            found.append(sub)
            todo.extend(sub.__subclasses__())
    return found


def wrap_batch_bench(cls: type) -> None:
    """Carry the reduction and the report into a subclass's own ``_batch_bench`` (found on first
    use, since such classes live in modules imported whenever their users like)."""
    for klass in cls.__mro__:
        if "_batch_bench" in klass.__dict__:
            with _lock:
                if _installed:
                    _wrap_batch_bench_of(klass)
            return


def _wrap_batch_bench_of(klass: type) -> None:
    """Wrap ``klass``'s own ``_batch_bench`` once (callers hold ``_lock``)."""
    ours = any(owner is klass and name == "_batch_bench" for owner, name, _, _ in _installed)
    if "_batch_bench" in klass.__dict__ and not ours:
        _wrap(klass, "_batch_bench", subclass.batch_bench_wrapper)


def _put_away_in_worker() -> None:
    """In a forked isolation worker: plain Triton, as a fresh worker has it."""
    if _installed:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            deactivate()


worker_start.IN_CHILD.append(_put_away_in_worker)


def deactivate() -> None:
    """Restore every attribute ``activate()`` replaced, exactly. Tuned picks stay cached."""
    with _lock:
        _restore()
        for tuner in list(kernel_state.fast_instances):
            if launch.is_fast_run(tuner.__dict__.get("run")):
                del tuner.__dict__["run"]
        kernel_state.fast_instances.clear()
