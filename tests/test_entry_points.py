"""The example plugin distribution hooks/tdp-smem-budget, discovered through its entry point.

Installed into the running interpreter once per session (a copy of its source is built, so no
build artifacts land in the repository); each behaviour is then checked in a fresh interpreter,
because entry points are loaded when ``triton_dist_plugin`` activates, on import.
"""

import importlib
import importlib.metadata
import json
import os
import textwrap
from pathlib import Path

import pytest
from helpers import install_example, python

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIR = ROOT / "hooks" / "tdp-smem-budget"
DIST = "tdp-smem-budget"
GROUP = "triton_dist_plugin"
TIMEOUT = 240


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """Make sure the distribution is installed into this interpreter (pip, without dependencies)."""
    return install_example(PLUGIN_DIR, DIST, tmp_path_factory.mktemp("dist"), TIMEOUT)


def run_python(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter from the repository root; it prints one JSON line last."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("TRITON_DIST_PLUGIN_DISABLE", "TDP_SMEM_BUDGET_KB")}
    full_env.update({"TRITON_INTERPRET": "1", **env})
    proc = python("-c", textwrap.dedent(code), env=full_env, timeout=TIMEOUT)
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_matmul_estimates() -> list:
    """The plugin's estimate of every cpu matmul config, fp32 (4 bytes) as under the interpreter."""
    import kernels

    return [cfg.num_stages * (cfg.kwargs["BLOCK_M"] * cfg.kwargs["BLOCK_K"]
                              + cfg.kwargs["BLOCK_K"] * cfg.kwargs["BLOCK_N"]) * 4
            for cfg in kernels.KERNELS["matmul"].configs("cpu")]


def test_entry_point_is_declared(installed):
    eps = importlib.metadata.entry_points(group=GROUP)
    ours = [ep for ep in eps if ep.name == "smem_budget"]
    assert len(ours) == 1, eps
    assert ours[0].value == "tdp_smem_budget"
    assert ours[0].dist is None or ours[0].dist.metadata["Name"] == DIST


def test_discovered_at_activation_and_prunes_over_budget_configs(installed):
    estimates = cpu_matmul_estimates()
    # The largest whole-KB budget below the biggest config: drops it, keeps at least two (so they are timed).
    budget_kb = (max(estimates) - 1) // 1024
    over = [i for i, need in enumerate(estimates) if need > budget_kb * 1024]
    within = [i for i, need in enumerate(estimates) if need <= budget_kb * 1024]
    assert over and len(within) >= 2, (estimates, budget_kb)

    result = run_python("""
        import json

        import torch
        import triton

        import triton_dist_plugin
        import kernels

        pm = triton_dist_plugin.plugin_manager()
        has_plugin = pm.has_plugin("smem_budget")
        spec = kernels.KERNELS["matmul"]
        configs = spec.configs("cpu")
        tuned = triton.autotune(configs=configs, key=spec.key)(spec.jit)
        args = spec.make_inputs("tiny", "cpu")
        out = spec.launch(tuned, *args)
        torch.testing.assert_close(out, spec.reference(*args))
        print(json.dumps({
            "active": triton_dist_plugin.is_active(),
            "has_plugin": has_plugin,
            "plugin": repr(pm.get_plugin("smem_budget")),
            "timed": sorted(configs.index(c) for c in tuned.configs_timings),
            "best": configs.index(tuned.best_config),
        }))
    """, TDP_SMEM_BUDGET_KB=str(budget_kb))

    assert result["active"] and result["has_plugin"]
    assert result["plugin"].startswith("<module 'tdp_smem_budget'")  # the module is the plugin object
    assert result["timed"] == within
    assert not set(result["timed"]) & set(over)
    assert result["best"] in within


def test_disabled_loads_nothing(installed):
    result = run_python("""
        import json
        import sys

        import triton_dist_plugin

        print(json.dumps({
            "active": triton_dist_plugin.is_active(),
            "has_plugin": triton_dist_plugin.plugin_manager().has_plugin("smem_budget"),
            "imported": "tdp_smem_budget" in sys.modules,
        }))
    """, TRITON_DIST_PLUGIN_DISABLE="1", TDP_SMEM_BUDGET_KB="1")

    assert result == {"active": False, "has_plugin": False, "imported": False}
