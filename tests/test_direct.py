"""The direct cache-hit launch follows the installed Triton's own launch sequence.

The launch itself needs a GPU driver (``benchmarks/check_direct_launch.py`` checks it on one);
here the installed ``JITFunction.run`` is read to confirm that what ``direct`` copies from it is
still what it does, and that the interpreter never takes the direct path.
"""

import inspect
import re

import pytest
import triton

from kernels import KERNELS
from triton_dist_plugin import _compat
from triton_dist_plugin.patched import direct

pytestmark = pytest.mark.skipif(_compat.TRITON_VERSION not in direct.KNOWN_RELEASES,
                                reason="no direct launch on this Triton release")


def _run_source() -> str:
    from triton.runtime.jit import JITFunction

    return inspect.getsource(JITFunction.run)


def test_injected_options_match_jitfunction_run():
    injected = re.findall(r'kwargs\["(\w+)"\] = ', _run_source())
    assert injected == ["debug", *direct._compilation_knobs()]


def test_launch_call_matches_jitfunction_run():
    source = re.sub(r"\s+", " ", _run_source())
    assert ("kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata, "
            "knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound_args.values())") in source
    assert "binder(*args, **kwargs)" in source
    assert "self.device_caches[device]" in source


def test_interpreter_never_launches_directly(monkeypatch):
    assert _compat.interpret()
    assert not direct.usable(KERNELS["add"].jit)
    tuned = triton.autotune(configs=KERNELS["add"].configs("cpu"), key=["n"])(KERNELS["add"].jit)
    x, y = KERNELS["add"].make_inputs("tiny", "cpu")
    out = KERNELS["add"].launch(tuned, x, y)
    out = KERNELS["add"].launch(tuned, x, y)
    assert (out == x + y).all()
    from triton_dist_plugin.patched import kernel_state

    hits = list(kernel_state.state_of(tuned).fast.values())
    assert hits and all(hit[2] is None for hit in hits)
