"""The tuning probe: times each launch of a tuned kernel during an op's first call and records the
ones that tuned (the same wrapper in every mode, installed before the plugin and the libraries)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional


def _first_time(value: Any) -> float:
    try:
        return float(value[0] if isinstance(value, (list, tuple)) else value)
    except (TypeError, ValueError, IndexError):
        return math.nan


class Probe:
    """Times launches of tuned kernels while armed and records the ones that tuned."""

    def __init__(self, torch):
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        self.torch, self.Autotuner, self.JITFunction = torch, Autotuner, JITFunction
        self.armed, self.depth, self.phase = False, 0, ""
        self.records: list = []
        self.known: dict = {}  # id -> tuner, every Autotuner seen

    def install(self) -> None:
        from triton.runtime.jit import KernelInterface

        original, probe = KernelInterface.__getitem__, self

        def __getitem__(kernel, grid):
            launch = original(kernel, grid)
            if not probe.armed or isinstance(kernel, probe.JITFunction):
                return launch
            tuners = probe.tuners_in(kernel)
            if not tuners:
                return launch
            return lambda *args, **kwargs: probe.launch(tuners, launch, args, kwargs)

        KernelInterface.__getitem__ = __getitem__

    def tuners_in(self, kernel: Any) -> list:
        found = []
        for _ in range(8):  # LibEntry -> LibTuner -> Heuristics -> JITFunction at most, in practice
            if kernel is None or isinstance(kernel, self.JITFunction):
                break
            if isinstance(kernel, self.Autotuner):
                found.append(kernel)
                self.known.setdefault(id(kernel), kernel)
            kernel = getattr(kernel, "fn", None)
        return found

    def scan(self) -> None:
        """Find every Autotuner the imports created (kernels are decorated at import)."""
        import gc
        import warnings

        with warnings.catch_warnings():  # isinstance() on some of torch's deprecated objects warns
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                try:
                    if isinstance(obj, self.Autotuner):
                        self.known.setdefault(id(obj), obj)
                except Exception:
                    pass

    @staticmethod
    def state(tuner: Any) -> tuple:
        cache = tuner.__dict__.get("cache")
        try:
            size = len(cache)
        except TypeError:  # FlagGems' LibTuner.cache is a sqlite-backed ConfigCache
            size = None
        return size, tuner.__dict__.get("configs_timings")

    def tuned(self, tuner: Any, before: tuple) -> bool:
        size, timings = self.state(tuner)
        return (size is not None and before[0] is not None and size > before[0]) or timings is not before[1]

    def launch(self, tuners: list, launch: Callable, args: tuple, kwargs: dict):
        if self.depth:
            return launch(*args, **kwargs)
        before = [self.state(t) for t in tuners]
        self.torch.cuda.synchronize()
        start = time.perf_counter()
        self.depth += 1
        try:
            result = launch(*args, **kwargs)
        finally:
            self.depth -= 1
        self.torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        for tuner, state in zip(tuners, before):
            if self.tuned(tuner, state):
                self.records.append(self.describe(tuner, seconds, "probe"))
        return result

    def describe(self, tuner: Any, seconds: Optional[float], via: str) -> dict:
        timings = tuner.__dict__.get("configs_timings") or {}
        times = [_first_time(v) for v in timings.values()]
        finite = [t for t in times if math.isfinite(t)]
        configs = list(getattr(tuner, "configs", []) or [])
        name = getattr(getattr(tuner, "base_fn", None), "__name__", None) or type(tuner.fn).__name__
        return {
            "kernel": name, "phase": self.phase, "seconds": seconds, "via": via, "cls": type(tuner).__name__,
            "n_configs": len(configs), "n_timed": len(timings), "n_failed": len(times) - len(finite),
            "best_ms": min(finite) if finite else None, "pick": str(getattr(tuner, "best_config", None)),
            "timings": {str(c): _first_time(v) for c, v in timings.items()},
            "pre_hook": sum(1 for c in configs if getattr(c, "pre_hook", None)),
            "reset_to_zero": list(getattr(tuner, "reset_to_zero", []) or []),
            "restore_value": list(getattr(tuner, "restore_value", []) or []),
            "user_pre_hook": bool(getattr(tuner, "user_defined_pre_hook", False)),
            "own_do_bench": tuner.__dict__.get("_do_bench") is not None,
            "own_run": any("run" in k.__dict__ for k in type(tuner).__mro__ if k is not self.Autotuner
                           and issubclass(k, self.Autotuner)),
        }
