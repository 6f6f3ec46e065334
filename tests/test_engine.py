"""The patched Autotuner on real kernels under the interpreter: upstream semantics, kept."""

import ast
import inspect
import math
import re
import threading
import traceback
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, rand

import triton_dist_plugin as tdp
from kernels import KERNELS
from triton_dist_plugin import _compat, engine, failures, hookimpl


def tuned(name, **kw):
    spec = KERNELS[name]
    return spec, triton.autotune(configs=spec.configs(DEVICE), key=spec.key, **kw)(spec.jit)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_tunes_runs_and_records_in_upstream_shapes(name, recorder):
    spec, kernel = tuned(name)
    args = spec.make_inputs("tiny", DEVICE)
    out = spec.launch(kernel, *args)
    tol = 1e-4 if DEVICE == "cpu" or name != "matmul" else 2e-2  # a GPU's float32 dot runs in tf32
    torch.testing.assert_close(out, spec.reference(*args), rtol=tol, atol=tol)
    assert len(kernel.cache) == 1
    (key, best), = kernel.cache.items()
    assert kernel.best_config is best
    assert kernel.bench_time > 0
    assert {str(c) for c in kernel.configs_timings} == {str(c) for c in spec.configs(DEVICE)}
    for timing in kernel.configs_timings.values():
        assert isinstance(timing, list) and len(timing) == 3 and all(t > 0 for t in timing)
    # The pick is the fastest candidate measured fully (the others may hold a screening round's time),
    # unless the finalists were too close to call: then the interleaved rounds decided (settle.py).
    full = {id(r.config) for r in recorder.timed if r.n_repeat is None}
    fastest = min((c for c in kernel.configs_timings if id(c) in full), key=kernel.configs_timings.get)
    decision = recorder.records[0].decision
    assert id(best) in full and (best == fastest or decision["rounds"] > 0), decision
    assert [r.key for r in recorder.records] == [key]
    assert recorder.records[0].method == ("wall" if DEVICE == "cpu" else "event")
    assert {r.device for r in recorder.timed} == {DEVICE}


def test_cache_hit_does_not_retune_and_new_keys_do(recorder):
    spec, kernel = tuned("add")
    x, y = spec.make_inputs("tiny", DEVICE)
    spec.launch(kernel, x, y)
    spec.launch(kernel, x, y)
    assert len(recorder.records) == 1
    spec.launch(kernel, x[:700], y[:700])  # n is in the key
    spec.launch(kernel, x.half(), y.half())  # so are the tensors' dtypes
    assert [r.key for r in recorder.records] == [(1000, "torch.float32", "torch.float32", "torch.float32"),
                                                 (700, "torch.float32", "torch.float32", "torch.float32"),
                                                 (1000, "torch.float16", "torch.float16", "torch.float16")]
    assert set(kernel.cache) == {r.key for r in recorder.records}


def test_key_matches_upstream_when_arguments_come_by_keyword(recorder):
    spec, kernel = tuned("scale")
    x, _alpha = spec.make_inputs("tiny", DEVICE)
    y = torch.empty_like(x)
    kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, alpha=2.0, n=x.numel())
    torch.testing.assert_close(y, 2 * x)
    assert recorder.records[0].key == (1000, "torch.float32", "torch.float32")


@triton.jit
def _copy(x, y, n, BLOCK: tl.constexpr):
    # Every interpreter fails a non-power-of-two block here (some would not in tl.arange).
    tl.static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of 2")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def _launch_copy(kernel, n=200):
    x = rand(n)
    y = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    return x, y


def test_a_failing_candidate_times_as_infinity_and_tuning_goes_on(recorder):
    bad = triton.Config({"BLOCK": 96})  # tl.arange needs a power of two
    good = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    kernel = triton.autotune(configs=[good[0], bad, good[1]], key=["n"])(_copy)
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y)
    assert kernel.configs_timings[bad] == [math.inf] * 3
    assert kernel.best_config in good
    record = recorder.records[0]
    assert set(record.failures) == {bad}
    assert "power of 2" in record.failures[bad]


def _out_of_resources(nargs):
    from triton.runtime.errors import OutOfResources

    raise OutOfResources(1 << 20, 1 << 16, "shared memory")


def test_every_candidate_out_of_resources_keeps_the_first_and_its_launch_raises():
    # Failures upstream counts as a failed config (here OutOfResources, raised before each launch):
    # as upstream, the first config is kept and its launch raises what stopped it.
    from triton.runtime.errors import OutOfResources

    bad = [triton.Config({"BLOCK": 64}, pre_hook=_out_of_resources),
           triton.Config({"BLOCK": 128}, pre_hook=_out_of_resources)]
    kernel = triton.autotune(configs=bad, key=["n"])(_copy)
    with pytest.raises(OutOfResources):
        _launch_copy(kernel)
    assert list(kernel.cache.values()) == [bad[0]]


def test_every_candidate_failing_is_a_runtime_error_listing_each_reason():
    from triton_dist_plugin import engine

    def call(config):
        def run():
            raise RuntimeError(f"broken {config}")
        return run

    request = tdp.TuningRequest("k", (1,), "cpu", {}, {})
    with pytest.raises(RuntimeError, match="every candidate of k failed") as info:
        engine.run_candidates(request, [1, 2], call, method="wall")
    assert isinstance(info.value, tdp.NoValidConfig)
    assert set(info.value.failures) == {1, 2}
    assert all("broken" in info.value.failures[c] for c in (1, 2))


def test_every_candidate_failing_with_an_error_upstream_lets_through_raises_that_error():
    # A non-power-of-two block is the kernel's own bug: upstream's _bench lets it out, and so do we
    # once no candidate works, with every candidate's reason attached.
    bad = [triton.Config({"BLOCK": 96}), triton.Config({"BLOCK": 48})]
    kernel = triton.autotune(configs=bad, key=["n"])(_copy)
    with pytest.raises(Exception) as info:
        _launch_copy(kernel)
    assert not isinstance(info.value, tdp.NoValidConfig)
    assert "power of 2" in str(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "every candidate of _copy failed" in notes
    for config in bad:
        assert str(config) in notes
    # The traceback ends where tuning gave up (the engine's loop), next to that summary, not in the timing machinery.
    frames = [Path(f.filename).name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "loop.py" and not {"bus.py", "timing.py", "candidates.py"} & set(frames)
    assert not kernel.cache


def test_conflicting_meta_parameter_is_a_clear_error():
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(_copy)
    x = rand(100)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
        kernel[(1,)](x, x, 100, BLOCK=128)


@triton.jit
def _accumulate(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _increment(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
GRID = lambda n: lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731


def test_reset_to_zero_is_applied_before_every_run_and_the_final_launch():
    kernel = triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out"])(_accumulate)
    x, out = rand(100), torch.full((100,), 7.0, device=DEVICE)
    kernel[GRID(100)](x, out, 100)
    torch.testing.assert_close(out, x)


def test_restore_value_undoes_every_timed_run():
    kernel = triton.autotune(configs=CONFIGS, key=["n"], restore_value=["x"])(_increment)
    x = rand(100)
    before = x.clone()
    kernel[GRID(100)](x, 100)
    torch.testing.assert_close(x, before + 1)


def test_user_pre_and_post_hooks_are_called_around_every_timed_run():
    seen = []
    kernel = triton.autotune(configs=CONFIGS, key=["n"], pre_hook=lambda a, reset_only=False: seen.append("pre"),
                             post_hook=lambda a, exception: seen.append("post"))(_copy)
    _launch_copy(kernel)
    assert seen.count("pre") == seen.count("post") + 1  # +1: reset_only before the real launch
    assert seen.count("post") >= len(CONFIGS)


def test_config_pre_hook_runs_before_tuning_runs_and_the_launch():
    calls = []
    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda a: calls.append(a["n"])) for b in (32, 64)]
    kernel = triton.autotune(configs=configs, key=["n"])(_copy)
    _launch_copy(kernel, n=90)
    n = len(calls)
    _launch_copy(kernel, n=90)
    assert n >= 3 and len(calls) == n + 1 and set(calls) == {90}


def test_prune_configs_by_and_the_prune_hook_apply_in_turn(recorder, plugins):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)]
    early = lambda configs, nargs, **kw: [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]  # noqa: E731

    class DropSmallest:
        @hookimpl
        def tdp_prune_configs(self, request, configs):
            assert request.nargs["n"] == 100 and request.kernel_name == "_copy"
            return sorted(configs, key=lambda c: c.kwargs["BLOCK"])[1:]

    plugins(DropSmallest())
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": early})(_copy)
    _launch_copy(kernel, n=100)
    assert sorted(c.kwargs["BLOCK"] for c in kernel.configs_timings) == [32, 64]


def test_pruning_to_one_config_skips_timing(recorder):
    early = lambda configs, nargs, **kw: configs[:1]  # noqa: E731
    kernel = triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": early})(_copy)
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y) and kernel.best_config is CONFIGS[0] and not recorder.timed


def test_perf_model_top_k_is_honoured():
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)]
    model = lambda **kw: -kw["BLOCK"]  # noqa: E731
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"perf_model": model, "top_k": 2})(_copy)
    _launch_copy(kernel)
    assert sorted(c.kwargs["BLOCK"] for c in kernel.configs_timings) == [64, 128]


def test_pruning_everything_is_an_error(plugins):
    early = lambda configs, nargs, **kw: []  # noqa: E731
    kernel = triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": early})(_copy)
    with pytest.raises(Exception, match="(?i)no valid autotuner configs"):
        _launch_copy(kernel)

    class Greedy:
        @hookimpl
        def tdp_prune_configs(self, configs):
            return []

    plugins(Greedy(), name="greedy")
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    with pytest.raises(ValueError, match="plugin 'greedy' pruned every candidate"):
        _launch_copy(kernel)


def test_single_config_shortcut_needs_no_key_or_timing(recorder):
    kernel = triton.autotune(configs=CONFIGS[:1], key=["n"])(_copy)
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y) and not recorder.timed and not kernel.cache


def test_kernels_own_do_bench_wins_over_every_hook(recorder):
    calls = []

    def own(fn, quantiles):
        fn()
        calls.append(1)
        return [float(len(calls)), 0.0, 0.0]

    # Built directly: Triton 3.2's triton.autotune() does not forward do_bench to the Autotuner.
    kernel = _compat.Autotuner(_copy, _copy.arg_names, CONFIGS, ["n"], None, None, do_bench=own)
    _launch_copy(kernel)
    assert len(calls) == 2 and not recorder.timed
    assert kernel.best_config is CONFIGS[0]


def _own_bench(tuner):
    """The benchmarker upstream's ``__init__`` stored (3.4+ keeps it in ``_do_bench``)."""
    return tuner.__dict__.get("_do_bench") or tuner.__dict__.get("do_bench")


@pytest.mark.filterwarnings("ignore:warmup, rep, and use_cuda_graph:DeprecationWarning")
def test_a_compile_errors_reason_keeps_its_message():
    from triton.compiler.errors import CompileTimeAssertionFailure

    node = ast.parse("tl.static_assert(False)").body[0]
    exc = CompileTimeAssertionFailure("def k(BLOCK):\n    tl.static_assert(False)", node, "BLOCK must be a power of 2")
    assert failures.reason_of(exc) == "CompileTimeAssertionFailure: at 1:0: BLOCK must be a power of 2"
    assert failures.reason_of(exc).exc is exc
    assert failures.reason_of(ValueError("first line\nsecond")) == "ValueError: first line"


def test_screening_stands_in_only_for_tritons_own_event_timer(monkeypatch):
    from triton_dist_plugin.patched import benchmarker

    def build(**kw):
        return _compat.Autotuner(_copy, _copy.arg_names, CONFIGS, ["n"], None, None, **kw)

    counts = build(warmup=5, rep=10)  # upstream times with triton.testing.do_bench(warmup=5, rep=10)
    assert isinstance(benchmarker.screen_for(counts, _own_bench(counts)), engine.Screen)
    assert isinstance(benchmarker.screen_for(build(), None), engine.Screen)
    graphs = build(rep=10, use_cuda_graph=True)  # graph replays are not what events time
    assert benchmarker.screen_for(graphs, _own_bench(graphs)) is None
    own = build(do_bench=lambda fn, quantiles: [1.0, 1.0, 1.0])  # a lambda, but the kernel's own
    assert benchmarker.screen_for(own, _own_bench(own)) is None
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive")
    assert benchmarker.screen_for(counts, _own_bench(counts)) is None


def test_screening_with_a_do_bench_times_only_the_finalists_with_it(recorder):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256, 512)]
    x = rand(500)
    y = torch.zeros_like(x)
    fully = []

    def bench(fn, quantiles):
        fn()
        fully.append(fn)
        return [1.0, 1.0, 1.0]

    def make_call(config):
        return lambda: _copy[(triton.cdiv(500, config.kwargs["BLOCK"]),)](x, y, 500, **config.kwargs)

    request = tdp.TuningRequest("copy", (500,), DEVICE)
    outcome = engine.run_candidates(request, configs, make_call, method="wall", do_bench=bench,
                                    screen=engine.Screen())
    torch.testing.assert_close(y, x)
    assert [r.n_repeat for r in recorder.timed].count(5) == 6  # every candidate screened...
    assert len(fully) == 2 and sorted(map(str, outcome.measured)) == sorted(  # ...two measured by do_bench
        str(c) for c in configs if outcome.timings[c] == [1.0, 1.0, 1.0])
    assert outcome.best in outcome.measured


def test_timing_plugin_replaces_the_builtin_and_floats_are_normalised(plugins):
    class Fixed:
        @hookimpl
        def tdp_time_candidate(self, request):
            request.call()
            return 1.0 / request.config.kwargs["BLOCK"]

    plugins(Fixed())
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    _launch_copy(kernel)
    assert kernel.configs_timings[CONFIGS[1]] == [1 / 64] * 3
    assert kernel.best_config is CONFIGS[1]


def test_a_hook_returning_the_wrong_type_names_the_plugin(plugins):
    class Broken:
        @hookimpl
        def tdp_time_candidate(self, request):
            return "fast"

    plugins(Broken(), name="broken-timer")
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    with pytest.raises(tdp.PluginError, match="plugin 'broken-timer' returned a bad result from tdp_time_candidate"):
        _launch_copy(kernel)


def test_misspelt_hook_is_rejected_at_registration():
    class Typo:
        @hookimpl
        def tdp_time_candidat(self, request):
            return 1.0

    with pytest.raises(Exception, match="tdp_time_candidat"):
        tdp.register(Typo())
    assert not any(isinstance(p, Typo) for p in tdp.plugin_manager().get_plugins())


def test_unknown_bench_method_is_an_error_listing_valid_ones(monkeypatch):
    monkeypatch.setenv("TRITON_BENCH_METHOD", "stopwatch")
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    with pytest.raises(ValueError, match="event, profiler, npu, cudagraph, wall"):
        _launch_copy(kernel)


@pytest.mark.skipif(DEVICE != "cpu", reason="fallback to the wall clock happens on the interpreter")
def test_device_method_on_the_interpreter_falls_back_with_one_warning(monkeypatch, recorder):
    from triton_dist_plugin import timing

    timing._warned.clear()
    monkeypatch.setenv("TRITON_BENCH_METHOD", "cudagraph")
    with pytest.warns(RuntimeWarning, match="wall clock") as caught:
        for n in (100, 101, 102):
            _launch_copy(triton.autotune(configs=CONFIGS, key=["n"])(_copy), n=n)
    assert len([w for w in caught if "wall clock" in str(w.message)]) == 1
    assert {r.method for r in recorder.records} == {"wall"}


def test_print_autotuning_shows_every_candidate_and_the_pick(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    bad = triton.Config({"BLOCK": 96})
    kernel = triton.autotune(configs=CONFIGS + [bad], key=["n"])(_copy)
    _launch_copy(kernel)
    out = capsys.readouterr().out
    assert "Triton autotuning for function _copy" in out and "best config selected" in out
    assert out.count(" ms") == 2 and "failed:" in out


def test_print_autotuning_sets_screened_out_candidates_apart(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256, 512)]
    _launch_copy(triton.autotune(configs=configs, key=["n"])(_copy), n=2000)
    out = capsys.readouterr().out
    head, tail = out.split("screened out (a short round each):")
    # Those measured fully (final_count, or up to final_most where others were too close to drop),
    # the pick among them; the rest under the heading, with their screening round's time.
    fully = int(re.search(r"measuring the best (\d+) fully", head).group(1))
    assert 2 <= fully <= 4 and head.count(" ms") == fully and "*" in head, out
    assert tail.split("best config selected")[0].count(" ms") == 6 - fully


@pytest.mark.skipif(_compat.autotuning_listener is None or _compat.knobs is None
                    or not hasattr(_compat.knobs.autotuning, "listener"), reason="Triton without listener knob")
def test_triton_autotuning_listener_still_fires():
    events = []
    _compat.knobs.autotuning.listener = lambda **kw: events.append(kw)
    try:
        kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
        _launch_copy(kernel)
    finally:
        _compat.knobs.autotuning.listener = None
    assert len(events) == 1 and events[0]["cache_hit"] is False
    assert events[0]["best_config"] is kernel.best_config and events[0]["duration"] > 0


def test_heuristics_over_autotune_still_work():
    kernel = triton.heuristics({"EVEN": lambda a: a["n"] % 2 == 0})(
        triton.autotune(configs=CONFIGS, key=["n"])(_copy_even)
    )
    x = rand(64)
    y = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(64, m["BLOCK"]),)](x, y, 64)
    assert torch.equal(x, y)


@triton.jit
def _copy_even(x, y, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


class LibTuner(_compat.Autotuner):
    """A FlagGems-style subclass that replaces run() with its own loop over _bench."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple(args[self.arg_names.index(k)] for k in self.keys)
        if key not in self.cache:
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
            self.cache[key] = min(timings, key=timings.get)
            self.configs_timings = timings
        return self.fn.run(*args, **kwargs, **self.cache[key].kwargs)


def test_subclass_with_its_own_run_times_through_the_hooks(recorder):
    bad = triton.Config({"BLOCK": 96})
    kernel = LibTuner(_copy, _copy.arg_names, CONFIGS + [bad], ["n"], None, None)
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y)
    assert {r.config for r in recorder.timed} == set(CONFIGS + [bad])
    assert kernel.configs_timings[bad] == [math.inf] * 3
    assert "power of 2" in kernel.tdp_failures[bad]


class _Serialised:
    """Runs the interpreter one launch at a time (it is not thread-safe by itself), leaving the
    autotuner's own logic (keys, pruning, hooks, reset/restore) to race as it would on a GPU."""

    def __init__(self, fn):
        self.fn, self.arg_names, self.lock = fn, fn.arg_names, threading.Lock()

    def run(self, *args, **kwargs):
        with self.lock:
            return self.fn.run(*args, **kwargs)


def test_threads_with_different_keys_get_correct_results():
    kernel = triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out"])(_accumulate)
    if DEVICE == "cpu":
        kernel.fn = _Serialised(kernel.fn)
    errors, done, barrier = [], [], threading.Barrier(4)

    def worker(n):
        try:
            barrier.wait()
            for i in range(3):
                # Tuning zeroes `out` (reset_to_zero); a cache-hit launch does not, as upstream.
                x, out = rand(n), torch.full((n,), 5.0, device=DEVICE) if i == 0 else torch.zeros(n, device=DEVICE)
                kernel[GRID(n)](x, out, n)
                torch.testing.assert_close(out, x)
                done.append(n)
        except Exception as exc:  # surfaced below
            errors.append((n, exc))

    threads = [threading.Thread(target=worker, args=(n,)) for n in (50, 70, 90, 110)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(done) == sorted([50, 70, 90, 110] * 3)
    assert {k[0] for k in kernel.cache} == {50, 70, 90, 110}


def test_clearing_upstreams_cache_retunes_even_after_fast_launches(recorder):
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    for _ in range(3):
        _launch_copy(kernel)
    assert "run" in kernel.__dict__ and len(recorder.records) == 1  # the fast path is in place
    kernel.cache.clear()
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y) and len(recorder.records) == 2


@triton.jit
def _which(out, n, BLOCK: tl.constexpr):
    """Writes its own BLOCK: the output says which config ran."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.zeros([BLOCK], dtype=tl.float32) + BLOCK, mask=offs < n)


def _ran(kernel, n=64, by_keyword=False):
    out = torch.zeros(n, device=DEVICE)
    if by_keyword:  # as libraries (and triton.heuristics) pass kernel arguments
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](n=n, out=out)
    else:
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](out, n)
    assert (out == out[0]).all()
    return int(out[0])


_EDITS = {
    # What code does to upstream's cache between launches, and the BLOCK upstream then runs (None:
    # the key is missing, so it is tuned again).
    "replace": lambda k, key, other: k.cache.__setitem__(key, other),
    "delete then set": lambda k, key, other: (k.cache.pop(key), k.cache.__setitem__(key, other)),
    "clear then set": lambda k, key, other: (k.cache.clear(), k.cache.__setitem__(key, other)),
    "update": lambda k, key, other: k.cache.update({key: other}),
    "a new dict": lambda k, key, other: setattr(k, "cache", {key: other}),
    "delete": lambda k, key, other: k.cache.pop(key),
    "clear": lambda k, key, other: k.cache.clear(),
}


@pytest.mark.parametrize("by_keyword", [False, True])
@pytest.mark.parametrize("edit", sorted(_EDITS))
def test_every_edit_of_upstreams_cache_is_honoured_on_the_fast_path(edit, by_keyword, recorder):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    kernel = triton.autotune(configs=configs, key=["n"])(_which)
    picked = _ran(kernel, by_keyword=by_keyword)
    _ran(kernel, by_keyword=by_keyword)
    assert "run" in kernel.__dict__ and len(recorder.records) == 1  # the fast path is in place
    (key,) = kernel.cache
    other = next(c for c in configs if c.kwargs["BLOCK"] != picked)
    _EDITS[edit](kernel, key, other)
    expected = other.kwargs["BLOCK"] if key in kernel.cache else None
    for _ in range(2):  # the full path, then the fast one again
        ran = _ran(kernel, by_keyword=by_keyword)
        if expected is None:  # tuned again, as upstream would, and then it runs the new pick
            assert len(recorder.records) == 2 and ran == kernel.cache[key].kwargs["BLOCK"]
        else:
            assert ran == expected and kernel.best_config is other and len(recorder.records) == 1


def test_a_config_changed_in_place_by_pruning_launches_as_it_is_now(recorder):
    """A pruning function may change configs in place (``num_stages`` per shape, say): upstream
    launches each config as it is at the launch, the cached pick of an earlier key included."""
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    seen = []

    def prune(configs, named_args, **kwargs):
        for c in configs:  # every config now covers the whole row
            c.kwargs["BLOCK"] = max(16, triton.next_power_of_2(named_args["n"]))
        seen.append(named_args["n"])
        return configs[:1]

    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": prune})(_which)
    assert _ran(kernel, 16) == 16
    assert _ran(kernel, 16) == 16  # the fast path
    assert _ran(kernel, 64) == 64  # a new key: pruning changed the config the first key holds too
    assert _ran(kernel, 16) == 64 and seen == [16, 64]  # ...and upstream launches it as it is now


def _fresh():
    """A JIT function of its own (``_stages_seen`` replaces its ``run``)."""
    return triton.jit(_copy.fn)


def _stages_seen(kernel):
    """Every launch of ``kernel`` records its num_stages (the kernel itself does not run)."""
    seen = []
    kernel.fn.run = lambda *args, **kwargs: seen.append(kwargs.get("num_stages"))
    return seen


def _by_shape(configs, named_args, **kwargs):  # sets num_stages per shape, in place
    for c in configs:
        c.num_stages = 2 if named_args["n"] < 100 else 4
    return configs


class _Quick:
    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        return 1.0 + request.config.kwargs["BLOCK"] / 16


def _run(kernel, n, **extra):
    x = torch.zeros(8)
    kernel.run(x, x, n, grid=(1,), warmup=False, **extra)


def test_a_config_shared_by_two_kernels_launches_as_the_other_kernels_pruning_left_it(plugins, monkeypatch):
    """Upstream launches a config as it is at the launch: another kernel's pruning, over the same
    config objects, changes what the first kernel's cache hit launches too."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    plugins(_Quick())
    shared = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    first = triton.autotune(configs=shared, key=["n"], prune_configs_by={"early_config_prune": _by_shape})(_fresh())
    second = triton.autotune(configs=shared, key=["n"], prune_configs_by={"early_config_prune": _by_shape})(_fresh())
    seen, _ = _stages_seen(first), _stages_seen(second)
    _run(first, 8)
    _run(first, 8)  # the fast path is in place, with num_stages=2
    _run(second, 1000)  # the second kernel's pruning sets num_stages=4 on the shared configs
    _run(first, 8)
    _run(first, n=8)  # by keyword: the full path
    _run(first, 8)
    assert seen[-3:] == [4, 4, 4]


def test_a_pre_hook_attached_in_place_by_pruning_runs_at_every_launch(plugins, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    plugins(_Quick())
    called = []

    def attach(configs, named_args, **kwargs):
        if named_args["n"] > 100:
            for c in configs:
                c.pre_hook = lambda nargs: called.append(nargs["n"])
        return configs

    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": attach})(_fresh())
    _stages_seen(kernel)
    _run(kernel, 8)
    _run(kernel, 8)
    _run(kernel, 1000)  # pruning attaches the hook to every config, the first key's pick included
    called.clear()
    _run(kernel, 8)
    assert called == [8]


def test_contextual_pruning_that_changes_configs_reaches_the_cache_hit_path(plugins, monkeypatch, tmp_path):
    from triton_dist_plugin.autotuner import contextual_autotune

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    monkeypatch.chdir(tmp_path)  # its logs
    plugins(_Quick())
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": _by_shape})(_fresh())
    seen = _stages_seen(kernel)
    _run(kernel, 8)
    _run(kernel, 8)

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def step():
        _run(kernel, 1000)

    step()
    _run(kernel, 8)
    assert seen[-1] == 4


def test_configs_a_pruning_builds_anew_for_every_key_do_not_pile_up(plugins, monkeypatch):
    from triton_dist_plugin.patched import kernel_state

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    plugins(_Quick())

    def rebuilt(configs, named_args, **kwargs):
        return [triton.Config(dict(c.kwargs), num_stages=1 + named_args["n"] % 3) for c in configs]

    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)]
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": rebuilt})(_fresh())
    _stages_seen(kernel)
    for n in range(1, 41):
        _run(kernel, n)
    held = kernel_state.state_of(kernel).launch
    assert len(held) <= len(configs) + len(kernel.cache)  # the picks (and the kernel's own), not every candidate


def test_fast_path_keeps_dtype_and_keyword_launches_apart(recorder):
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    _launch_copy(kernel)
    _launch_copy(kernel)
    x = rand(200).half()
    y = torch.zeros_like(x)
    kernel[GRID(200)](x, y, 200)
    assert torch.equal(x, y) and len(recorder.records) == 2  # a new dtype is a new key
    kernel[GRID(200)](x, y, n=200)  # a keyword launch finds the same key (upstream's), no new tuning
    assert len(recorder.records) == 2


def test_keyword_launches_take_the_fast_path_under_upstreams_key_for_their_order(recorder, monkeypatch):
    """Kernel arguments by keyword (libraries pass them so, and ``triton.heuristics`` adds its values
    so): after the first launch of a shape (which keywords, in which order), its hits skip the full
    path, and each order keeps upstream's own key, in which that order decides the dtypes' order."""
    full = _full_launches(monkeypatch)
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    x, y16 = rand(200), rand(200).half()
    grid = GRID(200)
    y = torch.zeros_like(x)
    kernel[grid](x, y, 200)  # tunes (the wrapper around the class's run is not counted here)
    for call in (lambda: kernel[grid](x, y=y, n=200), lambda: kernel[grid](n=200, y=y, x=x),
                 lambda: kernel[grid](x, n=200, y=y)):
        full.clear()
        for _ in range(3):
            y.zero_()
            call()
            assert torch.equal(x, y) and kernel.best_config is kernel.cache[(200, "torch.float32", "torch.float32")]
        assert len(full) == 1 and len(recorder.records) == 1  # one full launch per shape, the same key
    # An fp16 output by keyword is a key of its own, in upstream's order of dtypes.
    kernel[grid](n=200, y=y16, x=x)
    assert len(recorder.records) == 2 and (200, "torch.float16", "torch.float32") in kernel.cache
    assert torch.equal(x.half(), y16)
    full.clear()
    kernel[grid](x, y=y16, n=200)  # the other order: upstream's key (200, fp32, fp16), tuned anew
    assert len(recorder.records) == 3 and (200, "torch.float32", "torch.float16") in kernel.cache


def test_heuristics_around_an_autotuned_kernel_reach_the_fast_path(recorder, monkeypatch):
    """``@triton.heuristics`` over ``@triton.autotune`` passes its values by keyword."""
    full = _full_launches(monkeypatch)
    tuned = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    kernel = triton.heuristics({"n": lambda args: args["x"].numel()})(tuned)
    x = rand(200)
    for _ in range(4):
        y = torch.zeros_like(x)
        kernel[GRID(200)](x, y)
        assert torch.equal(x, y)
    # Tuned once, by the first launch (through the class's run); every later one on the fast path.
    assert len(recorder.records) == 1 and full == []


def _full_launches(monkeypatch) -> list:
    """Counts the launches a per-instance fast path sends on to the full path (``run_wrapper``)."""
    from triton_dist_plugin.patched import launch

    full: list = []
    wrapper = launch.run_wrapper
    monkeypatch.setattr(launch, "run_wrapper", lambda *a: full.append(1) or wrapper(*a))
    return full


def test_deactivate_removes_per_instance_fast_paths():
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    _launch_copy(kernel)
    assert "run" in kernel.__dict__
    tdp.deactivate()
    try:
        assert "run" not in kernel.__dict__
    finally:
        tdp.activate()
    x, y = _launch_copy(kernel)  # still tuned: the pick stays cached
    assert torch.equal(x, y)


@pytest.mark.parametrize("given", [False, True])
def test_assigning_do_bench_on_the_tuner_is_what_times_it(recorder, given):
    # Upstream allows ``tuner.do_bench = f`` (3.4+: over a cached property; 3.2: an attribute),
    # and Triton-Ascend's own tests do it; the assigned function wins over do_bench=.
    calls, constructed = [], []

    def assigned(fn, quantiles=None, **kwargs):
        fn()
        calls.append(len(calls))
        return [1.0 + len(calls)] * 3  # the first config is the fastest

    def at_construction(fn, quantiles=None, **kwargs):
        constructed.append(1)
        return [1.0] * 3

    options = {"do_bench": at_construction} if given and "do_bench" in inspect.signature(triton.autotune).parameters \
        else {}
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 32})], key=["n"],
                             **options)(_copy)
    kernel.do_bench = assigned
    assert kernel.do_bench is assigned
    x, y = _launch_copy(kernel)
    assert torch.equal(x, y)
    assert calls == [0, 1] and constructed == []
    assert kernel.best_config.kwargs == {"BLOCK": 64}
    assert recorder.timed == []  # the kernel's own benchmarker replaces the timing hooks


@triton.jit
def _which_extra(out, n, BLOCK: tl.constexpr, extra=None):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.zeros([BLOCK], dtype=tl.float32) + BLOCK, mask=offs < n)


@triton.jit
def _which_meta(out, n, META: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.zeros([BLOCK], dtype=tl.float32) + BLOCK, mask=offs < n)


class _Dtyped:
    """An argument with a ``dtype`` that is no torch dtype: equal across 1, True and 1.0 (whose
    texts, which upstream's key holds, differ), or unhashable."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __hash__(self):
        return 1

    def __eq__(self, other):
        return isinstance(other, _Dtyped)


def _one_config_each_miss():
    """A pruning that hands each miss the next config alone: every tuning shows in the pick."""
    turn = iter(range(10**6))

    def prune(configs, named_args, **kwargs):
        return [configs[next(turn) % len(configs)]]

    return {"early_config_prune": prune}


def test_a_launch_upstream_rejects_leaves_no_entry_behind(recorder):
    """``run`` without ``warmup`` (two keywords, one of them a kernel argument) does what upstream's
    does (Triton's JITFunction.run raises), and a later valid launch tunes its own key rather than
    finding that launch's."""
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by=_one_config_each_miss())(_which_extra)
    out, t16 = torch.zeros(64, device=DEVICE), torch.zeros(4, device=DEVICE, dtype=torch.float16)
    grid = lambda m: (triton.cdiv(64, m["BLOCK"]),)  # noqa: E731
    kernel[grid](out, 64, extra=t16)
    try:  # as upstream: JITFunction.run requires warmup (Triton 3.2's interpreter does without it)
        kernel.run(out, 64, grid=grid, extra=t16)
    except TypeError:
        pass
    for _ in range(2):
        out.zero_()
        kernel[grid](out, 64)
        assert int(out[0]) == 32  # the second tuning's pick, not the first key's (16)
    assert set(kernel.cache) == {(64, "torch.float32", "torch.float16"), (64, "torch.float32")}


@pytest.mark.parametrize("by_keyword", [False, True])
def test_dtypes_that_are_not_torchs_keep_upstreams_keys(by_keyword, recorder):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by=_one_config_each_miss())(_which_meta)
    out = torch.zeros(64, device=DEVICE)
    grid = lambda m: (triton.cdiv(64, m["BLOCK"]),)  # noqa: E731
    ran = []
    for dtype in (1, 1, True, 1.0, {"unhashable": 1}, {"unhashable": 1}):
        out.zero_()
        if by_keyword:
            kernel[grid](out, 64, META=_Dtyped(dtype))
        else:
            kernel[grid](out, 64, _Dtyped(dtype))
        ran.append(int(out[0]))
    assert ran == [16, 16, 32, 64, 16, 16]  # 1, True, 1.0 and the dict: four keys, as upstream's texts
    assert {key[-1] for key in kernel.cache} == {"1", "True", "1.0", "{'unhashable': 1}"}


def test_a_pre_hook_attached_after_tuning_runs_on_the_next_launch(recorder):
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(_copy)
    _launch_copy(kernel)
    _launch_copy(kernel)
    called = []
    kernel.best_config.pre_hook = lambda nargs: called.append(nargs["n"])
    _launch_copy(kernel)
    assert called == [200]
