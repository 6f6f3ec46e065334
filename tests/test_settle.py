"""Picks that do not flip: finalists too close to call are measured again in interleaved rounds,
and a tie goes to the first of them in the given order, whatever the noise; a clear winner is
taken at once; a kernel's own ``do_bench`` decides as upstream. Real kernels run through the
interpreter; a timing plugin gives known times with random noise on top."""

import random

import pytest
import torch
import triton
from helpers import DEVICE
from search_space import SPACE, copy

from triton_dist_plugin import engine, hookimpl, unregister
from triton_dist_plugin.hook_objects import TuningRequest
from triton_dist_plugin.policy import PRESETS

DEFAULT = PRESETS["default"]

CANDIDATES = SPACE[:6]


class Noisy:
    """Times each candidate at ``base[i]`` ms (1.0 past the list) plus up to ``jitter`` of noise."""

    def __init__(self, base, jitter, seed):
        self.base, self.jitter, self.rng = base, jitter, random.Random(seed)
        self.requests = []

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        self.requests.append(request)
        i = next(i for i, c in enumerate(CANDIDATES) if c is request.config)
        return self.base[i] * (1 + self.rng.uniform(-self.jitter, self.jitter))


def tune(plugins, recorder, timing, **kw):
    plugins(timing)
    kernel = triton.autotune(configs=CANDIDATES, key=["n"], **kw)(copy)
    n = 300
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x)
    record = recorder.records[-1]
    return kernel, record


def test_a_tie_goes_to_the_first_in_the_given_order_whatever_the_noise(plugins, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    picks = set()
    for seed in range(5):  # five processes' worth of noise: 0.4% apart, 0.5% of noise
        timing = Noisy([2.0, 1.004, 2.0, 1.0, 2.0, 2.0], 0.005, seed)
        kernel, record = tune(plugins, recorder, timing)
        picks.add(str(kernel.best_config))
        rounds = record.decision["rounds"]
        assert record.decision["tie"] and DEFAULT.settle_rounds_least <= rounds <= DEFAULT.settle_rounds, \
            record.decision
        assert any(n.startswith("finalists too close to call") for n in record.notes), record.notes
        # The rounds alternate which finalist runs first.
        rounds = [str(r.config) for r in timing.requests if r.n_repeat == 3][-2 * record.decision["rounds"]:]
        firsts = {rounds[i] for i in range(0, len(rounds), 2)}
        assert firsts == {str(CANDIDATES[1]), str(CANDIDATES[3])}, rounds
    assert picks == {str(CANDIDATES[1])}


def test_a_clear_winner_is_taken_at_once_and_its_margin_recorded(plugins, recorder):
    timing = Noisy([2.0, 1.3, 2.0, 1.0, 2.0, 2.0], 0.0, 0)
    kernel, record = tune(plugins, recorder, timing)
    assert kernel.best_config is CANDIDATES[3]
    assert record.decision == {"margin": 0.3, "noise": DEFAULT.unknown_noise, "noise_known": False,
                               "noise_capped": False, "rounds": 0, "confidence": 1.0,
                               "tie": False}  # one number per run: the noise assumed


def test_the_rounds_stop_early_only_where_no_other_pick_is_possible(plugins, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    # Between the tie and the noise assumed: close enough to measure again, outside the tie.
    gap = 1 + (DEFAULT.tie + DEFAULT.unknown_noise) / 2
    assert DEFAULT.tie < gap - 1 < DEFAULT.unknown_noise
    timing = Noisy([2.0, 1.0, 2.0, gap, 2.0, 2.0], 0.0, 0)  # the faster is first in the given order
    kernel, record = tune(plugins, recorder, timing)
    assert kernel.best_config is CANDIDATES[1]
    assert record.decision["rounds"] == DEFAULT.settle_rounds_least and not record.decision["tie"], record.decision
    # The faster is later in the given order: the one before it is within twice the band, and
    # might yet tie with it (and take the pick) over more rounds, so all of them are run.
    timing = Noisy([2.0, gap, 2.0, 1.0, 2.0, 2.0], 0.0, 0)
    kernel, record = tune(plugins, recorder, timing)
    assert kernel.best_config is CANDIDATES[3]
    assert record.decision["rounds"] == DEFAULT.settle_rounds and not record.decision["tie"], record.decision


def test_a_real_gap_inside_the_noise_is_found_by_the_rounds(plugins, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    for seed in range(3):  # 5% apart under 4% of noise: close enough to measure again, then separated
        timing = Noisy([2.0, 1.05, 2.0, 1.0, 2.0, 2.0], 0.04, seed)
        kernel, record = tune(plugins, recorder, timing)
        if record.decision["rounds"]:
            assert kernel.best_config is CANDIDATES[3] and not record.decision["tie"], record.decision


def test_a_kernels_own_do_bench_decides_by_its_minimum_as_upstream(plugins, recorder):
    times = {id(c): t for c, t in zip(CANDIDATES, [2.0, 1.004, 2.0, 1.0, 2.0, 2.0])}
    current = {}

    class Spy:
        @hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            current["config"] = request.config

    def do_bench(fn, quantiles=None):
        fn()
        t = times[id(current["config"])] if "config" in current else 1.0
        return [t, t, t]

    kernel, record = tune(plugins, recorder, Spy(), do_bench=do_bench)
    assert record.decision is None


class Sampled:
    """Times candidate ``i`` of ``space`` as the quantiles of ``n_repeat`` samples around ``true[i]``,
    each off by ``noise`` (normal), as a device timer's rounds would be."""

    def __init__(self, space, true, noise, seed):
        self.space, self.true, self.noise, self.rng = space, true, noise, random.Random(seed)

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        import statistics

        request.call()
        i = next(i for i, c in enumerate(self.space) if c is request.config)
        n = max(2, request.n_repeat or 100)
        samples = [self.true[i] * (1 + self.rng.gauss(0, self.noise)) for _ in range(n)]
        cuts = statistics.quantiles(samples, n=10)
        return [statistics.median(samples), cuts[1], cuts[7]]


def picks_of(plugins, recorder, true, noise, runs):
    space = SPACE[: len(true)]
    picks = []
    for seed in range(runs):  # each a fresh process's worth of noise
        timing = Sampled(space, true, noise, seed)
        plugins(timing)
        kernel = triton.autotune(configs=space, key=["n"])(copy)
        n = 300
        x = torch.randn(n, device=DEVICE)
        out = torch.zeros_like(x)
        kernel[lambda m, n=n: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
        torch.testing.assert_close(out, x)
        picks.append(space.index(kernel.best_config))
        unregister(timing)
    return picks


FLAT = (3, 5, 8, 11, 14, 17, 20, 23)  # a flat top: eight candidates within 0.4% of each other


def test_a_flat_top_gives_the_same_pick_in_process_after_process(plugins, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    true = [1.0 + 0.004 * random.Random(i).random() if i in FLAT else 1.1 + 0.02 * i for i in range(24)]
    picks = picks_of(plugins, recorder, true, 0.05, 8)  # 5% noise on every run
    assert max(picks.count(p) for p in set(picks)) >= 7, picks  # the first of the flat top, nearly always
    assert all(true[p] <= min(true) * 1.01 for p in picks), picks


def test_a_real_gap_still_wins_over_the_given_order(plugins, recorder, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    true = [1.0 if i == 23 else 1.05 + 0.004 * random.Random(i).random() if i in FLAT else 1.2 for i in range(24)]
    assert picks_of(plugins, recorder, true, 0.05, 6) == [23] * 6  # 5% faster, last in the order


class Counted:
    """Times each candidate at ``base[i]`` ms and keeps the counts each timing was asked for."""

    def __init__(self, base):
        self.base, self.asked = base, []

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        self.asked.append((request.config, request.n_warmup, request.n_repeat))
        return self.base[CANDIDATES.index(request.config)]


def run_on_a_device(plugins, base, launches=None, request=None, method="event", **kw):
    """The engine as a device tuning runs it (the ``event`` method, as on a GPU), each candidate a
    real interpreted launch; the counts each of its timings was asked for. ``base``: the times, or
    a ``Counted`` timing plugin."""
    timing = base if isinstance(base, Counted) else Counted(base)
    plugins(timing)
    n = 300
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)

    counted = {} if launches is None else launches

    def make_call(config):
        def call():
            counted[id(config)] = counted.get(id(config), 0) + 1
            copy[(triton.cdiv(n, config.kwargs["BLOCK"]),)](x, out, n, **config.kwargs)
        return call

    outcome = engine.run_candidates(request or TuningRequest("copy", (n,), "cuda"), CANDIDATES, make_call,
                                    method=method, screen=engine.Screen(), **kw)
    torch.testing.assert_close(out, x)
    return outcome, timing.asked


def test_with_settling_to_follow_a_warm_up_then_a_full_measurement_of_about_full_ms(plugins):
    base = [2.0, 0.19, 2.0, 0.2, 2.0, 2.0]
    launches: dict = {}
    outcome, asked = run_on_a_device(plugins, base, launches=launches)
    # The second round: 25 runs as 2 rounds of 13, forwards and then backwards.
    second = [a[0] for a in asked if a[1:] == (1, 13)]
    assert len(second) >= 6 and second == second[: len(second) // 2] + second[: len(second) // 2][::-1], asked
    full = [a for a in asked if a[0] in outcome.measured and a[1] not in (1, DEFAULT.settle_warmup)]
    runs = round(25.0 / 0.19)  # 132: 4 interleaved rounds of 33, the first after the whole warm-up
    assert len(outcome.measured) == 2
    assert [a[1:] for a in full] == [(runs // 4, runs // 4)] * 2 + [(runs // 16, runs // 4)] * 6, asked
    # ...forwards, backwards, forwards, backwards
    assert [a[0] for a in full] == [outcome.measured[i] for i in (0, 1, 1, 0, 0, 1, 1, 0)]
    # Before the longer rounds, the fastest screened ran about 25 ms worth, untimed (a warm-up).
    fastest = CANDIDATES[1]
    assert launches[id(fastest)] - sum(a[0] is fastest for a in asked) == runs, launches
    assert all(launches[id(c)] == sum(a[0] is c for a in asked) for c in CANDIDATES if c is not fastest)
    # Bounds: a long kernel still runs 10 times, a tiny one at most 1000.
    assert engine.Screen().full_runs({"a": [50.0] * 3}, ["a"]) == (5, 10)
    assert engine.Screen().full_runs({"a": [0.001] * 3}, ["a"]) == (250, 1000)
    assert engine.Screen().full_runs({}, ["a"]) == (None, None)  # nothing timed yet: the benchmarker's own


@pytest.mark.parametrize("ms, runs", [(0.01, 100), (0.1, 50), (1.0, 25)])
def test_settling_rounds_run_each_finalist_about_settle_ms(plugins, ms, runs):
    # A short kernel's runs scatter by a percent or two: its rounds run more of them (at most
    # settle_runs_most), a long kernel's second_repeat; the counts are the same in every process.
    assert runs == max(DEFAULT.second_repeat, min(DEFAULT.settle_runs_most, round(DEFAULT.settle_ms / ms)))
    outcome, asked = run_on_a_device(plugins, [2.0, ms, 2.0, ms * 1.005, 2.0, 2.0])
    settling = [a for a in asked if a[1] == DEFAULT.settle_warmup]
    assert outcome.decision["rounds"] >= DEFAULT.settle_rounds_least and outcome.decision["tie"], outcome.decision
    assert len(settling) == 2 * outcome.decision["rounds"] and {a[2] for a in settling} == {runs}, asked
    assert outcome.best is CANDIDATES[1]


class Drifting(Counted):
    """A device whose clock ramps up under sustained load (none such is here; the launches are
    real): from the full measurement on (more than 25 runs at a time), every run timed so far
    changes the time of the next by ``drift``, relative."""

    def __init__(self, base, drift):
        super().__init__(base)
        self.drift, self.runs = drift, 0

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        base = super().tdp_time_candidate(request)
        if not request.n_repeat or request.n_repeat <= 25 or request.n_warmup == DEFAULT.settle_warmup:
            return base
        runs = request.n_warmup + request.n_repeat
        self.runs += runs
        return base * (1 + self.drift * (self.runs - runs / 2))


def test_a_clock_that_drifts_under_load_favours_no_finalist(plugins, recorder):
    # The fastest (2.5% ahead) is measured first; one finalist after another, the clock would have
    # sped up by about 5% by the time the other runs: the rounds of the full measurement take turns.
    request = TuningRequest("copy", (300,), "cuda")
    timing = Drifting([2.0, 0.2, 2.0, 0.195, 2.0, 2.0], drift=-0.0003)
    outcome, _ = run_on_a_device(plugins, timing, request=request)
    assert outcome.measured == [CANDIDATES[3], CANDIDATES[1]]
    assert outcome.best is CANDIDATES[3], request.notes
    assert any("in 4 interleaved rounds" in note for note in request.notes), request.notes


@pytest.mark.parametrize("failing_round", [0, 2, 3])
def test_a_finalist_that_fails_in_a_round_is_not_run_again_and_is_never_picked(plugins, failing_round):
    class FailsLater(Counted):
        @hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            value = super().tdp_time_candidate(request)
            full = [a for a in self.asked if a[0] is CANDIDATES[3] and a[1] not in (1, DEFAULT.settle_warmup)]
            if request.config is CANDIDATES[3] and request.n_warmup not in (1, DEFAULT.settle_warmup) and \
                    len(full) == failing_round + 1:
                raise RuntimeError("lost the device")
            return value

    # the one that fails is the faster: three good rounds of four must not make it the pick
    timing = FailsLater([2.0, 0.19, 2.0, 0.185, 2.0, 2.0])
    outcome, _ = run_on_a_device(plugins, timing)
    assert outcome.best is CANDIDATES[1] and "lost the device" in outcome.failures[CANDIDATES[3]]
    assert outcome.timings[CANDIDATES[3]][0] == float("inf")
    assert sum(a[0] is CANDIDATES[3] and a[1] not in (1, DEFAULT.settle_warmup) for a in timing.asked) == \
        failing_round + 1


@pytest.mark.parametrize("method", ["cudagraph", "profiler"])
def test_timers_that_cost_much_per_round_measure_in_one_round(plugins, method):
    # A CUDA graph's replays ignore the counts; a profiler session per round costs more than it gives.
    request = TuningRequest("copy", (300,), "cuda")
    outcome, asked = run_on_a_device(plugins, [2.0, 0.19, 2.0, 0.2, 2.0, 2.0], request=request, method=method)
    measured = {id(c) for c in outcome.measured}
    before_settling = [a for a in asked if a[1] != DEFAULT.settle_warmup]
    assert len(measured) == 2
    assert sum(id(a[0]) in measured and a[2] not in (5, 25) for a in before_settling) == 2, asked
    assert not any(a[2] == 13 for a in asked) and not any("interleaved rounds" in n for n in request.notes[:-1])


def test_the_reports_phases_read_the_notes_of_a_device_tuning(plugins):
    from triton_dist_plugin.reporting.html_charts import _phases

    request = TuningRequest("copy", (300,), "cuda")
    run_on_a_device(plugins, [2.0, 0.19, 2.0, 0.2, 2.0, 2.0], request=request)
    assert any("2 interleaved rounds" in n for n in request.notes) and any("4 interleaved rounds" in n
                                                                          for n in request.notes)
    steps = {cls: seconds for cls, _, seconds in _phases({"bench_time_s": 10.0, "notes": request.notes})}
    assert steps["second"] > 0 and steps["measuring"] > 0, (steps, request.notes)


def test_without_settling_or_with_a_do_bench_the_full_measurement_is_the_benchmarkers(plugins):
    base = [2.0, 0.19, 2.0, 0.2, 2.0, 2.0]
    launches: dict = {}
    outcome, asked = run_on_a_device(plugins, base, launches=launches, settled=False)
    # The finalists' last timing is the full one, on the benchmarker's own budget; nothing else ran.
    last = {id(a[0]): a[1:] for a in asked}
    assert outcome.measured and all(last[id(c)] == (None, None) for c in outcome.measured), asked
    assert {a[1:] for a in asked} <= {(1, 5), (1, 25), (None, None)}, asked
    assert all(launches[id(c)] == sum(a[0] is c for a in asked) for c in CANDIDATES), launches  # no warm-up

