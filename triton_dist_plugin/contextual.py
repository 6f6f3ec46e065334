"""Contextual autotuning: tune the kernels inside a function where they really run.

.. code-block:: python

    from triton_dist_plugin.autotuner import contextual_autotune

    @contextual_autotune(is_dist=False, n_repeat=5, n_warmup=3)
    def step(x, w):
        y = matmul(x, w)          # @triton.autotune kernels...
        return layernorm(y)       # ...tuned amid each other, communication and synchronisation

While the decorated function runs, every ``@triton.autotune`` launch on this thread whose key
has no pick yet is registered. The function is then run again and again: one kernel at a time,
each candidate gets ``n_warmup`` warm-up and ``n_repeat`` timed launches inside the real flow,
with the arguments of that launch; kernels already decided use their pick meanwhile. The
fastest mean among valid candidates wins (with ``is_dist=True``, after a MAX over WORLD so all
ranks agree); picks go into each kernel's own cache, and one last run with the picks gives the
result. A failing candidate is skipped (the launch is redone with a valid one, so the flow goes
on); a kernel with no valid candidate raises ``RuntimeError("cannot find valid config")``.
Progress and every measurement go to ``./.autotune_logs/rank-<rank>.log``.

Each kernel's key is one tuning job (``contextual_job``, run by ``job.run`` as every front end's
is). In frozen mode nothing is tuned: the function runs as it is, each miss answered as a plain
launch's would be; a miss during a CUDA graph capture is answered by the launch (``frozen``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from . import _compat, bus, distributed, failures, frozen, job, settings
from .contextual_job import ContextualJob
from .hook_objects import TuningRecord, TuningRequest
from .patched import accuracy, candidates, launch

LOG_DIR = Path(".autotune_logs")
_active_lock = threading.Lock()


@dataclass
class Entry:
    """One (kernel, key) being tuned in context."""

    tuner: Any
    state: Any
    key: tuple
    configs: list
    samples: dict = field(default_factory=dict)  # candidate index -> [ms, ...]
    invalid: dict = field(default_factory=dict)  # candidate index -> reason
    pick: Optional[int] = None
    timings: dict = field(default_factory=dict)
    bench_time: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.state.name} key={self.key}"

    def fallback(self) -> Optional[int]:
        if self.pick is not None:
            return self.pick
        return next((i for i in range(len(self.configs)) if i not in self.invalid), None)


class Session:
    """State of one contextual tuning; lives only while the decorated function is tuned."""

    def __init__(self, name: str, n_warmup: int, n_repeat: int, rank: int):
        settings.validate()  # a bad setting fails here, before any work or collective
        self.name, self.n_warmup, self.n_repeat, self.rank = name, n_warmup, n_repeat, rank
        self.entries: dict = {}  # (id(tuner), key) -> Entry, in discovery order
        self.target: Optional[tuple] = None  # (entry, candidate index) being measured
        self.timed = False
        self.pending_events: list = []  # (entry, index, start, end) on a device
        self.device = _compat.active_device()
        self.log_lines: list[str] = []
        self.records: list[TuningRecord] = []  # handed to the observers once every pick is in place

    def log(self, text: str) -> None:
        self.log_lines.append(f"[{dt.datetime.now().isoformat(timespec='milliseconds')}] {text}")

    # -- called by the patched Autotuner.run on a miss ---------------------------------------------

    def launch(self, tuner: Any, state: Any, key: tuple, args: tuple, kwargs: dict):
        entry = self.entries.get((id(tuner), key))
        if entry is None:
            entry = self.entries[(id(tuner), key)] = self._register(tuner, state, key, args, kwargs)
        index = self.target[1] if self.target is not None and self.target[0] is entry else entry.fallback()
        while True:
            if index is None:
                raise RuntimeError(f"cannot find valid config for {entry.label}: " + "; ".join(
                    f"candidate {i} {entry.configs[i]}: {r}" for i, r in entry.invalid.items()))
            try:
                return self._run(entry, index, args, kwargs, timed=self.timed and self.target == (entry, index))
            except Exception as exc:
                entry.invalid[index] = failures.reason_of(exc)
                self.log(f"{entry.label} candidate {index} ({entry.configs[index]}) failed: {entry.invalid[index]}")
                index = entry.fallback()

    def _register(self, tuner, state, key, args, kwargs) -> Entry:
        nargs, _, named, meta = candidates.split_launch(state, args, kwargs)
        request = TuningRequest(state.name, key, self.device, named, meta, autotuner=tuner, grid=kwargs.get("grid"))
        tuner.nargs = nargs
        try:  # explicit configs through Triton's pruning, or generated ones for configs=[]
            configs = list(candidates.select_configs(tuner, state, request, kwargs))
        finally:
            tuner.nargs = None
        entry = Entry(tuner, state, key, configs)
        if self.device != "cpu":  # compile every candidate up front, in parallel, as plain tuning does
            for config, reason in candidates.precompile(tuner, state, args, kwargs, configs).items():
                entry.invalid[configs.index(config)] = reason
        if accuracy.accuracy_check_enabled(tuner) and len(configs) > 1:
            # Run once each with this launch's arguments before any is timed in the flow, against
            # the reference the kernel's own order gives (as every other front end does).
            pre, post = candidates.call_hooks(tuner)
            gate = accuracy.Gate(state.name, accuracy.reference_order(configs, tuner.configs, request.found.reference),
                                 candidates.make_call_factory(tuner, state, args, kwargs, pre, post), named)
            failed = {configs[i]: r for i, r in entry.invalid.items()}
            for config, reason in gate.check(configs, failed).items():
                for i, c in enumerate(configs):  # an equal copy of a wrong config is wrong too
                    if c is config or c == config:
                        entry.invalid[i] = reason
            gate.finish()
        self.log(f"registered {state.name} key={key} with {len(configs)} candidates")
        return entry

    def _run(self, entry: Entry, index: int, args: tuple, kwargs: dict, timed: bool):
        config = entry.configs[index]
        pre, post = candidates.call_hooks(entry.tuner)
        call = candidates.make_call_factory(entry.tuner, entry.state, args, kwargs, pre, post)(config)
        if not timed:
            return call()
        if self.device == "cpu":
            start = time.perf_counter()
            result = call()
            entry.samples.setdefault(index, []).append((time.perf_counter() - start) * 1e3)
            return result
        import torch

        mod = getattr(torch, self.device)
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        result = call()
        end.record()
        self.pending_events.append((entry, index, start, end))
        return result

    def collect(self) -> None:
        """Turn recorded device events into milliseconds (after the run has finished)."""
        if not self.pending_events:
            return
        import torch

        getattr(torch, self.device).synchronize()
        for entry, index, start, end in self.pending_events:
            entry.samples.setdefault(index, []).append(start.elapsed_time(end))
        self.pending_events.clear()


class ContextualAutoTuner:
    """What ``@contextual_autotune`` returns: call it like the function."""

    def __init__(self, fn: Callable, is_dist: bool, n_repeat: int, n_warmup: int):
        self.fn, self.is_dist, self.n_repeat, self.n_warmup = fn, is_dist, n_repeat, n_warmup
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any):
        if not _active_lock.acquire(blocking=False):
            raise RuntimeError(f"contextual_autotune({self.fn.__qualname__}): another contextual tuner is active "
                               "(a nested call, or another thread); only one may run at a time")
        try:
            if frozen.mode():  # nothing is tuned: each miss takes the plain path (a stored pick, or frozen's),
                settings.validate()  # over the group the session would have agreed in
                with distributed.tuning_group("world") if self.is_dist else contextlib.nullcontext():
                    return self.fn(*args, **kwargs)
            group = None
            rank = int(os.environ.get("RANK", "0"))
            if self.is_dist:
                group = distributed._resolve("world")
                import torch.distributed as dist

                rank = dist.get_rank()
            session = Session(self.fn.__qualname__, self.n_warmup, self.n_repeat, rank)
            try:
                with launch.misses_to(session.launch):  # this thread's misses are the session's
                    result = self.fn(*args, **kwargs)  # discover the kernels that need tuning
                    session.collect()
                    if not session.entries:  # every kernel already has its pick: that was a normal run
                        return result
                    while True:
                        entry = next((e for e in session.entries.values() if e.pick is None), None)
                        if entry is None:
                            break
                        job.run(ContextualJob(self, session, entry, args, kwargs, group))
            finally:
                self._write_log(session)
            self._commit(session)
            return self.fn(*args, **kwargs)
        finally:
            _active_lock.release()

    def _commit(self, session: Session) -> None:
        """Write every pick into its kernel's own cache (and Triton's disk cache where enabled),
        then hand each record to the observers: they see the picks in place."""
        for entry in session.entries.values():
            best = entry.configs[entry.pick]
            tuner = entry.tuner
            tuner.cache[entry.key] = best
            tuner.best_config = best
            tuner.configs_timings = entry.timings or {best: [0.0] * 3}
            tuner.bench_time = entry.bench_time
            if getattr(tuner, "cache_results", False) and hasattr(tuner, "check_disk_cache"):
                tuner.check_disk_cache(entry.key, entry.configs, lambda: None)
        for record in session.records:
            bus.notify(record)

    def _write_log(self, session: Session) -> None:
        if not session.log_lines:
            return
        LOG_DIR.mkdir(exist_ok=True)
        with open(LOG_DIR / f"rank-{session.rank}.log", "a") as f:
            f.write(f"== contextual_autotune {session.name}\n")
            f.writelines(line + "\n" for line in session.log_lines)


def contextual_autotune(is_dist: bool = False, n_repeat: int = 5, n_warmup: int = 3) -> Callable:
    """Decorate a function so the ``@triton.autotune`` kernels it launches are tuned in its context."""
    if not isinstance(n_repeat, int) or isinstance(n_repeat, bool) or n_repeat < 1:
        raise ValueError(f"contextual_autotune: n_repeat must be an int >= 1, got {n_repeat!r}")
    if not isinstance(n_warmup, int) or isinstance(n_warmup, bool) or n_warmup < 0:
        raise ValueError(f"contextual_autotune: n_warmup must be an int >= 0, got {n_warmup!r}")
    return lambda fn: ContextualAutoTuner(fn, bool(is_dist), n_repeat, n_warmup)


