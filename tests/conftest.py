import pytest
from helpers import DEVICE

import triton_dist_plugin as tdp


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture
def plugins():
    """Register plugins for one test; every one is unregistered afterwards."""
    added = []

    def add(plugin, name=None):
        added.append(plugin)
        return tdp.register(plugin, name=name)

    yield add
    for plugin in added:
        if tdp.plugin_manager().is_registered(plugin):
            tdp.unregister(plugin)


@pytest.fixture(autouse=True)
def _active():
    """Every test starts and ends with the plugin active and Triton's timing knobs unset."""
    if not tdp.is_active():
        tdp.activate()
    yield
    if not tdp.is_active():
        tdp.activate()




@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch):
    """Every test gets an empty plugin cache directory (kernel-level picks persist by default)."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "tdp-cache"))
