"""Triton-Ascend's own Autotuner subclass, patched through the class (runs only under triton-ascend).

No NPU is reachable here. ``triton.runtime.autotiling_tuner`` reads NPU properties from the
active driver when imported, so a stand-in driver (``_StandInNPUDriver``) answers those three
questions; it stands in only for the missing hardware. The kernels still run, for real, on
Triton-Ascend's CPU interpreter, and the class and its ``_bench``/``prune_configs`` are
Triton-Ascend's own.
"""

import math

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.driver import driver

import triton_dist_plugin as tdp
from triton_dist_plugin import _compat, hookimpl

pytestmark = pytest.mark.skipif(not _compat.IS_ASCEND or not _compat.interpret(),
                                reason="needs triton-ascend under TRITON_INTERPRET=1")


class _StandInNPUDriver:
    """Answers the hardware questions autotiling_tuner asks at import (no NPU here)."""

    class utils:
        @staticmethod
        def get_device_properties(device):
            return {"num_aicore": 24}

    def get_current_target(self):
        return type("Target", (), {"arch": "Ascend910B3", "backend": "npu"})()

    def get_current_device(self):
        return 0

    def get_benchmarker(self):  # asked for by Triton 3.2's Autotuner.__init__ (never called here)
        from triton.testing import do_bench

        return do_bench


@triton.jit
def _copy(x, y, n, BLOCK: tl.constexpr):
    tl.static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of 2")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


@pytest.fixture
def autotiling():
    driver.set_active(_StandInNPUDriver())
    try:
        from triton.runtime.autotiling_tuner import AutoTilingTuner
    finally:
        driver.reset_active()
    return AutoTilingTuner


def test_autotiling_tuner_times_through_the_hook_bus(autotiling, plugins):
    timed = []

    class Spy:
        @hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            timed.append(request.config)

    plugins(Spy())
    good, bad = triton.Config({"BLOCK": 64}, multibuffer=True), triton.Config({"BLOCK": 96})
    tuner = autotiling(_copy, _copy.arg_names, [good, bad], ["n"], None, None)
    assert isinstance(tuner, _compat.Autotuner) and "run" in type(tuner).__dict__  # its own run()
    x, y = torch.randn(200), torch.zeros(200)
    tuner.nargs = {"x": x, "y": y, "n": 200}
    grid = lambda m: (triton.cdiv(200, m["BLOCK"]),)  # noqa: E731
    t_good = tuner._bench(x, y, 200, config=good, grid=grid, warmup=False)
    t_bad = tuner._bench(x, y, 200, config=bad, grid=grid, warmup=False)
    assert timed == [good, bad]
    assert t_good[0] > 0 and math.isfinite(t_good[0])  # multibuffer dropped for the interpreter
    assert t_bad == [math.inf] * 3 and "power of 2" in tuner.tdp_failures[bad]
    assert torch.equal(x, y)


def test_autotiling_tuner_pruning_goes_through_the_hook_bus(autotiling, plugins):
    class KeepFirst:
        @hookimpl
        def tdp_prune_configs(self, request, configs):
            return configs[:1]

    plugins(KeepFirst())
    configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
    tuner = autotiling(_copy, _copy.arg_names, configs, ["n"], None, None)
    tuner.nargs = {"n": 200}
    assert tuner.prune_configs({}) == configs[:1]
    assert tdp.is_active()


_HINTS_SCRIPT = """
import os, sys
sys.path.insert(0, "tests")
order = sys.argv[1]
if order == "before":
    import triton_dist_plugin
import torch, triton, triton.language as tl
from triton.runtime.driver import driver
from test_ascend import _StandInNPUDriver

@triton.jit
def copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

driver.set_active(_StandInNPUDriver())
try:
    kernel = triton.autotune(configs=[], key={"x": "n"}, hints={"enable_ascend_autotune": True})(copy)
finally:
    driver.reset_active()
if order in ("after", "disabled"):
    import triton_dist_plugin
x, y = torch.randn(300), torch.zeros(300)
driver.set_active(_StandInNPUDriver())
try:
    kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
    launch = "ok"
except Exception as exc:
    launch = type(exc).__name__
finally:
    driver.reset_active()
print(type(kernel).__name__, triton_dist_plugin.is_active(), launch)
"""


@pytest.mark.parametrize("order", ["before", "after"])
def test_ascend_hints_keep_triton_ascends_meaning_and_tuner(order):
    from helpers import run_python

    def run(mode):
        env = {"TRITON_INTERPRET": "1", "TRITON_DIST_PLUGIN_DISABLE": "1" if mode == "disabled" else None}
        done = run_python(f"import sys; sys.argv = ['x', {mode!r}]\n" + _HINTS_SCRIPT, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-3:]

    upstream = run("disabled")
    assert upstream[:2] == ["AutoTilingTuner", "False"]
    plugin = run(order)
    # The same tuner class, and its first launch goes exactly as without the plugin (under the
    # interpreter Triton-Ascend's own tuner cannot parse the kernel; on an NPU it tunes).
    assert plugin == ["AutoTilingTuner", "True", upstream[2]]


def test_do_bench_npu_is_found_where_this_release_keeps_it():
    import triton.testing

    assert _compat.do_bench_npu() is triton.testing.do_bench_npu  # 3.2.0 keeps it in triton.testing
