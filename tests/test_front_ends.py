"""Every front end keeps the same guarantees on a miss, because every one is a tuning job (``job.run``).

The front ends: the patched ``Autotuner``; a tuner subclass's own loop (batched through ``_bench``,
timed one ``_bench`` at a time, and its own ``_batch_bench``); the function-level ``autotune``; the
contextual tuner. Each test runs the same miss on each of them, with real interpreted kernels:
frozen mode answers it without timing anything, a capture refuses it before anything runs, and a
bad setting stops it before any work. A capture in progress is the one thing stood in for (no GPU
here): ``frozen.capturing`` answers True as ``torch.cuda.is_current_stream_capturing()`` would.
The same guarantees across ranks (different efforts or frozen modes refuse at once) are in
``test_distributed.py``.
"""

import pytest
import torch
import triton
from helpers import DEVICE
from test_subclass import BLOCKS, LibTunerLike, NewerAutoTilingLike, _configs, _inc

from kernels import KERNELS
from triton_dist_plugin import frozen, hookimpl, settings
from triton_dist_plugin.autotuner import contextual_autotune
from triton_dist_plugin.tune import autotune

ADD = KERNELS["add"]
N = 300


def _add_kernel():
    return triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)


def _launch_add(kernel, n=N):
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = torch.full((n,), -1.0, device=DEVICE)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    return out, x + y


def _subclass(cls, n=N):
    kernel = cls(_inc, _inc.arg_names, _configs()[:4], ["n"], ["out"], ["x"])
    x, out = torch.zeros(n, device=DEVICE), torch.zeros(n, device=DEVICE)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return out, torch.ones(n, device=DEVICE)  # reset_to_zero and restore_value: one launch's effect


def _function(n=N):
    @autotune(config_space=[{"scale": 1.0, "extra": e} for e in range(3)], key_fn=lambda x: x.numel())
    def op(x, scale, extra):
        return x * scale

    x = torch.randn(n, device=DEVICE)
    return op(x), x


def _contextual(n=N):
    kernel = _add_kernel()

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def step(m):
        return _launch_add(kernel, m)

    return step(n)


def _subclass_alone(monkeypatch):
    monkeypatch.setenv("TRITON_AUTOTUNE_PARALLEL_COMPILE", "0")  # each _bench timed by itself
    return _subclass(LibTunerLike)


FRONT_ENDS = {
    "kernel": lambda mp: _launch_add(_add_kernel()),
    "subclass": lambda mp: _subclass(LibTunerLike),
    "subclass_alone": _subclass_alone,
    "subclass_batch_bench": lambda mp: _subclass(NewerAutoTilingLike),
    "function": lambda mp: _function(),
    "contextual": lambda mp: _contextual(),
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the contextual tuner's logs go to ./.autotune_logs


def _nothing_timed(recorder):
    """No candidate was timed and no tuning was recorded (frozen mode's own record says 'none')."""
    return not recorder.timed and all(r.method == "none" for r in recorder.records)


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_every_front_end_tunes_its_miss(front, recorder, monkeypatch):
    """The baseline the other tests stand on: without frozen mode or a capture, each tunes."""
    got, want = FRONT_ENDS[front](monkeypatch)
    torch.testing.assert_close(got, want)
    assert not _nothing_timed(recorder)


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_frozen_strict_refuses_a_miss_in_every_front_end_and_times_nothing(front, recorder, monkeypatch):
    monkeypatch.setenv(frozen.FROZEN_ENV, "strict")
    with pytest.raises(frozen.FrozenMiss, match="never tuned.*FROZEN=strict"):
        FRONT_ENDS[front](monkeypatch)
    assert _nothing_timed(recorder)
    assert len(frozen.misses()) == 1  # one miss recorded, however many candidates a loop asks about


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_frozen_nearest_answers_a_miss_in_every_front_end_without_timing(front, recorder, monkeypatch):
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    with pytest.warns(RuntimeWarning, match="never tuned.*FROZEN=nearest"):
        got, want = FRONT_ENDS[front](monkeypatch)
    torch.testing.assert_close(got, want)
    assert _nothing_timed(recorder)
    assert len(frozen.misses()) == 1


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_a_capture_refuses_a_miss_in_every_front_end_before_anything_runs(front, recorder, monkeypatch):
    monkeypatch.setattr(frozen, "capturing", lambda: True)
    with pytest.raises(frozen.TuningDuringCapture, match="CUDA graph is being captured"):
        FRONT_ENDS[front](monkeypatch)
    assert _nothing_timed(recorder) and not recorder.records


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_a_bad_setting_stops_every_front_end_before_any_work(front, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_EFFORT", "thorough-ish")
    with pytest.raises(settings.SettingError, match="TRITON_DIST_AUTOTUNE_EFFORT"):
        FRONT_ENDS[front](monkeypatch)
    assert _nothing_timed(recorder) and not recorder.records


def test_a_subclass_loop_in_frozen_mode_keeps_the_nearest_tuned_keys_pick(recorder, monkeypatch):
    """Frozen mode hands the loop a zero timing for the pick it chose, infinity for the rest: the
    loop's own ``min`` keeps the nearest tuned key's pick."""
    kernel = LibTunerLike(_inc, _inc.arg_names, _configs(), ["n"], ["out"], ["x"])
    n = 1000
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](torch.zeros(n, device=DEVICE), torch.zeros(n, device=DEVICE), n)
    tuned = kernel.cache[(n,)]
    timed = len(recorder.timed)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    m = 900
    with pytest.warns(RuntimeWarning, match=r"key \(900, .*never tuned.*nearest tuned key \(1000, "):
        kernel[lambda c: (triton.cdiv(m, c["BLOCK"]),)](torch.zeros(m, device=DEVICE), torch.zeros(m, device=DEVICE), m)
    assert kernel.cache[(m,)] is tuned and len(recorder.timed) == timed
    assert kernel.configs_timings[tuned] == [0.0] * 3
    assert sum(t == [float("inf")] * 3 for t in kernel.configs_timings.values()) == len(BLOCKS) - 1


def test_frozen_mode_leaves_a_one_candidate_subclass_loop_alone(recorder, monkeypatch):
    """Upstream never tunes a single candidate: neither a miss nor a refusal, as on the plain path."""
    monkeypatch.setenv(frozen.FROZEN_ENV, "strict")
    kernel = LibTunerLike(_inc, _inc.arg_names, _configs()[:1], ["n"], ["out"], ["x"])
    kernel[lambda m: (triton.cdiv(N, m["BLOCK"]),)](torch.zeros(N, device=DEVICE), torch.zeros(N, device=DEVICE), N)
    assert not recorder.timed and not frozen.misses()


def test_a_subclass_loops_frozen_pick_is_one_the_loop_can_launch(recorder, monkeypatch):
    """The nearest tuned key's pick, where this key's pruning dropped it, is not announced and then
    not launched: the nearest among picks this loop holds, else its first candidate, is."""
    def prune(configs, named, **kwargs):  # large blocks only for large n
        return [c for c in configs if c.kwargs["BLOCK"] <= max(16, named["n"] // 8)]

    kernel = LibTunerLike(_inc, _inc.arg_names, _configs()[:4], ["n"], ["out"], ["x"],
                          prune_configs_by={"early_config_prune": prune})
    n = 1000
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](torch.zeros(n, device=DEVICE), torch.zeros(n, device=DEVICE), n)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    m = 300  # prunes to BLOCK 16 and 32
    with pytest.warns(RuntimeWarning) as caught:
        kernel[lambda c: (triton.cdiv(m, c["BLOCK"]),)](torch.zeros(m, device=DEVICE), torch.zeros(m, device=DEVICE),
                                                        m)
    (warning,) = [w for w in caught if "never tuned" in str(w.message)]
    launched = kernel.cache[(m,)]
    assert f"BLOCK: {launched.kwargs['BLOCK']}," in str(warning.message)
    assert kernel.configs_timings[launched] == [0.0] * 3


def test_a_capture_stops_a_subclass_batch_bench_before_any_prune_hook(plugins, recorder, monkeypatch):
    calls = []

    class Pruner:
        @hookimpl
        def tdp_prune_configs(self, request, configs):
            calls.append(request.kernel_name)

    plugins(Pruner())
    monkeypatch.setattr(frozen, "capturing", lambda: True)
    with pytest.raises(frozen.TuningDuringCapture):
        _subclass(NewerAutoTilingLike)
    assert calls == [] and _nothing_timed(recorder)
