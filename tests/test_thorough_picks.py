"""A pick tuned more thoroughly (search ``exhaustive``, effort ``full``, ``default`` over ``quick``)
serves lookups that look no harder, and never wins over what the program has of its own: its own
setting's pick (a file here, or a user's store), even in an older layout, comes first, exactly and
as frozen mode's nearest key, and a shipped table comes after all of those.

Real entries in a real cache directory, written and read through the stores (``persist``, ``cache``).
"""

import json
import warnings

import pytest
import triton
import triton.language as tl

import triton_dist_plugin as tdp
from triton_dist_plugin import bus, hookimpl
from triton_dist_plugin.store import cache, describe, fingerprint, persist, records


@triton.jit
def k(x, n, BLOCK: tl.constexpr):
    pass


CONFIGS = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)]


@pytest.fixture(autouse=True)
def _setting(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "tdp"))
    for name in ("TRITON_DIST_AUTOTUNE_SEARCH", "TRITON_DIST_AUTOTUNE_EFFORT", "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET",
                 "TRITON_DIST_AUTOTUNE_SEARCH_WHOLE"):
        monkeypatch.delenv(name, raising=False)


def _store() -> persist.KernelStore:
    return persist.KernelStore("k", k, "cpu", 1, CONFIGS, "wall")


def _timings(best: int) -> dict:
    return {c: [1.0 + (0 if i == best else i + 1)] * 3 for i, c in enumerate(CONFIGS)}


def _put(monkeypatch, key, best: int, **setting) -> persist.KernelStore:
    """Store ``CONFIGS[best]`` as ``key``'s pick, tuned under ``setting`` (search, effort, ...)."""
    with monkeypatch.context() as m:
        for name, value in setting.items():
            m.setenv(f"TRITON_DIST_AUTOTUNE_{name.upper()}", value)
        store = _store()
        store.store(key, CONFIGS[best], _timings(best), {}, list(CONFIGS), "wall", 0.1)
    return store


def _pick(found) -> int:
    return CONFIGS[found[0]].kwargs["BLOCK"]


def test_the_program_s_own_pick_comes_before_a_more_thorough_one_and_a_table_after_both(monkeypatch):
    """Its own setting's entry first; a more thorough one where it has none; a shipped table's
    (even a more thorough one) only where no store of its own has any."""
    _put(monkeypatch, (300,), 1)  # the program's own, at the defaults: 32
    _put(monkeypatch, (300,), 3, search="exhaustive")  # more thorough: 128
    assert _pick(_store().read((300,), CONFIGS)) == 32
    _put(monkeypatch, (400,), 2, effort="full")  # tuned here with full effort only: 64
    with monkeypatch.context() as m:
        m.setenv("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive")
        table_entry = _store().entry((400,))
        table_record = _store().record((400,), CONFIGS[3], _timings(3), {}, list(CONFIGS), "wall", 0.1)

    class Table:  # a stand-in in the built-in's place: the table holds an exhaustive pick, 128
        @hookimpl(trylast=True)
        def tdp_cache_get(self, entry):
            return json.loads(json.dumps(table_record)) if entry.digest == table_entry.digest else None

    tables = bus.plugin_manager().unregister(name=bus.TABLES)
    try:
        tdp.register(Table(), name=bus.TABLES)
        assert _pick(_store().read((400,), CONFIGS)) == 64  # this machine's own full pick, not the table's
        with monkeypatch.context() as m:  # nothing of this machine's: the table's
            m.setenv("TRITON_DIST_AUTOTUNE_DIR", str(_store().dir.parent.parent / "empty"))
            found = _store().read((400,), CONFIGS)
            assert _pick(found) == 128 and found[-1] == bus.TABLES
    finally:
        tdp.unregister(name=bus.TABLES)
        tdp.register(tables, name=bus.TABLES)


def test_frozen_nearest_takes_the_program_s_own_pick_of_a_key_stored_under_two_settings(monkeypatch, tmp_path):
    """The same key stored at the defaults and exhaustively is one neighbour, the defaults' pick,
    whatever the entries' ids (which used to break the tie between the two)."""
    for n in range(300, 316):
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / f"tdp-{n}"))
        _put(monkeypatch, (n,), 1)
        _put(monkeypatch, (n,), 3, search="exhaustive")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stored, config, _ = _store().frozen_pick((n + 7,), CONFIGS)
            neighbours = list(_store()._nearest((n + 7,), reuse=True))
        assert stored == (n,) and config.kwargs["BLOCK"] == 32 and len(neighbours) == 1, (n, config, neighbours)


def test_with_only_more_thorough_neighbours_frozen_nearest_reads_them(monkeypatch):
    _put(monkeypatch, (300,), 2, effort="full")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stored, config, _ = _store().frozen_pick((310,), CONFIGS)
    assert stored == (300,) and config.kwargs["BLOCK"] == 64


def test_a_function_entry_of_the_old_layout_is_the_defaults_own_and_comes_before_a_more_thorough_one(monkeypatch):
    hw = describe.hardware("cpu", 1)
    reprs = ["cfg-a", "cfg-b"]

    def body(pick):
        return {"pick": pick, "pick_config": reprs[pick], "method": "wall", "bench_time_s": 0.1,
                "candidates": [records.row(i, r, [1.0 if i == pick else 2.0] * 3, None, True)
                               for i, r in enumerate(reprs)]}

    with monkeypatch.context() as m:
        m.setenv("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive")
        cache.FunctionCache("f", "src", hw).store(4, body(1))  # more thorough: cfg-b
    store = cache.FunctionCache("f", "src", hw)
    places = store.places(4)
    legacy = cache.cache_entry("function", "f", store.dir, "src", hw, 4, None, store.root)
    assert places[1].path == legacy.path  # right after its own
    legacy.path.parent.mkdir(parents=True, exist_ok=True)
    legacy.path.write_text(json.dumps({
        "format": 2, "function": "f", "key": repr(4), "source": "src", "hardware": hw, "versions": describe.versions(),
        "timestamp": "2025-01-01T00:00:00+00:00", "pick": 0, "pick_config": reprs[0], "method": "wall",
        "bench_time_s": 0.5, "retained": [0, 1],
        "candidates": [{"index": 0, "config": reprs[0], "ms": [1.0] * 3, "failure": None, "measured": True},
                       {"index": 1, "config": reprs[1], "ms": [2.0] * 3, "failure": None, "measured": True}]}))
    assert store.find(4, reprs)[1]["pick_config"] == "cfg-a"
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_EFFORT", "quick")  # looks less hard: the most thorough first...
    assert cache.FunctionCache("f", "src", hw).find(4, reprs)[1]["pick_config"] == "cfg-b"
    (thorough,) = [p for p in places[2:] if p.path.exists()]
    thorough.path.unlink()  # ...and without it, the defaults' own, in the old layout
    assert cache.FunctionCache("f", "src", hw).find(4, reprs)[1]["pick_config"] == "cfg-a"


def test_a_search_narrowed_by_its_limits_serves_only_lookups_under_the_same_limits(monkeypatch):
    """A budget or a whole-space limit keeps a search below its effort: such a pick is no more
    thorough than the defaults', so it serves only the same limits."""
    _put(monkeypatch, (300,), 3, effort="full", search_budget="8")
    assert _store().read((300,), CONFIGS) is None
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "8")
    assert _pick(_store().read((300,), CONFIGS)) == 128


def test_an_effort_this_version_does_not_know_has_nothing_above_it():
    assert fingerprint.thorougher({"search": "halving", "effort": "extreme"}) == []
    assert not fingerprint.serves({"search": "halving", "effort": "extreme"}, {"search": "halving"})
