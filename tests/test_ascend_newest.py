"""Triton-Ascend's newest ``AutoTilingTuner`` features, with the plugin imported before or after.

``newest_tuner_class()`` is written like ``AutoTilingTuner`` in Triton-Ascend's
``third_party/ascend/backend/runtime/autotuner.py`` at triton-lang/triton-ascend commit
``1609916636c16f031d6afa08a9dd49a32c98dab2`` (the methods, signatures, call order and attributes
of its ``__init__``, ``prune_configs``, ``run``, ``_try_ubtuner``, ``_batch_bench`` and
``_make_kernel_call``), with the in-memory negative cache of failed compiles that its
``unittest/autotune_ut/test_compile_failure_cache.py`` (commit ``53a398b2``) specifies
(``_get_jit_compile_cache_key``, ``_remember_compile_failure``, ``_compile_failure_cache``,
``_cached_compile_failed_configs``). That release is not on PyPI, so the API is built here on
``triton.runtime.autotuner.Autotuner``, small, without its tiling generation.

What stands in for the NPU (none exists here). The kernels run for real on Triton's CPU
interpreter. In ``_copy``, a ``tl.static_assert`` on the block size stands in for a unified-buffer
overflow at compile time (the interpreter raises it at launch, as ``InterpreterError``), and the
``MULTIBUFFER`` constexpr stands in for the ``multibuffer`` compile option the UB tuner turns off.
``StandInBackend.prune_configs_by_costmodel`` stands in for the backend's TTIR cost model, which
needs the NPU compiler: its estimated latency falls as the block grows. ``StandInUBTuner`` stands
in for ``ubtuner.UBTuner``: it retries the compile with the UB-saving option value, as the real
one retries bisheng options. ``check_disk_cache`` is written like upstream's, but it is keyed
without Triton's and the backend's hashes, which need a driver. It writes through Triton's cache
manager under a temporary ``TRITON_CACHE_DIR``.

"before": the class is defined and the tuner built with the plugin active. "after": both happen
while it is inactive, then it is activated (as ``import triton_dist_plugin`` after the library).
"""

import builtins
import functools
import hashlib
import json
import math
import os
import threading
import time
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.cache import get_cache_manager
from triton.runtime.errors import InterpreterError, OutOfResources

import triton_dist_plugin as tdp
from triton_dist_plugin import _compat, hookimpl

N = 300


@triton.jit
def _copy(x, y, n, BLOCK: tl.constexpr, MULTIBUFFER: tl.constexpr):
    # The stand-in unified buffer: more than 128 elements (double-buffered or not) overflow it.
    tl.static_assert(BLOCK * (1 + MULTIBUFFER) <= 128, "ub overflow")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def _launchable(kwargs: dict) -> dict:
    """What the interpreter takes: kernel arguments, ``grid``/``warmup`` and upstream's options
    (Triton 3.2's ``Config`` also carries warp-specialisation fields only its compiler knows)."""
    keep = set(_copy.arg_names) | {"grid", "warmup", "num_warps", "num_stages", "num_ctas", "maxnreg"}
    return {k: v for k, v in kwargs.items() if k in keep}


# What the Ascend compiler raises for a config that does not compile; under the interpreter a
# failed static_assert arrives at launch as an InterpreterError.
_COMPILE_ERRORS = (OutOfResources, InterpreterError)


class StandInBackend:
    """Stands in for ``make_backend(driver.active.get_current_target())``: ranks candidates as
    ``prune_configs_by_costmodel`` does, keeping the ``top_k`` fastest (the rest as fallback)."""

    def __init__(self):
        self.seen = []

    def prune_configs_by_costmodel(self, fn, configs, named_args, runtime_kwargs, options=None):
        self.seen.append(list(configs))
        if len(configs) <= 1:
            return list(configs), []
        ranked = sorted(configs, key=lambda c: -c.kwargs["BLOCK"])  # bigger blocks: fewer programs
        keep = (options or {}).get("top_k", 2)
        return ranked[:keep], ranked[keep:]


_BACKEND = StandInBackend()


class StandInUBTuner:
    """Stands in for ``ubtuner.UBTuner(fn, key)``: ``get_best_config`` retries the compile with the
    UB-saving value of each option and returns the options that compile (``{}`` if none does)."""

    def __init__(self, fn, key=None):
        self.fn, self.key, self.calls = fn, key or [], []

    def get_best_config(self, *args, compile_opts=None, **kwargs):
        self.calls.append(dict(compile_opts or {}))
        option = {"MULTIBUFFER": 0}
        try:
            self.fn.run(*args, **_launchable({**kwargs, **(compile_opts or {}), **option, "warmup": False}))
        except _COMPILE_ERRORS:
            return {}
        return option


def newest_tuner_class():
    """A tuner class written like Triton-Ascend's newest ``AutoTilingTuner`` (module docstring)."""

    class NewestAutoTilingTuner(_compat.Autotuner):

        def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None,
                     post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False,
                     do_bench=None, cache_results=False, auto_profile_dir=None, hints=None):
            super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook, post_hook,
                             prune_configs_by, warmup, rep, use_cuda_graph, do_bench)
            self.cache_results = cache_results  # set here: Triton 3.2's __init__ does not take it
            self.costmodel_options = None
            self._costmodel_fallback_configs = []
            if prune_configs_by:
                raw = prune_configs_by.get("costmodel")
                self.costmodel_options = {} if raw is True else dict(raw) if isinstance(raw, dict) else None
            self.user_defined_do_bench = do_bench is not None
            self.enable_ubtuner = os.getenv("TRITON_ENABLE_UBTUNER", "").lower() in ("compile", "run")
            if self.enable_ubtuner:
                self.ubtuner = StandInUBTuner(fn, key)
            self.compile_parallel = False  # its AsyncCompileMode path needs a compiler
            self._compile_failure_cache = {}
            self._compile_failure_cache_lock = threading.Lock()
            self._cached_compile_failed_configs = []

        def generate_key_and_configs(self, *args, **kwargs):
            self.nargs = dict(zip(self.arg_names, args))
            named = {k: v for k, v in {**self.nargs, **kwargs}.items() if k in self.arg_names}
            key = [named[name] for name in self.keys if name in named]
            return tuple(key + [str(v.dtype) for v in named.values() if hasattr(v, "dtype")])

        def prune_configs(self, kwargs):
            pruned_configs = super().prune_configs(kwargs)
            self._costmodel_fallback_configs = []
            if self.costmodel_options is None:
                return pruned_configs
            result = _BACKEND.prune_configs_by_costmodel(fn=self.fn, configs=pruned_configs, named_args=self.nargs,
                                                         runtime_kwargs=kwargs, options=self.costmodel_options)
            if result is not None:
                primary_configs, fallback_configs = result
                if primary_configs:
                    pruned_configs = list(primary_configs)
                    self._costmodel_fallback_configs = list(fallback_configs or [])
            return pruned_configs

        def run(self, *args, **kwargs):
            key = self.generate_key_and_configs(*args, **kwargs)
            if key not in self.cache:
                pruned_configs = self.prune_configs(kwargs)
                if self.enable_ubtuner or len(pruned_configs) > 1 or self.costmodel_options is not None:

                    def benchmark():
                        bench_start = time.time()
                        try:
                            timings = self._batch_bench(*args, configs=pruned_configs, **kwargs)
                        except RuntimeError:  # every primary config failed: the cost model's fallback
                            if not self._costmodel_fallback_configs:
                                raise
                            timings = self._batch_bench(*args, configs=self._costmodel_fallback_configs, **kwargs)
                        self.bench_time = time.time() - bench_start
                        self.cache[key] = builtins.min(timings, key=timings.get)
                        self.pre_hook({**self.nargs, **kwargs, **self.cache[key].all_kwargs()}, reset_only=True)
                        self.configs_timings = timings

                    if self.cache_results and not self.enable_ubtuner:  # (with it, Triton-Ascend warns)
                        self.check_disk_cache(key, pruned_configs, benchmark)
                    else:
                        benchmark()
                    config = self.cache[key]
                else:
                    config = pruned_configs[0]  # one candidate: launched untimed, and not cached
            else:
                config = self.cache[key]
            self.best_config = config
            final_kwargs = dict(config.all_kwargs(), **kwargs)
            final_kwargs.update(getattr(config, "ubtune_cfg", {}))
            try:
                return self.fn.run(*args, **_launchable(final_kwargs))
            finally:
                self.nargs = None

        def check_disk_cache(self, tuning_key, configs, bench_fn):
            if not tuning_key or any(cfg.pre_hook for cfg in configs):
                bench_fn()
                return False
            parts = [self.fn.__name__, str(tuning_key)] + [str(c) for c in configs]
            cache = get_cache_manager(hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest())
            file_name = f"{self.fn.__name__[:150]}.autotune.json"
            path = cache.get_file(file_name)
            if path:
                with open(path) as cached_configs:
                    timings = json.load(cached_configs)["configs_timings"]
                timings = {_compat.Config(**config): timing for config, timing in timings}
                self.cache[tuning_key] = builtins.min(timings, key=timings.get)
                self.configs_timings = timings
                return True
            bench_fn()
            timings = [(config.__dict__, timing) for config, timing in self.configs_timings.items()]
            cache.put(json.dumps({"key": tuning_key, "configs_timings": timings}), file_name, binary=False)
            return False

        def _get_jit_compile_cache_key(self, *args, config, **kwargs):
            # Stands in for the JIT binder's specialisation key: the config's options (n is not
            # specialised at these sizes, so every key of a launch shares it).
            return ("compile-key", repr(sorted(config.all_kwargs().items())))

        def _remember_compile_failure(self, compile_key, exc):
            with self._compile_failure_cache_lock:
                self._compile_failure_cache[compile_key] = {"exception_type": type(exc).__name__}

        def _try_ubtuner(self, *args, config, excp, run_fns, **kwargs):
            if not (self.enable_ubtuner and "ub overflow" in str(excp).lower()):
                return
            ub_cfg = self.ubtuner.get_best_config(*args, compile_opts=config.all_kwargs(), **kwargs)
            if ub_cfg:
                config.ubtune_cfg = ub_cfg
                ub_fn = self._make_kernel_call(*args, config=config, **kwargs)
                run_fns[config] = functools.partial(ub_fn, warmup=False)

        def _batch_bench(self, *args, configs, **kwargs):
            kernels_call = {config: self._make_kernel_call(*args, config=config, **kwargs) for config in configs}
            run_fns = {}
            self._compile_failed_configs, self._cached_compile_failed_configs = [], []
            exc = None
            for config, fn in kernels_call.items():
                compile_key = self._get_jit_compile_cache_key(*args, config=config, **kwargs)
                if compile_key in self._compile_failure_cache:  # failed before: not compiled again
                    self._cached_compile_failed_configs.append(config)
                    continue
                try:
                    fn(warmup=False)
                    run_fns[config] = functools.partial(fn, warmup=False)
                except _COMPILE_ERRORS as e:
                    exc = e
                    self._try_ubtuner(*args, config=config, excp=e, run_fns=run_fns, **kwargs)
                    self._compile_failed_configs.append(config)
                    if config not in run_fns:  # the UB tuner could not rescue it
                        self._remember_compile_failure(compile_key, e)
            if not run_fns:
                if exc is None:
                    raise RuntimeError("All triton configs are cached compile failures.")
                raise RuntimeError(f"No valid triton configs. {type(exc).__name__}: {exc}")
            return {config: self.do_bench(fn, quantiles=(0.5, 0.2, 0.8)) for config, fn in run_fns.items()}

        def _make_kernel_call(self, *args, config, **meta):
            conflicts = meta.keys() & config.kwargs.keys()
            if conflicts:
                raise ValueError(f"Conflicting meta-parameters: {', '.join(conflicts)}.")
            current = dict(meta, **config.all_kwargs())
            current.update(getattr(config, "ubtune_cfg", {}))
            full_nargs = {**self.nargs, **current}

            def kernel_call(warmup):
                if config.pre_hook:
                    config.pre_hook(full_nargs)
                self.pre_hook(full_nargs)
                try:
                    current.update({"warmup": warmup})
                    res = self.fn.run(*args, **_launchable(current))
                except Exception as e:
                    try:
                        self.post_hook(full_nargs, exception=e)
                    finally:
                        raise
                if not warmup:
                    self.post_hook(full_nargs, exception=None)
                return res

            return kernel_call

    return NewestAutoTilingTuner


@pytest.fixture(params=["before", "after"])
def newest(request):
    """``make(configs, **options)``: a tuner of a freshly defined newest-style class, the plugin
    imported before (active throughout) or after (inactive while the class is defined and the
    tuner built, activated then)."""
    if request.param == "after" and not _compat.LAZY_BENCH and _compat.interpret():
        pytest.skip("Triton 3.2's Autotuner asks for a driver when built, before any plugin can step in")

    def make(configs, **options):
        if request.param == "after":
            tdp.deactivate()
        try:
            return newest_tuner_class()(_copy, _copy.arg_names, configs, ["n"], None, None, **options)
        finally:
            if request.param == "after":
                tdp.activate()

    _BACKEND.seen.clear()
    return make


def _launch(tuner, n=N):
    x, y = torch.randn(n), torch.zeros(n)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    assert torch.equal(x, y)


def _cfg(block, multibuffer=0, **options):
    return triton.Config({"BLOCK": block, "MULTIBUFFER": multibuffer}, **options)


def test_the_cost_model_prunes_and_the_plugin_prunes_what_it_keeps(newest, recorder, plugins):
    """The NPU's TTIR cost model is ``StandInBackend`` (it ranks by block size); the kernels run
    on the interpreter, timed through the plugin's hooks."""
    seen = []

    class DropLast:
        @hookimpl
        def tdp_prune_configs(self, request, configs):
            seen.append(list(configs))
            return configs[:-1]

    plugins(DropLast())
    configs = [_cfg(b) for b in (16, 32, 64, 128)]
    tuner = newest(configs, prune_configs_by={"costmodel": {"top_k": 3}})
    _launch(tuner)
    assert _BACKEND.seen == [configs]  # the cost model ranked every candidate
    kept = [configs[3], configs[2], configs[1]]  # its three fastest, in its order
    assert seen == [kept]  # the plugin's pruning saw what the cost model kept, not the full list
    assert list(tuner.configs_timings) == kept[:2]
    assert len(recorder.timed) == 2  # each timed through the plugin's timing hook
    (record,) = recorder.records
    assert record.best_config is tuner.best_config and tuner.best_config in kept[:2]


def test_only_triton_ascends_disk_cache_holds_the_pick(newest, recorder, tmp_path, monkeypatch):
    """With its disk cache on (``cache_results=True``) and the plugin's persisted picks on (the
    default), the pick is in Triton-Ascend's cache only, and a new tuner reads it from there.
    Stand-in: the cache key leaves out Triton's and the backend's hashes, which need a driver."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    plugin_store = Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"])
    first = newest([_cfg(32), _cfg(64)], cache_results=True)
    _launch(first)
    assert len(recorder.records) == 1 and len(recorder.timed) == 2
    assert list((tmp_path / "triton-cache").rglob("_copy.autotune.json"))
    assert not list(plugin_store.rglob("*.json"))  # nothing persisted beside it
    recorder.records.clear()
    recorder.timed.clear()
    second = newest([_cfg(32), _cfg(64)], cache_results=True)  # another process's tuner, in effect
    _launch(second)
    assert recorder.timed == [] and recorder.records == []  # Triton-Ascend's disk hit: nothing timed
    assert second.best_config.kwargs == first.best_config.kwargs
    assert not list(plugin_store.rglob("*.json"))


@pytest.fixture(params=["0", "1"], ids=["accuracy-off", "accuracy-on"])
def accuracy(request, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CHECK_ACCURACY", request.param)


def test_a_config_that_failed_to_compile_is_not_compiled_again(newest, recorder, accuracy):
    """A failed compile is a failed ``tl.static_assert`` (standing in for a UB overflow) and the
    JIT compile key is the config's options; with the accuracy check on and off."""
    attempts = []
    bad = _cfg(128, 1, pre_hook=lambda args: attempts.append(1))  # overflows the stand-in buffer
    tuner = newest([_cfg(32), _cfg(64), bad])
    _launch(tuner)
    assert list(tuner._compile_failure_cache) == [tuner._get_jit_compile_cache_key(config=bad)]
    before = len(attempts)
    recorder.timed.clear()
    _launch(tuner, n=N + 100)  # a new key: tuned again
    assert len(attempts) == before  # the negative cache held it: neither compiled nor run again
    assert tuner._cached_compile_failed_configs == [bad]
    assert bad not in tuner.configs_timings and len(recorder.timed) == 2  # the two others only
    assert len(recorder.records) == 2


def test_the_ub_tuner_still_rescues_an_overflowing_compile(newest, recorder, accuracy, monkeypatch):
    """The overflow is a failed ``tl.static_assert``; ``StandInUBTuner`` rescues it by turning the
    ``MULTIBUFFER`` constexpr (the stand-in compile option) off; accuracy check on and off."""
    monkeypatch.setenv("TRITON_ENABLE_UBTUNER", "compile")
    fits, overflows = _cfg(64, 1), _cfg(128, 1)
    tuner = newest([fits, overflows])
    _launch(tuner)
    assert [opts["MULTIBUFFER"] for opts in tuner.ubtuner.calls] == [1]  # retried for the overflow only
    assert overflows.ubtune_cfg == {"MULTIBUFFER": 0}
    assert set(tuner.configs_timings) == {fits, overflows}
    assert math.isfinite(tuner.configs_timings[overflows][0])
    assert len(recorder.timed) == 2  # the rescued compile timed through the hooks too


@pytest.mark.parametrize("costmodel", [None, {"top_k": 1}], ids=["plain", "costmodel"])
def test_a_single_config_is_handled_as_triton_ascend_does(newest, recorder, costmodel):
    """One config, on the interpreter; with the cost model (``StandInBackend``) on and off."""
    only = _cfg(64)
    tuner = newest([only], prune_configs_by={"costmodel": costmodel} if costmodel else None)
    _launch(tuner)
    _launch(tuner)
    assert tuner.best_config is only and recorder.records == []  # nothing to compare: no report
    key = (N, "torch.float32", "torch.float32")
    if costmodel is None:  # no benchmark, and nothing cached: each launch prunes again
        assert tuner.cache == {} and recorder.timed == []
    else:  # the cost model's path times its one survivor once, and caches it
        assert tuner.cache == {key: only} and list(tuner.configs_timings) == [only]
        assert len(recorder.timed) == 1
