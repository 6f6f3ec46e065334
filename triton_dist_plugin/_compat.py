"""What differs between Triton releases and distributions, decided once at import.

Upstream ``triton`` 3.2 resolves the benchmarker eagerly in ``Autotuner.__init__``; 3.4+ does it
lazily through a ``do_bench`` cached property; ``knobs`` appeared in 3.4 and the autotuning
listener in 3.8. ``triton-ascend`` ships its own ``triton`` module with an ``AutoTilingTuner``.
Everything here is a feature check, never a version comparison on the hot path.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
from typing import Any, Optional

try:
    import triton
    from triton.runtime import autotuner as autotuner_module
except ImportError as exc:  # pragma: no cover - exercised in a venv without Triton
    raise ImportError(
        "triton_dist_plugin needs Triton, which is not installed. Install one of:\n"
        "  pip install 'triton-dist-plugin[cuda]'    # upstream triton, for NVIDIA/AMD GPUs\n"
        "  pip install 'triton-dist-plugin[ascend]'  # triton-ascend and torch-npu, for Ascend NPUs"
    ) from exc

try:
    from triton import knobs
except ImportError:  # Triton < 3.4
    knobs = None

Autotuner = autotuner_module.Autotuner
Config = autotuner_module.Config

TRITON_VERSION: tuple[int, int] = tuple(int(p) for p in re.findall(r"\d+", triton.__version__)[:2])  # type: ignore[assignment]

def _find(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


#: triton-ascend provides the same ``triton`` module. 3.2.0 ships ``triton.runtime.autotiling_tuner``;
#: newer sources keep the backend (and its tuner) under ``triton.backends.ascend``.
IS_ASCEND: bool = _find("triton.runtime.autotiling_tuner") or _find("triton.backends.ascend")

#: 3.4+ resolves the benchmarker lazily (``do_bench`` is a cached property over ``_do_bench``).
LAZY_BENCH: bool = isinstance(inspect.getattr_static(Autotuner, "do_bench", None), functools.cached_property)

_TRUE = {"1", "true", "yes", "on", "y"}


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def interpret() -> bool:
    """True under ``TRITON_INTERPRET=1``, where kernels run on the CPU and no driver exists."""
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"  # what Triton < 3.4's @jit checks


def print_autotuning() -> bool:
    if knobs is not None:
        return bool(knobs.autotuning.print)
    return os.environ.get("TRITON_PRINT_AUTOTUNING") == "1"


def autotuning_listener():
    """Triton's ``knobs.autotuning.listener`` (3.8+), or None."""
    return getattr(getattr(knobs, "autotuning", None), "listener", None)


def jit_function(fn):
    """The innermost JIT function under heuristics/autotuner wrappers (what Triton's cache keys on)."""
    while hasattr(fn, "fn") and not hasattr(fn, "cache_key") and not hasattr(fn, "rewriter"):
        fn = fn.fn
    return fn


def base_function(fn):
    """The user's Python function under every wrapper (for its name and source)."""
    while not inspect.isfunction(fn):
        fn = fn.fn
    return fn


def do_bench_npu():
    """Triton-Ascend's profiler-based timer, wherever this release keeps it, or None.

    Newer sources: ``triton.backends.ascend.testing.do_bench_npu(funcs, warmup, active, ...)``,
    one callable or a list (a float for one); 3.2.0: ``triton.testing.do_bench_npu(fn, warmup,
    active, ...)``. Both take one callable and ``warmup=``/``active=`` and return milliseconds.
    """
    for module in ("triton.backends.ascend.testing", "triton.testing"):
        try:
            found = getattr(importlib.import_module(module), "do_bench_npu", None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def default_benchmarker():
    """The active driver's own benchmarker (events and an L2 flush on CUDA, NPU events on Ascend)."""
    from triton.runtime.driver import driver

    return driver.active.get_benchmarker()


def active_device(required: bool = True) -> str:
    """``"cpu"`` under the interpreter, else the torch device type of the active Triton driver.

    With ``required=False`` a machine without a driver answers ``"cpu"`` instead of raising: a
    tuner that brought its own ``do_bench`` needs no driver to tune, upstream or here.
    """
    if interpret():
        return "cpu"
    from triton.runtime.driver import driver

    try:
        backend = driver.active.get_current_target().backend
    except RuntimeError:
        if required:
            raise
        return "cpu"
    return {"cuda": "cuda", "hip": "cuda", "npu": "npu", "ascend": "npu"}.get(backend, backend)


def _upstream_failed_config() -> tuple[type[BaseException], ...]:
    """The exceptions this release's ``Autotuner._bench`` turns into an infinite timing (3.2:
    ``OutOfResources`` and ``CompileTimeAssertionFailure``; 3.4+ adds ``PTXASError``). Anything else
    upstream lets through; read from the autotuner module's own imports so each release says."""
    names = ("OutOfResources", "CompileTimeAssertionFailure", "PTXASError")
    found = (autotuner_module.__dict__.get(name) for name in names)
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))


#: Failures upstream counts as "this config cannot run here" rather than "the user's code is broken".
UPSTREAM_FAILED_CONFIG = _upstream_failed_config()


def is_interpreted(fn) -> bool:
    """True when ``fn`` (under any heuristics wrapper) runs on Triton's interpreter."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return False
    while not isinstance(fn, InterpretedFunction) and hasattr(fn, "fn") and not inspect.isfunction(fn):
        fn = fn.fn
    return isinstance(fn, InterpretedFunction)


def remembered_compile_failures(tuner, configs: list, args: tuple, kwargs: dict) -> list:
    """Those of ``configs`` that ``tuner`` remembers as failed compiles, so the plugin never
    compiles them again: Triton-Ascend's newer ``AutoTilingTuner`` keeps them in
    ``_compile_failure_cache``, keyed by ``_get_jit_compile_cache_key(*args, config=c, **kwargs)``
    (None where a config has no such key). A tuner without that cache remembers none."""
    remembered = getattr(tuner, "_compile_failure_cache", None)
    key_of = getattr(tuner, "_get_jit_compile_cache_key", None)
    if not isinstance(remembered, dict) or not remembered or not callable(key_of):
        return []
    found = []
    for config in configs:
        try:
            key = key_of(*args, config=config, **kwargs)
        except Exception:  # noqa: BLE001 - no key, nothing remembered: the subclass decides
            continue
        if key is not None and key in remembered:
            found.append(config)
    return found


def triton_key_home() -> Any:
    """The module whose ``triton_key`` Triton's compile-cache key calls by its global name (3.4+
    keep it in ``runtime.cache``; 3.2 and Triton-Ascend beside the compiler)."""
    try:
        import triton.runtime.cache as home

        if hasattr(home, "triton_key"):
            return home
    except ImportError:
        pass
    import triton.compiler.compiler as home

    return home


def triton_key() -> str:
    """The hash of Triton's sources and library, which every compile's cache key needs (memoised by
    Triton per process: an isolation worker is handed it, or computes it ahead of its first job)."""
    return triton_key_home().triton_key()


def known_triton_key() -> Optional[str]:
    """Triton's source hash where this process has computed it already, else None (never computes
    it: 0.3-0.7 s of hashing, which a caller on the first call's path cannot wait for)."""
    try:
        memo = triton_key_home().triton_key
        if memo.cache_info().currsize:
            key = memo()
            return key if isinstance(key, str) else None
    except Exception:  # noqa: BLE001 - another release's shape: the worker computes its own
        pass
    return None


def take_triton_key(key: str) -> None:
    """In an isolation worker: Triton's source hash as its parent computed it (the same Triton,
    from the same path), so that its first candidate does not hash Triton's sources again. As
    Triton's own compile pools hand theirs to their workers: the module's function replaced."""
    triton_key_home().triton_key = lambda: key
