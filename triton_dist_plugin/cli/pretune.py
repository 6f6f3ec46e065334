"""Tuning ahead of time: run a function over argument cases so its kernels' keys are tuned (and
persisted) before the program that needs them starts.

.. code-block:: python

    from triton_dist_plugin.cli.pretune import cases, pretune

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
import os
import sys
import sysconfig
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from .. import bus, distributed
from ..hookspecs import hookimpl
from ..reporting import report


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


class PretuneError(RuntimeError):
    """A case, a target or a case list that failed; the message says which, why and where."""


def pretune(fn: Callable, case_list: Iterable, group: Any = None, progress: bool = True) -> list[Tuned]:
    """Call ``fn(**case)`` (or ``fn(*case)`` for a tuple or list) for every case, so every kernel key
    those calls launch is tuned now; return what was tuned or found, in order."""
    items = list(case_list)
    if not callable(fn):
        raise TypeError(f"pretune needs a function that launches kernels, got {fn!r} (a {type(fn).__name__})")
    seen: list[Tuned] = []
    current: dict = {}

    class Observer:
        @hookimpl
        def tdp_on_tuned(self, record):
            seen.append(Tuned(record.kernel_name, record.key, str(record.best_config), not record.cache_hit,
                              record.bench_time, dict(current)))

    observer = Observer()
    bus.register(observer)
    name = getattr(fn, "__name__", "cases")
    bar = report.progress_bar(len(items), name, progress and not distributed.rank(group))
    try:
        for i, case in enumerate(items):
            current.clear()
            current.update(case if isinstance(case, dict) else {"args": list(case)})
            try:
                with distributed.tuning_group(group) if group is not None else contextlib.nullcontext():
                    fn(**case) if isinstance(case, dict) else fn(*case)
            except Exception as exc:
                raise PretuneError(f"case {i} {case!r} failed in {name}: {_why(exc)}") from exc
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        bus.unregister(observer)
    return seen


_PLUGIN = str(Path(__file__).resolve().parent)
_LIBRARIES = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} - {None}


def _why(exc: BaseException) -> str:
    """``Type: message``, and the innermost line of the user's own code it came from (not the
    plugin's, a library's nor the standard library's), as ``(file:line)``."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        return text  # its text names the file and line already
    own = [f for f in traceback.extract_tb(exc.__traceback__)
           if not f.filename.startswith("<") and not _library(f.filename)]
    if own:
        where = own[-1].filename
        with contextlib.suppress(ValueError):
            where = os.path.relpath(where) if Path(where).resolve().is_relative_to(Path.cwd()) else where
        text += f" ({where}:{own[-1].lineno})"
    return text


def _library(filename: str) -> bool:
    path = str(Path(filename).resolve())
    return path.startswith(_PLUGIN) or any(path.startswith(str(Path(lib).resolve())) for lib in _LIBRARIES)


def resolve(spec: str) -> Any:
    """``package.module:attribute`` (a dotted attribute path after the colon)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{spec!r}: expected MODULE:NAME, such as mypkg.ops:step")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name) and module[len(exc.name):][:1] in ("", "."):
            raise PretuneError(f"cannot import {module} (for {spec}): no module named {exc.name!r} in the current "
                               "directory or on PYTHONPATH") from None
        raise PretuneError(f"cannot import {module} (for {spec}): {_why(exc)}") from None
    except Exception as exc:  # the module itself failed: its error, and where
        raise PretuneError(f"cannot import {module} (for {spec}): {_why(exc)}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise PretuneError(f"{spec}: {getattr(obj, '__name__', module)} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def load_cases(spec: str) -> list:
    """Cases from a JSON file (a list of objects or lists) or from ``MODULE:CALLABLE`` (called with
    no arguments, it returns or yields them)."""
    path = Path(spec)
    if path.suffix == ".json" or path.exists() or ":" not in spec:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else getattr(exc, "strerror", None) or exc
            raise ValueError(f"cannot read cases from {spec}: {reason}") from None
        return _checked(data, spec, "a JSON list")
    made = resolve(spec)
    try:
        data = made() if callable(made) else made
    except Exception as exc:
        raise PretuneError(f"the cases from {spec} failed: {_why(exc)}") from None
    if isinstance(data, (str, bytes, dict)) or not hasattr(data, "__iter__"):
        raise ValueError(f"{spec}: expected a list of cases (keyword-argument dicts or argument lists), got "
                         f"{_short(data)}")
    try:
        data = list(data)
    except Exception as exc:  # a generator that raised
        raise PretuneError(f"the cases from {spec} failed: {_why(exc)}") from None
    return _checked(data, spec, "a list")


def _checked(data: Any, spec: str, what: str) -> list:
    if not isinstance(data, list) or not all(isinstance(c, (dict, list, tuple)) for c in data):
        raise ValueError(f"{spec}: expected {what} of objects (keyword arguments) or lists (positional), got "
                         f"{_short(data)}")
    return data


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "..."


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


HEADER = ["kernel", "key", "pick", "how", "seconds"]


def summary(done: list[Tuned], seconds: float) -> str:
    """The command's report: a count, then a table of every kernel key with its pick."""
    head = f"{_plural(len(done), 'kernel key')} over the cases in {seconds:.1f}s"
    if not done:
        return head + " (the function launched no @triton.autotune kernel and no tune.autotune function)"
    rows = [[t.kernel, str(t.key), t.pick, "tuned" if t.timed else "from disk",
             f"{t.seconds:.2f}" if t.seconds else "-"] for t in done]
    widths = [min(max(len(str(x)) for x in col), 100) for col in zip(HEADER, *rows)]
    line = lambda r: "  ".join(str(x)[:w].ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([head, line(HEADER), line(["-" * w for w in widths])] + [line(r) for r in rows])


def main(function: str, case_spec: str) -> int:
    """``triton-dist-tune pretune``: as ``python -m`` does, the current directory is searched first
    for the modules named, so ``pretune mymod:step`` finds ``./mymod.py``."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    started = time.perf_counter()
    target = resolve(function)
    if not callable(target):
        raise PretuneError(f"{function} is not a function: it is {_short(target)}, of type {type(target).__name__}")
    done = pretune(target, load_cases(case_spec))
    print(summary(done, time.perf_counter() - started))
    return 0
