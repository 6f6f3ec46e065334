"""The seed's import paths keep working without a warning whatever the modules behind them are
called, and older internal names still import, with a warning naming the new one. Each case runs
in a fresh interpreter: an import cached by an earlier test would warn nothing."""

import json

import pytest
from helpers import run_python

SEED = """
import json, warnings
warnings.simplefilter("error")  # any warning fails the import
import triton_dist_plugin as tdp
from triton_dist_plugin.tune import autotune
from triton_dist_plugin.autotuner import contextual_autotune
from triton_dist_plugin import contextual, function_level, tune, autotuner
print(json.dumps({"same": [tune is function_level, autotuner is contextual,
                           autotune is function_level.autotune, contextual_autotune is contextual.contextual_autotune],
                  "names": [autotune.__module__, contextual_autotune.__module__]}))
"""


def test_the_seeds_paths_are_the_modules_themselves_and_warn_nothing():
    result = run_python(SEED, env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["same"] == [True] * 4, out
    assert out["names"] == ["triton_dist_plugin.function_level", "triton_dist_plugin.contextual"]


OLD = """
import json, warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import triton_dist_plugin.{old} as old
    import triton_dist_plugin.{new} as new
checks = {checks}
print(json.dumps({{"warned": [str(w.message) for w in seen if w.category is DeprecationWarning],
                   "ok": [bool(eval(c)) for c in checks]}}))
"""


@pytest.mark.parametrize("old, new, checks", [
    ("untuned", "frozen", ["old.capturing is new.capturing", "old.frozen is new.mode", "old.frozen_miss is new.on_miss",
                           "old.MISSES == new.MISSES", "old.nearest([(4,), (64,)], (5,)) == (4,)",
                           "old.distance((1,), (1,)) == 0.0"]),
    ("requests", "hook_objects", ["old is new", "old.TuningRequest is new.TuningRequest"]),
    ("patch", "activation", ["old is new", "old.activate is new.activate"]),
])
def test_older_names_import_with_a_warning_that_names_the_new_module(old, new, checks):
    result = run_python(OLD.format(old=old, new=new, checks=checks), env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(out["warned"]) == 1 and f"triton_dist_plugin.{old} is deprecated" in out["warned"][0], out
    assert f"import triton_dist_plugin.{new}" in out["warned"][0], out
    assert out["ok"] == [True] * len(checks), (checks, out)
