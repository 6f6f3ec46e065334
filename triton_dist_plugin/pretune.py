"""Tuning ahead of time: run a function over argument cases so its kernels' keys are tuned (and
persisted) before the program that needs them starts.

.. code-block:: python

    from triton_dist_plugin.pretune import cases, pretune

    def step(M, N, K):  # builds inputs and launches the @triton.autotune kernels to tune
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        matmul(a, b)

    done = pretune(step, cases(M=[1024, 4096], N=[4096], K=[1024, 4096]))

Every kernel key a case tunes is stored on disk (``persist.py``), so a later process times
nothing for those keys. ``pretune`` returns one ``Tuned`` per kernel key met, in order; with
``group``, it runs inside ``tuning_group(group)`` and every rank ends with the same picks.
``triton-dist-tune pretune MODULE:FUNCTION --cases FILE.json|MODULE:CALLABLE`` does the same from
the command line.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from . import bus, distributed, report
from .hookspecs import hookimpl


@dataclass
class Tuned:
    kernel: str
    key: tuple
    pick: str
    timed: bool  # False: the pick came from the disk cache (tuned earlier)
    seconds: Optional[float]
    case: dict


def cases(**axes: Iterable) -> list[dict]:
    """Every combination of the given values: ``cases(M=[1, 2], dtype=["fp16"])`` gives two dicts."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(list(axes[n]) for n in names))]


def pretune(fn: Callable, case_list: Iterable, group: Any = None, progress: bool = True) -> list[Tuned]:
    """Call ``fn(**case)`` (or ``fn(*case)`` for a tuple or list) for every case, so every kernel key
    those calls launch is tuned now; return what was tuned or found, in order."""
    items = list(case_list)
    if not callable(fn):
        raise TypeError(f"pretune needs a function that launches kernels, got {fn!r}")
    seen: list[Tuned] = []
    current: dict = {}

    class Observer:
        @hookimpl
        def tdp_on_tuned(self, record):
            seen.append(Tuned(record.kernel_name, record.key, str(record.best_config), not record.cache_hit,
                              record.bench_time, dict(current)))

    observer = Observer()
    bus.register(observer)
    bar = report.progress_bar(len(items), getattr(fn, "__name__", "cases"), progress and not distributed.rank(group))
    try:
        for i, case in enumerate(items):
            current.clear()
            current.update(case if isinstance(case, dict) else {"args": list(case)})
            try:
                with distributed.tuning_group(group) if group is not None else contextlib.nullcontext():
                    fn(**case) if isinstance(case, dict) else fn(*case)
            except Exception as exc:
                raise RuntimeError(f"pretune: case {i} {case!r} failed: {type(exc).__name__}: {exc}") from exc
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        bus.unregister(observer)
    return seen


def resolve(spec: str) -> Any:
    """``package.module:attribute`` (a dotted attribute path after the colon)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{spec!r}: expected MODULE:NAME, such as mypkg.ops:step")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def load_cases(spec: str) -> list:
    """Cases from a JSON file (a list of objects or lists) or from ``MODULE:CALLABLE`` (called with
    no arguments, it returns or yields them)."""
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read cases from {spec}: {exc}") from None
        if not isinstance(data, list) or not all(isinstance(c, (dict, list)) for c in data):
            raise ValueError(f"{spec}: expected a JSON list of objects (keyword arguments) or lists (positional)")
        return data
    made = resolve(spec)
    return list(made() if callable(made) else made)


def summary(done: list[Tuned], seconds: float) -> str:
    rows = [[t.kernel, str(t.key), t.pick, "tuned" if t.timed else "from disk",
             f"{t.seconds:.2f}" if t.seconds else "-"] for t in done]
    widths = [max(len(str(x)) for x in col) for col in zip(["kernel", "key", "pick", "", "s"], *rows)] if rows else []
    lines = [f"{len(done)} kernel keys over the cases in {seconds:.1f}s"]
    for row in rows:
        lines.append("  ".join(str(x)[:100].ljust(min(w, 100)) for x, w in zip(row, widths)))
    return "\n".join(lines)


def main(function: str, case_spec: str) -> int:
    started = time.perf_counter()
    done = pretune(resolve(function), load_cases(case_spec))
    print(summary(done, time.perf_counter() - started))
    return 0
