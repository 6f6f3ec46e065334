"""Tuner subclasses with their own ``run()``: their loop over ``_bench`` gets one engine run.

Each subclass here is written the way a real library writes its own: FlagGems' ``LibTuner``
(prunes, then hands a ``bench(config)`` function to a policy), Triton-Ascend's
``AutoTilingTuner`` (``keys`` maps axes to arguments, generates its configs, prunes, then times
them in a dict comprehension) and flash-linear-attention's ``CachedAutotuner`` (its ``run()``
calls ``super().run()``). Kernels run on the interpreter; there is nothing to compile there, so
what is shown is the batching, the screening and upstream's semantics inside the loop.
"""

import builtins
import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE

from triton_dist_plugin import _compat, hookimpl

BLOCKS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


@triton.jit
def _inc(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask) + 1.0, mask=mask)
    tl.atomic_add(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def _configs():
    return [triton.Config({"BLOCK": b}) for b in BLOCKS]


def _options(config):
    """``config.all_kwargs()`` as the libraries pass it, less what Triton 3.2's interpreter rejects
    (its Config carries warp-specialisation fields that only its compiler knows)."""
    keep = set(_inc.arg_names) | {"SCALE", "num_warps", "num_stages", "num_ctas", "maxnreg"}
    return {k: v for k, v in config.all_kwargs().items() if DEVICE != "cpu" or k in keep}


class _OwnLoop(_compat.Autotuner):
    """What every tuner with its own ``run`` below does around its own timing: keep the pick as
    upstream's ``run`` does (the ``reset_only`` hook, ``configs_timings``), then launch it."""

    def _keep(self, key, timings, kwargs):
        self.cache[key] = builtins.min(timings, key=timings.get)
        self.pre_hook({**self.nargs, **kwargs, **self.cache[key].all_kwargs()}, reset_only=True)
        self.configs_timings = timings

    def _launch(self, key, args, kwargs):
        self.best_config = self.cache[key]
        return self.fn.run(*args, **kwargs, **_options(self.best_config))


class LibTunerLike(_OwnLoop):
    """FlagGems 5.0's shape: prune, then a policy calls ``bench(config)`` for each survivor."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        named = {**self.nargs, **kwargs}
        key = tuple(named[k] for k in self.keys)
        if key not in self.cache:
            pruned = self.prune_configs(kwargs)

            def bench(config):
                return self._bench(*args, config=config, **kwargs)

            self._keep(key, {config: bench(config) for config in pruned}, kwargs)
        return self._launch(key, args, kwargs)


class AutoTilingLike(_OwnLoop):
    """Triton-Ascend 3.2's shape: ``keys`` maps an axis to an argument; configs made per key."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        named = {**self.nargs, **kwargs}
        key = tuple(named[v] for v in self.keys.values())
        if key not in self.cache:
            self.configs = _configs()
            pruned = self.prune_configs(kwargs)
            self._keep(key, {config: self._bench(*args, config=config, **kwargs) for config in pruned}, kwargs)
        return self._launch(key, args, kwargs)


class CachedLike(_compat.Autotuner):
    """flash-linear-attention's shape: bookkeeping around ``super().run()``."""

    def run(self, *args, **kwargs):
        self.calls = getattr(self, "calls", 0) + 1
        return super().run(*args, **kwargs)


def _make(cls, **extra):
    keys = {"n": "n"} if cls is AutoTilingLike else ["n"]
    return cls(_inc, _inc.arg_names, _configs(), keys, ["out"], ["x"], **extra)


# On a GPU the blocks must differ in speed for screening to drop some (at 300 elements all tie).
N = 300 if DEVICE == "cpu" else 1 << 22


def _launch(kernel, by, n=N):
    x = torch.zeros(n, device=DEVICE)
    out = torch.zeros(n, device=DEVICE)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    if by == "position":
        kernel[grid](x, out, n)
    else:
        kernel[grid](x=x, out=out, n=n)
    return x, out


@pytest.mark.parametrize("by", ["position", "keyword"])
@pytest.mark.parametrize("cls", [LibTunerLike, AutoTilingLike, CachedLike])
def test_subclass_loop_is_one_screened_run_with_upstream_semantics(cls, by, recorder):
    kernel = _make(cls)
    x, out = _launch(kernel, by)
    # reset_to_zero and restore_value held across every timed call: one launch's effect only.
    assert torch.equal(x, torch.ones_like(x)) and torch.equal(out, torch.ones_like(out))
    (record,) = recorder.records
    assert record.autotuner is kernel
    assert any(note.startswith("screened 10 of 10 candidates") for note in record.notes)
    # Only the screening survivors ran the full measurement; every candidate was still timed.
    full = [r for r in recorder.timed if r.n_repeat is None]
    assert 1 <= len({id(r.config) for r in full}) < len(BLOCKS)
    assert {id(r.config) for r in recorder.timed} == {id(c) for c in kernel.configs}
    assert kernel.best_config is record.best_config
    if cls is not CachedLike:
        assert set(kernel.configs_timings) == set(kernel.configs)
        assert all(len(t) == 3 for t in kernel.configs_timings.values())
        # The subclass's own min lands on a fully measured candidate.
        assert id(kernel.best_config) in {id(r.config) for r in full}
    # A hit launches without tuning again.
    x, out = _launch(kernel, by)
    assert len(recorder.records) == 1 and torch.equal(out, torch.ones_like(out))


def test_a_bench_outside_a_pruned_loop_is_timed_alone(recorder):
    kernel = _make(LibTunerLike)
    x = torch.zeros(300, device=DEVICE)
    out = torch.zeros(300, device=DEVICE)
    config = kernel.configs[3]
    timing = kernel._bench(x, out, 300, config=config, grid=(triton.cdiv(300, 128),), warmup=False)
    assert len(timing) == 3 and all(t > 0 for t in timing)
    assert [id(r.config) for r in recorder.timed] == [id(config)]
    assert recorder.records == []  # no engine run: nothing to batch


def test_other_arguments_in_the_loop_end_the_batch(recorder):
    kernel = _make(LibTunerLike)
    x = torch.zeros(300, device=DEVICE)
    out = torch.zeros(300, device=DEVICE)
    pruned = kernel.prune_configs({})
    kernel._bench(x, out, 300, config=pruned[0], grid=(3,), warmup=False)
    assert len(recorder.records) == 1  # the batch ran
    timed = len(recorder.timed)
    other = torch.zeros(300, device=DEVICE)
    kernel._bench(other, out, 300, config=pruned[1], grid=(3,), warmup=False)
    assert len(recorder.timed) == timed + 1  # another launch: timed alone, on its own tensors


def test_parallel_compile_off_times_each_candidate_alone(recorder, monkeypatch):
    monkeypatch.setenv("TRITON_AUTOTUNE_PARALLEL_COMPILE", "0")
    kernel = _make(LibTunerLike)
    x, out = _launch(kernel, "position")
    assert torch.equal(out, torch.ones_like(out))
    assert recorder.records == [] and len(recorder.timed) == len(BLOCKS)


def _stand_in_do_bench_npu(funcs, warmup=5, active=30, **options):
    """Stands in for Triton-Ascend's profiler timer (no NPU here): the newer form's contract, a
    list of callables in and a list of milliseconds out, timed with the host clock."""
    import time

    out = []
    for fn in funcs:
        for _ in range(warmup):
            fn()
        start = time.perf_counter()
        for _ in range(active):
            fn()
        out.append((time.perf_counter() - start) / active * 1e3)
    return out


class NewerAutoTilingLike(_OwnLoop):
    """Written like Triton-Ascend's newer ``AutoTilingTuner`` (a source release not on PyPI):
    ``run`` prunes, then ``_batch_bench`` compiles and times every candidate itself, with
    ``self.do_bench`` per config, or its profiler timer over all of them with
    ``TRITON_BENCH_METHOD=npu``; the subclass picks the min of what it returns."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple({**self.nargs, **kwargs}[k] for k in self.keys)
        if key not in self.cache:
            pruned = self.prune_configs(kwargs)
            self._keep(key, self._batch_bench(*args, configs=pruned, **kwargs), kwargs)
        return self._launch(key, args, kwargs)

    def _batch_bench(self, *args, configs, **kwargs):
        import os

        def call(config):
            def run():
                full = {**self.nargs, **kwargs, **config.all_kwargs()}
                self.pre_hook(full)
                self.fn.run(*args, **kwargs, **_options(config))
                self.post_hook(full, exception=None)

            return run

        calls = [call(c) for c in configs]
        if os.environ.get("TRITON_BENCH_METHOD", "") == "npu":
            return dict(zip(configs, _stand_in_do_bench_npu(calls, warmup=1, active=2)))
        return {c: self.do_bench(fn, quantiles=(0.5, 0.2, 0.8)) for c, fn in zip(configs, calls)}


class _Penalise:
    """A reduction plugin: makes the first config look slowest, as a slower rank would."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def tdp_reduce_timings(self, request, timings, group):
        self.seen.append(request.kernel_name)
        first = next(iter(timings))
        return {c: ([1e6] * 3 if c is first else t) for c, t in timings.items()}


@pytest.mark.parametrize("method", ["", "npu"])
def test_a_subclass_batch_bench_reaches_the_reduction_and_the_report(method, recorder, plugins, monkeypatch):
    if method:
        monkeypatch.setenv("TRITON_BENCH_METHOD", method)
    penalise = _Penalise()
    plugins(penalise)
    kernel = NewerAutoTilingLike(_inc, _inc.arg_names, _configs()[:4], ["n"], ["out"], ["x"])
    x, out = _launch(kernel, "keyword")
    assert torch.equal(x, torch.ones_like(x)) and torch.equal(out, torch.ones_like(out))
    assert penalise.seen == ["_inc"]
    (record,) = recorder.records
    assert record.autotuner is kernel and len(record.timings) == 4
    first = kernel.configs[0]
    assert kernel.best_config is not first  # the reduced timings are what the subclass picked from
    assert kernel.configs_timings[first] == ([1e6] * 3 if not method else 1e6)  # in the subclass's own shape
    # Its do_bench timings went through the timing hooks (the profiler form times on its own).
    assert len(recorder.timed) == (0 if method else 4)


@triton.jit
def _scaled_copy(x, y, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) * SCALE, mask=mask)


@pytest.mark.parametrize("cls", [LibTunerLike, NewerAutoTilingLike])
def test_the_accuracy_check_reaches_subclass_loops(cls, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CHECK_ACCURACY", "1")
    configs = [triton.Config({"BLOCK": b, "SCALE": 1}) for b in (64, 128, 256)] + [
        triton.Config({"BLOCK": 32, "SCALE": 2})]  # a candidate whose result is wrong
    kernel = cls(_scaled_copy, _scaled_copy.arg_names, configs, ["n"], None, None)
    x, y = torch.randn(300, device=DEVICE), torch.zeros(300, device=DEVICE)
    kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
    assert torch.equal(x, y)
    assert kernel.best_config.kwargs["SCALE"] == 1
    assert "wrong result" in kernel.tdp_failures[configs[3]]
    assert kernel.configs_timings[configs[3]] in ([math.inf] * 3, math.inf)
