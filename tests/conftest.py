import pytest
from helpers import DEVICE, Recorder
from hypothesis import settings
from search_space import Bowl

import triton_dist_plugin as tdp

# Hypothesis keeps no example database: it would write .hypothesis/ into the directory the tests
# were started from, and a test writes nowhere but its temporary directories. No deadline: a
# loaded machine stalls an example now and then, which says nothing of the code.
settings.register_profile("tdp", database=None, deadline=None)
settings.load_profile("tdp")


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


@pytest.fixture
def recorder(plugins):
    """A registered ``helpers.Recorder``: every tuning record and every timed candidate request."""
    rec = Recorder()
    plugins(rec)
    return rec


@pytest.fixture
def timed(plugins):
    """A registered ``search_space.Bowl``: the search tests' known times, and what it timed."""
    b = Bowl()
    plugins(b)
    return b


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


@pytest.fixture(autouse=True)
def _isolation_worker_kept(monkeypatch):
    """The isolation worker is kept between tests (``TRITON_DIST_AUTOTUNE_ISOLATE_IDLE=0``): with the
    default, each pause of 5 s after an isolated tuning would start a new worker process, a second
    of imports each, for nothing a test looks at. The tests of that release set it themselves."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "0")
