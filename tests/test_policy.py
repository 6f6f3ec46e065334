"""The measurement policy: one frozen object per effort, refused when it could stall a phase, and
each effort's tuning on real kernels (through the interpreter) screening and measuring as much as
it says, with the same guarantees: the best found, every candidate accounted for."""

import dataclasses
import math

import pytest
import torch
import triton
from helpers import DEVICE
from search_space import LARGE, LARGE_BEST, copy

from triton_dist_plugin import engine, policy, settings
from triton_dist_plugin.search import strategy as search

#: Fields where a larger value means more measuring (the efforts must be ordered on each).
MORE_IS_MORE = ("screen_repeat", "margin", "keep_at_least", "fraction", "second_repeat", "final_most",
                "tied_most", "full_ms", "warm_ms", "full_rounds", "settle_rounds", "settle_rounds_least", "settle_ms",
                "settle_runs_most",
                "hopeless", "whole", "sample", "leaders", "warm_first", "patience", "optuna_cap", "keep",
                "keep_min", "keep_max", "probes")


def test_the_presets_are_named_for_their_keys_and_ordered_by_effort():
    assert set(policy.PRESETS) == {"quick", "default", "full"}
    assert all(p.name == name for name, p in policy.PRESETS.items())
    assert policy.PRESETS["default"] == policy.Policy()  # what the plugin always did
    quick, default, full = (policy.PRESETS[n] for n in ("quick", "default", "full"))
    for name in MORE_IS_MORE:
        assert getattr(quick, name) <= getattr(default, name) <= getattr(full, name), name
    assert any(getattr(quick, n) < getattr(default, n) < getattr(full, n) for n in MORE_IS_MORE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.margin = 0.5


@pytest.mark.parametrize("change", [
    {"screen_repeat": 0}, {"settle_rounds": 0}, {"batch": 0}, {"margin": -0.1}, {"tie": math.nan},
    {"full_ms": math.inf}, {"keep_min": True}, {"second_repeat": 2.5}, {"wall_settle": (1, -3)},
    {"settle_rounds_least": 7}, {"final_count": 5}, {"keep_min": 100}, {"full_runs_least": 2000},
    {"settle_runs_most": 10},
])
def test_a_policy_that_would_stall_or_skip_a_phase_is_refused(change):
    with pytest.raises(ValueError, match="Policy"):
        dataclasses.replace(policy.PRESETS["default"], **change)


@pytest.mark.parametrize("ms, runs", [(0.0, 25), (-1.0, 25), (math.nan, 25), (math.inf, 25), (5e-324, 100),
                                      (1e-12, 100), (0.01, 100), (0.1, 50), (0.2, 25), (100.0, 25)])
def test_a_settling_round_runs_about_settle_ms_within_its_bounds_whatever_the_time(ms, runs):
    from triton_dist_plugin import settle

    assert settle.round_runs(policy.PRESETS["default"], ms) == runs


def test_the_effort_setting_chooses_the_preset_and_names_what_it_accepts(monkeypatch):
    monkeypatch.delenv(policy.EFFORT_ENV, raising=False)
    assert policy.current() is policy.PRESETS["default"]
    monkeypatch.setenv(policy.EFFORT_ENV, " Quick ")
    assert policy.current() is policy.PRESETS["quick"]
    monkeypatch.setenv(policy.EFFORT_ENV, "max")
    with pytest.raises(settings.SettingError, match=f"{policy.EFFORT_ENV}='max'.*quick, default, full"):
        settings.validate()


def _tune(effort: str, monkeypatch, timed, recorder) -> tuple:
    monkeypatch.setenv(policy.EFFORT_ENV, effort)
    timed.timed.clear()
    recorder.records.clear()
    timed.best = LARGE_BEST
    kernel = triton.autotune(configs=LARGE, key=["n"])(copy)  # 480 candidates: searched, not screened whole
    x = torch.randn(300, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, out, 300)
    torch.testing.assert_close(out, x)
    (record,) = recorder.records
    return kernel, record, len(timed.screened()), len(timed.timed)


@pytest.mark.parametrize("strategy", ["halving", "optuna"])
def test_each_effort_measures_as_much_as_it_says_and_keeps_every_guarantee(strategy, monkeypatch, timed, recorder):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_MODEL", "0")
    monkeypatch.setenv(search.SEARCH_ENV, strategy)
    screened, runs = {}, {}
    for effort in ("quick", "default", "full"):
        kernel, record, screened[effort], runs[effort] = _tune(effort, monkeypatch, timed, recorder)
        features = search.features_of(kernel.best_config)
        assert features == {**features, **LARGE_BEST}, (effort, features)  # the bowl's best, found
        # Every candidate accounted for, each one not timed with its reason; the pick measured fully.
        assert len(record.timings) == len(LARGE)
        assert not record.cache_hit  # a pick stored at another effort is not this effort's
        assert all(c in record.failures for c, t in record.timings.items() if not math.isfinite(t[0]))
        assert kernel.best_config in record.measured
        assert any(n.startswith(f"searched {screened[effort]} of 480") or
                   f"searched {screened[effort]} of 480" in n for n in record.notes), record.notes
    # More effort: as many candidates screened or more, and more runs in all.
    assert screened["quick"] <= screened["default"] <= screened["full"], screened
    assert runs["quick"] < runs["default"] < runs["full"], runs


def test_the_engine_reads_the_effort_at_each_tuning_not_at_import(monkeypatch):
    monkeypatch.setenv(policy.EFFORT_ENV, "full")
    assert engine.Screen().policy is policy.PRESETS["full"]
    monkeypatch.setenv(policy.EFFORT_ENV, "quick")
    assert engine.Screen().policy is policy.PRESETS["quick"]
    assert search.whole_limit() == policy.PRESETS["quick"].whole
    monkeypatch.setenv(search.WHOLE_ENV, "7")  # the setting, where set, wins over any effort
    assert search.whole_limit(policy.PRESETS["full"]) == 7


def test_a_pick_stored_at_the_default_effort_is_keyed_as_before_efforts_existed(monkeypatch):
    from triton_dist_plugin.store import persist

    def context():
        return persist.context("cpu", [], "wall", False, False)

    monkeypatch.delenv(policy.EFFORT_ENV, raising=False)
    assert "effort" not in context()  # entries stored before there were efforts stay valid
    for effort in ("quick", "full"):
        monkeypatch.setenv(policy.EFFORT_ENV, effort)
        assert context()["effort"] == effort  # ...and a pick of one effort is never served to another


def test_a_search_plugin_reads_the_screens_older_fields_from_the_policy(monkeypatch):
    monkeypatch.setenv(policy.EFFORT_ENV, "full")
    screen, full = engine.Screen(), policy.PRESETS["full"]
    assert (screen.n_warmup, screen.n_repeat) == (full.screen_warmup, full.screen_repeat)
    for name in ("margin", "keep_at_least", "min_candidates", "fraction", "second_repeat", "final_count",
                 "final_most", "screen_tie", "second_tie", "tied_most", "full_ms", "warm_ms", "full_rounds"):
        assert getattr(screen, name) == getattr(full, name), name
    with pytest.raises(AttributeError, match="no_such_field"):
        screen.no_such_field  # noqa: B018


def test_a_more_thorough_context_is_one_more_thorough_search_or_effort_and_never_the_reverse():
    from triton_dist_plugin.store import fingerprint

    base = {"method": "wall", "accuracy": False, "configs": "c"}
    ctx = lambda search_name, effort="default": {**base, "search": search_name,  # noqa: E731
                                                  **({} if effort == "default" else {"effort": effort})}
    assert fingerprint.thorougher(ctx("halving")) == [ctx("exhaustive", "full"), ctx("exhaustive"),
                                                      ctx("halving", "full")]
    assert fingerprint.thorougher(ctx("optuna", "quick")) == [
        ctx("exhaustive", "full"), ctx("exhaustive"), ctx("exhaustive", "quick"), ctx("optuna", "full"), ctx("optuna")]
    assert fingerprint.thorougher(ctx("exhaustive", "full")) == [] and fingerprint.thorougher({"method": "x"}) == []
    for ours in (ctx("halving"), ctx("optuna", "quick"), ctx("halving", "full")):
        for theirs in fingerprint.thorougher(ours):
            assert fingerprint.serves(theirs, ours) and not fingerprint.serves(ours, theirs)
            assert {k: v for k, v in theirs.items() if k not in ("search", "effort")} == base  # the checks kept
    assert not fingerprint.serves(ctx("optuna"), ctx("halving"))  # neither is more thorough than the other
    assert not fingerprint.serves({**ctx("exhaustive", "full"), "accuracy": True}, ctx("halving"))


def test_a_pick_tuned_more_thoroughly_serves_a_tuning_at_the_defaults_and_not_the_reverse(monkeypatch, timed,
                                                                                          recorder):
    """What a library ships in a table, tuned with ``full`` effort or every candidate measured, is
    served to a program that tunes at the defaults (exactly, and as frozen mode's nearest key); a
    ``quick`` pick is not."""
    import warnings

    kernel, record, _, _ = _tune("full", monkeypatch, timed, recorder)  # key n=300
    pick = kernel.best_config
    kernel, record, _, timed_now = _tune("default", monkeypatch, timed, recorder)
    assert record.cache_hit and timed_now == 0 and str(kernel.best_config) == str(pick)
    kernel, record, _, timed_now = _tune("quick", monkeypatch, timed, recorder)
    assert record.cache_hit and timed_now == 0
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_FROZEN", "nearest")  # a key never tuned, near the full effort's
    monkeypatch.setenv(policy.EFFORT_ENV, "default")
    fresh = triton.autotune(configs=LARGE, key=["n"])(copy)
    x = torch.randn(310, device=DEVICE)
    out = torch.zeros_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh[lambda m: (triton.cdiv(310, m["BLOCK"]),)](x, out, 310)
    torch.testing.assert_close(out, x)
    assert any("nearest tuned key (300" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert str(fresh.best_config) == str(pick)


def test_a_quick_pick_is_not_served_to_a_tuning_at_the_defaults(monkeypatch, timed, recorder):
    _tune("quick", monkeypatch, timed, recorder)
    _, record, _, timed_now = _tune("default", monkeypatch, timed, recorder)
    assert not record.cache_hit and timed_now > 0
