"""Search: large spaces screened on demand, warm starts from the nearest tuned key, optuna's TPE
sampler, function-level spaces, and every rank of a group on the same path.

Real kernels run through the interpreter (every screened candidate is launched). The times are a
bowl over the parameters, from a timing plugin, so that the best candidate is known and the
search's path can be checked; the interpreter's own wall-clock times would not show a search
finding it.
"""

import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, run_ranks
from search_space import BEST, LARGE, LARGE_BEST, SPACE, bowl, copy

import triton_dist_plugin as tdp
from triton_dist_plugin import engine, hookimpl
from triton_dist_plugin.search import strategy as search
from triton_dist_plugin.tune import autotune


@pytest.fixture(autouse=True)
def _no_model(monkeypatch):
    """These tests follow the model-free paths (test_model.py follows the guided one)."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_MODEL", "0")


def launch(kernel, n=300):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x)


def picked(kernel) -> dict:
    return search.features_of(kernel.best_config)


def test_the_space_moves_one_parameter_one_step_at_a_time():
    space = search.Space(SPACE)
    assert space.names[:3] == ["BLOCK", "UNROLL", "num_warps"]  # then compile options, the same everywhere
    at = SPACE.index(next(c for c in SPACE if search.features_of(c) | BEST == search.features_of(c)))
    around = {str(SPACE[i]) for i in space.neighbours(at)}
    expected = {str(triton.Config({"BLOCK": b, "UNROLL": u}, num_warps=w))
                for b, u, w in ((32, 4, 2), (128, 4, 2), (64, 2, 2), (64, 8, 2), (64, 4, 1), (64, 4, 4))}
    assert around == expected
    # A pruned space: the next value present is the neighbour, across the gap.
    pruned = [c for c in SPACE if c.kwargs["BLOCK"] != 128]
    space = search.Space(pruned)
    at = next(i for i, c in enumerate(pruned) if search.features_of(c) | BEST == search.features_of(c))
    assert {pruned[i].kwargs["BLOCK"] for i in space.neighbours(at)} >= {32, 256}


def test_a_large_space_is_searched_not_screened_whole_and_finds_the_best(timed, recorder):
    timed.best = LARGE_BEST
    kernel = triton.autotune(configs=LARGE, key=["n"])(copy)  # 480 > the default 128 screened whole
    launch(kernel)
    assert picked(kernel) == {**picked(kernel), **LARGE_BEST}
    assert len(timed.screened()) < len(LARGE) // 2, len(timed.screened())
    (record,) = recorder.records
    assert any(f"searched {len(timed.screened())} of 480 candidates" in n for n in record.notes), record.notes
    # The others were never compiled nor run: each is there as infinity, with the reason.
    assert len(record.timings) == len(LARGE)
    unscreened = [c for c in record.timings if str(c) not in set(timed.screened())]
    assert len(unscreened) == len(LARGE) - len(timed.screened())
    assert all(record.timings[c] == [math.inf] * 3 and record.failures[c] == engine.NOT_SEARCHED for c in unscreened)


def test_a_small_space_is_screened_whole(timed, monkeypatch):
    monkeypatch.setenv(search.WHOLE_ENV, "200")
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel)
    assert len(timed.screened()) == len(SPACE) and picked(kernel) == {**picked(kernel), **BEST}


def test_a_new_key_starts_from_the_nearest_tuned_keys_ranking(timed, recorder, monkeypatch):
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel, 300)  # screened whole: 120 candidates
    assert len(timed.screened()) == len(SPACE)
    timed.timed.clear()
    launch(kernel, 1000)
    warm = timed.screened()
    assert picked(kernel) == {**picked(kernel), **BEST}
    assert len(warm) <= 20, len(warm)
    assert warm[0] == str(kernel.best_config)  # the nearest key's pick is screened first
    assert any("starting from the nearest tuned key (300," in n for n in recorder.records[-1].notes)
    # From disk, in a tuner that has tuned nothing itself (a later process).
    timed.timed.clear()
    again = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(again, 600)
    assert len(timed.screened()) <= 20 and picked(again) == {**picked(again), **BEST}
    assert any("starting from the nearest tuned key" in n for n in recorder.records[-1].notes)
    # Off: a new key starts cold.
    monkeypatch.setenv(search.WARM_ENV, "0")
    timed.timed.clear()
    launch(kernel, 2000)
    assert len(timed.screened()) == len(SPACE)


def test_optuna_finds_the_best_in_a_large_space_the_same_way_every_time(timed, recorder, monkeypatch):
    pytest.importorskip("optuna")
    monkeypatch.setenv(search.SEARCH_ENV, "optuna")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "1")
    timed.best, paths = LARGE_BEST, []
    for _ in range(2):
        timed.timed.clear()
        kernel = triton.autotune(configs=LARGE, key=["n"])(copy)
        launch(kernel)
        paths.append(timed.screened())
        assert bowl(picked(kernel), LARGE_BEST) <= 2.0, picked(kernel)  # the best, or one step from it
    assert paths[0] == paths[1]
    assert any("optuna's TPE sampler searched" in n for n in recorder.records[-1].notes)


def test_a_search_budget_caps_what_is_compiled_and_screened(timed, monkeypatch):
    monkeypatch.setenv(search.WHOLE_ENV, "16")
    monkeypatch.setenv(search.BUDGET_ENV, "40")
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel)
    assert len(timed.screened()) <= 40


def test_a_search_plugin_replaces_the_builtin(plugins, timed):
    seen = {}

    class FirstTwo:
        @hookimpl
        def tdp_search(self, request, candidates, evaluate, space, screen):
            seen["timings"] = evaluate(candidates[:2])
            seen["space"] = space.names
            return candidates[1:2]

    plugins(FirstTwo())
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel)
    assert str(kernel.best_config) == str(SPACE[1]) and len(seen["timings"]) == 2
    assert timed.screened() == [str(SPACE[0]), str(SPACE[1])]
    assert "BLOCK" in seen["space"]


def test_a_search_plugins_notes_appended_to_the_request_reach_the_record(plugins, timed, recorder):
    """``request.notes`` is ``request.found.notes``, the list the record is built from: a search
    plugin written against the request's own notes still explains its path."""
    seen = {}

    class Explains:
        @hookimpl
        def tdp_search(self, request, candidates, evaluate, space, screen):
            seen["same"] = request.notes is request.found.notes
            request.notes.append("screened the first two only")
            evaluate(candidates[:2])
            return candidates[:2]

    plugins(Explains())
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel)
    assert seen["same"] and "screened the first two only" in recorder.records[-1].notes


def test_a_search_plugin_that_returns_strangers_is_named(plugins):
    class Stranger:
        @hookimpl
        def tdp_search(self, request, candidates, evaluate, space, screen):
            return [triton.Config({"BLOCK": 1})]

    plugins(Stranger(), name="stranger")
    kernel = triton.autotune(configs=SPACE[:8], key=["n"])(copy)
    with pytest.raises(Exception, match="stranger"):
        launch(kernel)


def test_a_large_function_level_space_is_searched(timed):
    space = [search.features_of(c) for c in LARGE]  # 480 dicts of parameters
    timed.features, timed.best = (lambda index: space[index]), LARGE_BEST

    @autotune(config_space=space, key_fn=lambda x, n: n)
    def run(x, n, BLOCK, UNROLL, num_warps, num_stages, **compile_options):
        out = torch.zeros_like(x)
        copy[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=num_warps)
        return out

    x = torch.randn(300, device=DEVICE)
    torch.testing.assert_close(run(x, 300), x)
    assert {k: run.best_configs[300][k] for k in LARGE_BEST} == LARGE_BEST
    assert len(timed.screened()) < len(space) // 2


def test_every_rank_of_a_group_follows_the_same_search(tmp_path):
    ranks = run_ranks("search", 2, tmp_path, wall=300)
    for strategy in ("halving", "optuna", "warm"):
        assert ranks[0][strategy]["path"] == ranks[1][strategy]["path"]
        assert ranks[0][strategy]["pick"] == ranks[1][strategy]["pick"]
        assert len(ranks[0][strategy]["path"]) < 480
    assert len(ranks[0]["warm"]["path"]) <= 20  # warm-started on both ranks, not cold
    assert all(r["correct"] for r in ranks)


def test_ranks_whose_models_disagree_follow_rank_0s_ranking(tmp_path):
    ranks = run_ranks("model", 2, tmp_path, wall=300)
    assert ranks[0]["path"] == ranks[1]["path"] and len(ranks[0]["path"]) < len(SPACE) // 2
    assert ranks[0]["model"] == ranks[1]["model"] and ranks[0]["model"]["trusted"]
    assert all(r["best"] and r["correct"] for r in ranks)


def test_a_warm_start_comes_only_from_a_near_key_with_the_same_dtypes():
    """Near: the same non-numeric parts, and numbers at most 16 times apart in all (``store.keys.distance``)."""
    from triton_dist_plugin.patched import tuning
    from triton_dist_plugin.store import describe

    class State:
        name = "copy"
        rankings = {(300, "torch.float32"): ([describe.describe(SPACE[3]), describe.describe(SPACE[0])],
                                             [describe.describe(c) for c in SPACE[:-1]])}

    prior, near, unseen = tuning.warm_start(State, None, (1000, "torch.float32"), SPACE, None)
    assert near == (300, "torch.float32") and prior[:2] == [SPACE[3], SPACE[0]] and unseen == [SPACE[-1]]
    assert tuning.warm_start(State, None, (300 * 17, "torch.float32"), SPACE, None) == (None, None, [])
    assert tuning.warm_start(State, None, (1000, "torch.float16"), SPACE, None) == (None, None, [])


@triton.jit
def planted(x, out, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    if FAULT == 1:  # out of bounds, far beyond any allocation: kills the isolation worker
        tl.store(out + offs + (1 << 44), v, mask=offs < n)
    if FAULT == 2:  # runs fine and computes the wrong thing
        v = v * 2
    tl.store(out + offs, v, mask=offs < n)


def _planted_space(fault: int) -> list:
    """LARGE's parameters with FAULT 0, and one more candidate: the fastest one's twin with ``fault``."""
    space = [triton.Config({**c.kwargs, "FAULT": 0}, num_warps=c.num_warps, num_stages=c.num_stages) for c in LARGE]
    return space + [triton.Config({"BLOCK": 64, "UNROLL": 4, "FAULT": fault}, num_warps=2, num_stages=2)]


def test_a_searched_space_is_isolated_and_checked_step_by_step(timed, recorder, monkeypatch):
    """Each step readies only its own candidates: the crashing twin of the best fails in the
    isolation worker (which then serves the next steps), the wrong one fails the accuracy check
    against the first step's reference; neither is ever timed here."""
    from triton_dist_plugin.isolation import isolate

    # The faulty twins time fastest of all (FAULT shifted by one: the bowl is in doublings).
    timed.features = lambda c: {**search.features_of(c), "FAULT": c.kwargs["FAULT"] + 1}
    timed.best = {**LARGE_BEST, "FAULT": 2}
    monkeypatch.setenv(isolate.ENV, "1")
    crashing = _planted_space(1)
    kernel = triton.autotune(configs=crashing, key=["n"])(planted)
    launch(kernel)
    assert picked(kernel) == {**picked(kernel), **LARGE_BEST, "FAULT": 0}
    record = recorder.records[-1]
    assert "crashed the isolation worker" in record.failures[crashing[-1]]
    assert len([n for n in record.notes if n.startswith("ran ")]) >= 2, record.notes  # one per step
    monkeypatch.setenv(isolate.ENV, "0")
    timed.best = {**LARGE_BEST, "FAULT": 3}
    wrong = _planted_space(2)
    kernel = triton.autotune(configs=wrong, key=["n"], check_accuracy=True)(planted)
    launch(kernel, 1000)  # a new key (300's pick is on disk), warm-started from 300
    assert picked(kernel) == {**picked(kernel), **LARGE_BEST, "FAULT": 0}
    assert "wrong result: argument 'out'" in recorder.records[-1].failures[wrong[-1]]
    assert str(wrong[-1]) not in timed.screened() and str(crashing[-1]) not in timed.screened()


def test_a_search_steps_across_candidates_that_failed_to_reach_the_best_beyond_them():
    """Like ``BLOCK_K`` against stages under a shared-memory limit: past ``a + b = 12`` every
    candidate fails, and the times fall along that edge towards (8, 4). From (6, 6) each single
    step is either a failure or slower; only a step across a failure leads on."""
    space = [triton.Config({"a": a, "b": b, "c": c}) for a in range(1, 9) for b in range(1, 9) for c in range(1, 5)]

    def time_of(config):
        a, b, c = (config.kwargs[k] for k in "abc")
        return math.inf if a + b > 12 else 10.0 - a + 2 * (12 - a - b) + abs(c - 2)

    calls = []

    def evaluate(subset):
        calls.append(len(subset))
        return {c: [time_of(c)] * 3 for c in subset}

    request = tdp.TuningRequest("edge", (1,), "cpu")
    start = next(c for c in space if (c.kwargs["a"], c.kwargs["b"], c.kwargs["c"]) == (6, 6, 2))
    request.found.prior, request.found.prior_key = [start], (2,)
    survivors = search.halving(request, space, evaluate, search.Space(space), engine.Screen())
    best = min(survivors, key=time_of)
    assert (best.kwargs["a"], best.kwargs["b"], best.kwargs["c"]) == (8, 4, 2)
    assert sum(calls) < len(space) // 2  # a climb, not a sweep


def test_a_warm_start_also_screens_what_the_nearest_key_never_had(timed, recorder):
    """Pruned per key (or generated by ``configs=[]``), a space can hold candidates the nearest
    tuned key never had: nothing is known of them, so the warm start screens them at once."""
    def prune(configs, named, **kwargs):
        return [c for c in configs if c.kwargs["BLOCK"] <= named["n"] // 4]

    kernel = triton.autotune(configs=SPACE, key=["n"], prune_configs_by={"early_config_prune": prune})(copy)
    launch(kernel, 300)  # BLOCK 16-64: 60 candidates, screened whole
    timed.timed.clear()
    launch(kernel, 1000)  # BLOCK 16-128: the 20 with BLOCK 128 are new
    warm = set(timed.screened())
    assert {str(c) for c in SPACE if c.kwargs["BLOCK"] == 128} <= warm and len(warm) < 80
    assert any("starting from the nearest tuned key (300," in n for n in recorder.records[-1].notes)
    # From disk, in a tuner that has tuned nothing itself: the nearest key's space is read from its entry.
    timed.timed.clear()
    again = triton.autotune(configs=SPACE, key=["n"], prune_configs_by={"early_config_prune": prune})(copy)
    launch(again, 1200)  # BLOCK 16-256; nearest on disk: 1000 (BLOCK up to 128)
    warm = set(timed.screened())
    assert {str(c) for c in SPACE if c.kwargs["BLOCK"] == 256} <= warm and len(warm) < 100
    assert any("starting from the nearest tuned key (1000," in n for n in recorder.records[-1].notes)
