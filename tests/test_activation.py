"""Activation: the class is patched once, restored exactly, and the import switch works."""

import textwrap

import pytest
import wrapt
from helpers import run_python
from triton.runtime import autotuner

import triton_dist_plugin as tdp
from triton_dist_plugin import _compat

PATCHED = ["run", "_bench", "prune_configs"] + (["do_bench"] if _compat.LAZY_BENCH else ["__init__"])


def test_import_patches_the_autotuner_class():
    assert tdp.is_active()
    assert isinstance(autotuner.Autotuner.__dict__["run"], wrapt.FunctionWrapper)
    assert isinstance(autotuner.Autotuner.__dict__["_bench"], wrapt.FunctionWrapper)


def test_deactivate_restores_originals_exactly_and_round_trips():
    patched = {name: autotuner.Autotuner.__dict__[name] for name in PATCHED}
    tdp.deactivate()
    assert not tdp.is_active()
    originals = {name: autotuner.Autotuner.__dict__[name] for name in PATCHED}
    for name in PATCHED:
        assert originals[name] is not patched[name]
        assert not isinstance(originals[name], (wrapt.FunctionWrapper, property))
    tdp.activate()
    for name in PATCHED:
        assert autotuner.Autotuner.__dict__[name] is not originals[name]
    tdp.deactivate()
    for name in PATCHED:
        assert autotuner.Autotuner.__dict__[name] is originals[name]
    tdp.activate()


def test_activating_twice_warns_and_patches_once():
    run = autotuner.Autotuner.__dict__["run"]
    with pytest.warns(UserWarning, match="already active"):
        tdp.activate()
    assert autotuner.Autotuner.__dict__["run"] is run
    assert not isinstance(run.__wrapped__, wrapt.FunctionWrapper)


def test_deactivate_leaves_someone_elses_later_patch_in_place():
    ours = autotuner.Autotuner.__dict__["run"]
    theirs = wrapt.FunctionWrapper(ours, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    autotuner.Autotuner.run = theirs
    try:
        with pytest.warns(UserWarning, match="re-patched"):
            tdp.deactivate()
        assert autotuner.Autotuner.__dict__["run"] is theirs
    finally:
        autotuner.Autotuner.run = ours.__wrapped__
        tdp.activate()


KERNEL = textwrap.dedent(
    """
    import torch, triton, triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def double(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)

    def launch():
        x = torch.arange(300, dtype=torch.float32)
        y = torch.empty_like(x)
        double[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
        assert torch.equal(y, 2 * x)
        return len(double.configs_timings)
    """
)


def test_kernel_decorated_before_the_import_is_covered():
    code = KERNEL + "import triton_dist_plugin\nprint('timed', launch())\n"
    if not _compat.LAZY_BENCH and _compat.interpret():
        pytest.skip("Triton < 3.4 asks for a driver when decorating, before any plugin can step in")
    result = run_python(code, env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr
    assert "timed 2" in result.stdout


def test_disable_env_patches_nothing():
    code = (
        "import triton_dist_plugin as t, wrapt\n"
        "from triton.runtime import autotuner\n"
        "print(t.is_active(), isinstance(autotuner.Autotuner.__dict__['run'], wrapt.FunctionWrapper))\n"
    )
    result = run_python(code, env={"TRITON_DIST_PLUGIN_DISABLE": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_upstream_cannot_tune_on_the_interpreter_but_the_plugin_can():
    upstream = run_python(KERNEL + "launch()\n", env={"TRITON_INTERPRET": "1", "TRITON_DIST_PLUGIN_DISABLE": "1"})
    assert upstream.returncode != 0
    assert "active drivers" in upstream.stderr
    ours = run_python("import triton_dist_plugin\n" + KERNEL + "print('timed', launch())\n",
                      env={"TRITON_INTERPRET": "1"})
    assert ours.returncode == 0, ours.stderr
    assert "timed 2" in ours.stdout


def test_missing_triton_is_a_clear_import_error():
    code = (
        "import sys\nsys.modules['triton'] = None\n"
        "try:\n    import triton_dist_plugin\nexcept ImportError as e:\n    print(e)\n"
    )
    result = run_python(code)
    assert "needs Triton" in result.stdout
    assert "triton-dist-plugin[cuda]" in result.stdout and "triton-dist-plugin[ascend]" in result.stdout
