"""The cost model and the search it guides: the model's best few compiled first, the neighbours of
the best measured climbed, the whole space screened when the model is not borne out, and the model
replaced or turned off like any plugin.

Real kernels run through the interpreter (every screened candidate is launched); the times are a
bowl over the parameters from a timing plugin (``search_space.py``), so the best is known. Where a
test needs the model to be right or wrong in a given way, a ranking plugin stands in for it; the
built-in model itself is checked on the matmul spaces' times measured on an H200.
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, python
from search_space import BEST, SPACE, bowl, copy

from kernels import KERNELS
from triton_dist_plugin import hookimpl
from triton_dist_plugin.policy import PRESETS
from triton_dist_plugin.search import model
from triton_dist_plugin.search import strategy as search

DEFAULT = PRESETS["default"]

TRUTH = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "search_truth_h200.json"


def launch(kernel, n=300):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x)


class Ranking:
    """A ``tdp_rank_candidates`` plugin predicting ``bowl`` around ``centre`` (the model's belief)."""

    def __init__(self, predict):
        self.predict, self.calls = predict, 0

    @hookimpl(tryfirst=True)
    def tdp_rank_candidates(self, request, candidates):
        self.calls += 1
        return [self.predict(search.features_of(c)) for c in candidates]


def tuned(recorder):
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    launch(kernel)
    (record,) = recorder.records
    return kernel, record


def test_a_right_model_compiles_a_few_and_keeps_the_best(plugins, timed, recorder):
    plugins(Ranking(bowl))
    kernel, record = tuned(recorder)
    assert search.features_of(kernel.best_config) | BEST == search.features_of(kernel.best_config)
    assert len(timed.screened()) <= 0.4 * len(SPACE), len(timed.screened())
    assert record.model["trusted"] and record.model["recall"] and record.model["of"] == len(SPACE)
    assert record.model["kept"] == DEFAULT.keep_min and record.model["screened"] == len(timed.screened())
    assert any(n.startswith(f"cost model: timed its {DEFAULT.keep_min} likeliest of 120") for n in record.notes), \
        record.notes
    assert not any("climbed" in n or "correlation" in n for n in record.notes), record.notes  # plain words


def test_the_report_shows_the_models_recall_from_the_stored_entry(plugins, timed, recorder, tmp_path):
    import sys

    plugins(Ranking(bowl))
    tuned(recorder)
    page = tmp_path / "report.html"
    script = Path(sys.executable).with_name("triton-dist-tune")  # the installed console script
    done = python(script, "report", "-o", page, cwd=os.getcwd(), timeout=120)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert f"<b>Cost model:</b> kept {DEFAULT.keep_min} of 120 candidates" in text
    assert "the best screened was among them" in text and "<b>Decision:</b>" not in text  # the box says it
    assert "The full measurement decided" in text or "interleaved rounds" in text


def test_a_model_wrong_about_one_parameter_is_corrected_by_climbing(plugins, timed, recorder):
    plugins(Ranking(lambda f: bowl(f, {**BEST, "num_warps": 8})))  # believes 8 warps, not 2
    kernel, record = tuned(recorder)
    assert search.features_of(kernel.best_config) | BEST == search.features_of(kernel.best_config)
    assert record.model["trusted"] and not record.model["recall"]  # found by the climb, and said so
    assert len(timed.screened()) < len(SPACE) / 2
    assert any("the fastest timed was not one of them" in n for n in record.notes), record.notes


def test_a_model_the_times_contradict_is_ignored_and_the_space_screened_whole(plugins, timed, recorder):
    plugins(Ranking(lambda f: -bowl(f)))  # the slowest first
    kernel, record = tuned(recorder)
    assert search.features_of(kernel.best_config) | BEST == search.features_of(kernel.best_config)
    assert not record.model["trusted"] and record.model["rho"] < DEFAULT.rho_min
    assert len(timed.screened()) == len(SPACE)


def test_a_model_that_ranks_the_best_region_low_costs_compiles_not_the_pick(plugins, timed, recorder):
    # Believes the best is at BLOCK 512, and ranks every BLOCK 64 candidate (the true best's) low.
    plugins(Ranking(lambda f: bowl(f, {**BEST, "BLOCK": 512}) if f["BLOCK"] != BEST["BLOCK"] else 5.0))
    kernel, record = tuned(recorder)
    assert search.features_of(kernel.best_config) | BEST == search.features_of(kernel.best_config)
    assert not (record.model["trusted"] and record.model["recall"])  # the record owns up to the miss


def test_candidates_predicted_not_to_run_are_never_compiled(plugins, timed, recorder):
    too_big = {"BLOCK": 512}
    plugins(Ranking(lambda f: math.inf if f["BLOCK"] == too_big["BLOCK"] else bowl(f)))
    tuned(recorder)
    assert not any(s.startswith("BLOCK: 512,") for s in timed.screened())


def test_the_model_turned_off_or_abstaining_leaves_the_space_screened_whole(plugins, timed, recorder, monkeypatch):
    ranking = Ranking(bowl)
    plugins(ranking)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")  # the second kernel tunes again
    monkeypatch.setenv(model.MODEL_ENV, "0")
    _, record = tuned(recorder)
    assert ranking.calls == 0 and record.model is None and len(timed.screened()) == len(SPACE)
    monkeypatch.setenv(model.MODEL_ENV, "1")
    recorder.records.clear()
    timed.timed.clear()
    ranking.predict = lambda f: math.nan  # no opinion on any candidate
    _, record = tuned(recorder)
    assert record.model is None and len(timed.screened()) == len(SPACE)


def test_a_ranking_of_the_wrong_length_names_its_plugin(plugins):
    class Short:
        @hookimpl(tryfirst=True)
        def tdp_rank_candidates(self, request, candidates):
            return [1.0]

    plugins(Short(), name="short-ranker")
    kernel = triton.autotune(configs=SPACE[:8], key=["n"])(copy)
    with pytest.raises(Exception, match="short-ranker"):
        launch(kernel)


def test_the_builtin_model_sees_the_launch_it_ranks(plugins):
    seen = {}

    class Spy:
        @hookimpl(tryfirst=True)
        def tdp_search(self, request, candidates, evaluate, space, screen):
            seen.update(problem=request.problem, ranking=request.ranking)

    plugins(Spy())
    spec = KERNELS["matmul"]
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16, "GROUP_M": 1}, num_warps=1, num_stages=1)
               for m in (16, 32) for n in (16, 32)]
    kernel = triton.autotune(configs=configs, key=spec.key)(spec.jit)
    a, b = spec.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(spec.launch(kernel, a, b), spec.reference(a, b), rtol=1e-4, atol=1e-4)
    (m, k), n = a.shape, b.shape[1]
    assert seen["problem"].dot and seen["problem"].tiles == {
        "BLOCK_M": ["program", m, 2], "BLOCK_N": ["program", n, 2], "BLOCK_K": ["loop", k, 1]}
    assert len(seen["ranking"]) == 4 and all(math.isfinite(s) for s in seen["ranking"])


@pytest.fixture(scope="module")
def h200():
    """The 1,152-config matmul space at 4096^3 and every config's screening time on an H200."""
    import itertools

    truth = json.loads(TRUTH.read_text())
    space = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, num_warps=w, num_stages=s)
             for bm, bn, bk, g, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128),
                                                          (1, 8), (2, 4, 8), (2, 3, 4, 5))]
    quick = {c: truth["quick_ms"][str(c).replace(", ir_override: None", "")] for c in space}
    m, n, k = truth["shape"]
    problem = model.Problem({"BLOCK_M": ["program", m, 1], "BLOCK_N": ["program", n, 1], "BLOCK_K": ["loop", k, 1]},
                            True, 2, 132, 232448, True, {"num_warps": 4, "num_stages": 3})  # an H200's
    return space, quick, problem


@pytest.mark.parametrize("which", ["48", "1152"])
def test_the_builtin_model_keeps_the_h200s_best_matmul_config(h200, which):
    space, quick, problem = h200
    if which == "48":  # the benchmarks' 48-config space, inside the large one
        space = [c for c in space if c.kwargs["GROUP_M"] == 8 and c.kwargs["BLOCK_M"] in (64, 128)
                 and c.kwargs["BLOCK_N"] >= 64 and c.kwargs["BLOCK_K"] <= 64 and c.num_warps >= 4
                 and c.num_stages in (3, 4)]
        assert len(space) == 48
    scores = model.rank(problem, space)
    best = min((c for c in space if quick[c] is not None), key=quick.get)
    order = sorted(range(len(space)), key=lambda i: (scores[i], i))
    assert order.index(space.index(best)) < DEFAULT.keep_min  # among the first step's candidates
    fails = [i for i, c in enumerate(space) if quick[c] is None]  # out of resources on the H200
    assert sum(math.isinf(scores[i]) for i in fails) >= len(fails) // 2
    good = [i for i, c in enumerate(space) if quick[c] is not None and quick[c] < 2 * quick[best]]
    assert not any(math.isinf(scores[i]) for i in good)  # nothing worth having is predicted not to run


def test_the_climb_stops_once_a_step_finds_nothing_faster():
    """Each climb step is another round of compiles: after a step whose best is the best already
    screened, the search stops, even where that step changed the runner-up (whose neighbours an
    older rule went on to compile). Driven through ``halving`` with known times, as the replay is."""
    from triton_dist_plugin import TuningRequest, engine

    space = search.Space(SPACE)
    features = [search.features_of(c) for c in SPACE]
    best = next(i for i, f in enumerate(features) if f | BEST == f)
    # A right model (the best among those kept), flat enough that the climb may go three steps out.
    ranking = [1 + 0.6 * (bowl(f) - 1) for f in features]
    order = sorted(range(len(SPACE)), key=lambda i: (ranking[i], i))
    kept = order[:DEFAULT.keep_min]
    runner_up = min(i for i in kept if i != best)  # of the kept runner-ups, tied but for the times below, the first
    rest = order[DEFAULT.keep_min:]  # the probes, picked across the rest as ``guided`` picks them
    first_wave = {*kept, *(rest[len(rest) * (j + 1) // (DEFAULT.probes + 1)] for j in range(DEFAULT.probes))}
    close = next(j for j in space.neighbours(runner_up) if j not in first_wave and j != best)
    times = {i: bowl(features[i]) + 0.001 * i for i in range(len(SPACE))}
    times[close] = 1.05  # second only to the best: found by the first climb step, changing the runner-up
    steps: list = []

    def evaluate(subset):
        steps.append(len(subset))
        return {c: [times[SPACE.index(c)]] * 3 for c in subset}

    request = TuningRequest("climb", ("k",), "cuda")
    request.found.ranking = ranking
    search.halving(request, SPACE, evaluate, space, engine.Screen())
    assert request.found.model["trusted"] and request.found.model["recall"]
    assert request.found.model["kept"] == len(kept)  # the first wave this test was built around
    assert len(steps) == 2, steps  # the first wave, one climb step, and no step for the runner-up's neighbours
