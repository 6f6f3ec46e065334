"""A miss while a CUDA graph is being captured: raise before enqueueing, or launch a fallback.

There is no GPU here, so "a capture is in progress" is the one thing stood in for: the probe
``frozen.capturing`` answers True as ``torch.cuda.is_current_stream_capturing()`` would on a GPU
inside ``torch.cuda.graph(...)``. Everything else (the kernel, tuning, the fallback launch) is real.
``benchmarks/bench_faults_gpu.py`` runs the real capture on a GPU.
"""

import os

import pytest
import torch
import triton
from helpers import DEVICE, python

from kernels import KERNELS
from triton_dist_plugin import frozen
from triton_dist_plugin.store import keys as store_keys

ADD = KERNELS["add"]


@pytest.fixture
def capturing():
    # A patch of its own: undoing it (the capture ends) leaves the test's other settings alone,
    # the cache directories among them.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frozen, "capturing", lambda: True)
        yield patch


def launch(kernel, n):
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = torch.full((n,), -1.0, device=DEVICE)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    return x, y, out


def test_an_untuned_key_in_a_capture_raises_before_anything_runs(recorder, capturing):
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    with pytest.raises(frozen.TuningDuringCapture, match=r"add_kernel: key \(300, .*never tuned.*warm-up"):
        n = 300
        x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
        out = torch.full((n,), -1.0, device=DEVICE)
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    assert torch.all(out == -1.0) and not kernel.cache and not recorder.timed  # nothing ran or was timed
    capturing.undo()  # the capture is over: the same launch tunes
    x, y, out = launch(kernel, 300)
    torch.testing.assert_close(out, x + y)
    assert len(kernel.cache) == 1


def tuned_then_capturing(monkeypatch, n):
    """The add kernel tuned for ``n``, then a capture begins."""
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    launch(kernel, n)
    monkeypatch.setattr(frozen, "capturing", lambda: True)
    return kernel


def test_keys_tuned_before_the_capture_launch_inside_it(recorder, monkeypatch):
    x, y, out = launch(tuned_then_capturing(monkeypatch, 300), 300)
    torch.testing.assert_close(out, x + y)
    assert len(recorder.records) == 1


def test_fallback_launches_the_nearest_tuned_keys_pick_and_records_the_miss(recorder, monkeypatch):
    kernel = tuned_then_capturing(monkeypatch, 1000)
    tuned_pick = kernel.best_config
    monkeypatch.setenv(frozen.ENV, "fallback")
    with pytest.warns(RuntimeWarning, match=r"key \(900, .*nearest tuned key \(1000, "):
        x, y, out = launch(kernel, 900)
    torch.testing.assert_close(out, x + y)
    assert kernel.best_config is tuned_pick and len(kernel.cache) == 1  # the key stays untuned
    miss = recorder.records[-1]
    assert miss.key[0] == 900 and miss.best_config is tuned_pick and not miss.timings
    assert any("CUDA graph capture" in note for note in miss.notes)
    with pytest.warns(RuntimeWarning, match="launching the first config"):  # nothing comparable tuned
        launch(triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit), 900)


def test_a_bad_capture_setting_names_itself(monkeypatch):
    from triton_dist_plugin import SettingError, settings

    monkeypatch.setenv(frozen.ENV, "skip")
    with pytest.raises(SettingError, match=f"{frozen.ENV}='skip'.*error, fallback"):
        settings.validate()


def test_nearest_key_matches_dtypes_and_weighs_shapes_by_ratio():
    keys = [(1024, "torch.float16"), (4096, "torch.float16"), (2000, "torch.float32")]
    assert store_keys.nearest(keys, (1500, "torch.float16")) == (1024, "torch.float16")
    assert store_keys.nearest(keys, (3000, "torch.float16")) == (4096, "torch.float16")
    assert store_keys.nearest(keys, (2000, "torch.bfloat16")) is None
    assert store_keys.nearest(keys, (2000, "torch.float32", 1)) is None


def test_a_subclass_loop_in_a_capture_raises_before_its_first_timing(recorder, capturing):
    from triton_dist_plugin import _compat

    class OwnLoop(_compat.Autotuner):  # FlagGems' LibTuner shape: its own run() over _bench
        def run(self, *args, **kwargs):
            self.nargs = dict(zip(self.arg_names, args))
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
            best = min(timings, key=timings.get)
            return self.fn.run(*args, **kwargs, **best.all_kwargs())

    kernel = OwnLoop(ADD.jit, ADD.jit.arg_names, ADD.configs(DEVICE), ADD.key, None, None)
    with pytest.raises(frozen.TuningDuringCapture, match="add_kernel: tuning would start while a CUDA graph is"):
        launch(kernel, 300)
    assert not recorder.timed


def test_the_function_level_tuner_in_a_capture_raises_or_falls_back(capturing):
    from triton_dist_plugin.tune import autotune

    calls = []

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def scaled(x, factor):
        calls.append(factor)
        return x * factor

    with pytest.raises(frozen.TuningDuringCapture, match=r"scaled: key \(4,\) was never tuned"):
        scaled(torch.ones(4))
    assert not calls and not scaled.best_configs
    capturing.setenv(frozen.ENV, "fallback")
    with pytest.warns(RuntimeWarning, match="launching the first config"):
        assert torch.equal(scaled(torch.ones(4)), torch.ones(4))
    assert calls == [1] and not scaled.best_configs


# ---------------------------------------------------------------------------------------------
# Frozen mode: a key neither in memory nor on disk is never timed
# ---------------------------------------------------------------------------------------------


def test_frozen_strict_raises_names_the_key_and_times_nothing(recorder, monkeypatch):
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    launch(kernel, 1000)  # tuned and persisted while not frozen
    monkeypatch.setenv(frozen.FROZEN_ENV, "strict")
    timed = len(recorder.timed)
    fresh = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x, y, out = launch(fresh, 1000)  # the persisted pick: not a miss
    torch.testing.assert_close(out, x + y)
    with pytest.raises(frozen.FrozenMiss, match=r"add_kernel: key \(900, .*FROZEN=strict.*misses"):
        launch(fresh, 900)
    assert len(recorder.timed) == timed  # nothing timed in frozen mode
    assert [(m["kernel"], m["key"][:5], m["why"]) for m in frozen.misses()] == [("add_kernel", "(900,", "strict")]


def test_frozen_nearest_launches_the_nearest_persisted_pick_and_records_the_miss(recorder, monkeypatch):
    launch(triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit), 1000)
    pick = str(recorder.records[-1].best_config)
    timed = len(recorder.timed)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    fresh = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)  # knows no key in memory
    with pytest.warns(RuntimeWarning, match=r"key \(900, .*\(frozen mode\).*nearest tuned key \(1000, "):
        x, y, out = launch(fresh, 900)
    torch.testing.assert_close(out, x + y)
    assert str(fresh.best_config) == pick and len(recorder.timed) == timed
    launch(fresh, 900)  # kept for this key in this process: no second miss
    assert len(frozen.misses()) == 1


def test_frozen_function_level_tuner_and_the_misses_command(monkeypatch):
    import sys
    from pathlib import Path

    from triton_dist_plugin.tune import autotune

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def scaled(x, factor):
        return x * factor

    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    with pytest.warns(RuntimeWarning, match="launching the first config"):
        assert torch.equal(scaled(torch.ones(3)), torch.ones(3))
    monkeypatch.setenv(frozen.FROZEN_ENV, "strict")
    with pytest.raises(frozen.FrozenMiss):
        scaled(torch.ones(5))
    script = Path(sys.executable).parent / "triton-dist-tune"
    shown = python(script, "misses", cwd=os.getcwd(), timeout=120)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:3] == ["kernel", "key", "misses"]
    assert any("scaled" in line and "(3,)" in line and "frozen mode" in line for line in lines)
    assert any("scaled" in line and "(5,)" in line and "strict" in line for line in lines)


def _frozen_warnings(call):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if "never tuned" in str(w.message)]


def test_frozen_mode_warnings_name_the_users_line_not_the_plugins(monkeypatch):
    from triton_dist_plugin.tune import autotune

    launch(triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit), 1000)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    fresh = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    (warned,) = _frozen_warnings(lambda: launch(fresh, 900))  # launch() is this file's launch line
    assert warned.filename == __file__, warned.filename

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def scaled(x, factor):
        return x * factor

    (warned,) = _frozen_warnings(lambda: scaled(torch.ones(3)))
    assert warned.filename == __file__, warned.filename


def test_the_capture_fallback_warning_names_the_users_line(recorder, monkeypatch):
    kernel = tuned_then_capturing(monkeypatch, 1000)
    monkeypatch.setenv(frozen.ENV, "fallback")
    (warned,) = _frozen_warnings(lambda: launch(kernel, 900))
    assert warned.filename == __file__, warned.filename


def test_the_documented_exceptions_import_from_the_package():
    import triton_dist_plugin as tdp

    assert tdp.FrozenMiss is frozen.FrozenMiss and tdp.TuningDuringCapture is frozen.TuningDuringCapture
    assert {"FrozenMiss", "TuningDuringCapture"} <= set(tdp.__all__)
    from triton_dist_plugin import FrozenMiss, TuningDuringCapture  # noqa: F401
