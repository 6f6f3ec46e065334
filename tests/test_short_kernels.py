"""A short kernel's later rounds are timed by its device time alone (the profiler), where the
timing method is the default on CUDA: device events add a launch gap whose jitter is as large as
what separates such kernels' configs, and processes would pick apart by it.

No GPU is here: CUDA events and CUPTI are stood in for (``timing.bench_event`` answers the
screening's times, ``kernel_time.profile_rounds`` and ``kernel_time.cuda_profiler`` the kernel's own), and
say so; every candidate is a real launch through the interpreter, and the engine, its rounds and
the settling are the real ones."""

from types import SimpleNamespace

import pytest
import torch
import triton
from helpers import DEVICE
from search_space import SPACE, copy
from torch.autograd import DeviceType

from triton_dist_plugin import engine, hookimpl, kernel_time, timing
from triton_dist_plugin.hook_objects import TuningRequest

CANDIDATES = SPACE[:6]
# Events see a launch gap: the first two look alike, the second a little faster (by more than a
# tie, less than a screening's noise). By the kernel's own time the first is 3% faster.
EVENTS = [0.0090, 0.00875, 0.03, 0.03, 0.03, 0.03]
KERNEL = [0.0040, 0.00412, 0.025, 0.025, 0.025, 0.025]


class Device:
    """Stands in for the CUDA timers (none here): events answer ``events``, the profiler ``kernel``;
    what each was asked."""

    def __init__(self, monkeypatch, events, kernel, batch_fails=False):
        self.events, self.kernel, self.batch_fails = events, kernel, batch_fails
        self.index: dict = {}
        self.sessions: list = []
        self.alone: list = []
        self.event_calls = 0
        monkeypatch.setattr(timing, "bench_event", self.bench_event)
        monkeypatch.setattr(kernel_time, "profile_rounds", self.profile_rounds)
        monkeypatch.setattr(kernel_time, "cuda_profiler", self.cuda_profiler)

    def bench_event(self, call, device, n_warmup, n_repeat, quantiles):
        call()
        self.event_calls += 1
        return [self.events[self.index[id(call)]]] * len(quantiles)

    def profile_rounds(self, calls, name, n_warmup, n_repeat, rounds, quantiles):
        if self.batch_fails:
            raise kernel_time.MethodUnavailable("the records could not be told apart")
        for call in calls:
            call()
        self.sessions.append(([self.index[id(c)] for c in calls], n_warmup, n_repeat, rounds))
        return [[self.kernel[self.index[id(c)]]] * len(quantiles) for c in calls]

    def cuda_profiler(self, call, name, n_warmup, n_repeat, quantiles):
        call()
        self.alone.append(self.index[id(call)])
        return [self.kernel[self.index[id(call)]]] * len(quantiles)


def tune(device: Device, request=None, **kw):
    n = 16  # one program: a short kernel's warm-up runs it a thousand times
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)

    def make_call(config):
        def call():
            copy[(triton.cdiv(n, config.kwargs["BLOCK"]),)](x, out, n, **config.kwargs)

        device.index[id(call)] = CANDIDATES.index(config)
        return call

    request = request or TuningRequest("copy", (n,), "cuda")
    outcome = engine.run_candidates(request, CANDIDATES, make_call, method=timing.resolve_method("cuda"),
                                    screen=engine.Screen(), **kw)
    torch.testing.assert_close(out, x)
    return outcome, request


@pytest.fixture(autouse=True)
def default_method(monkeypatch):
    monkeypatch.delenv("TRITON_BENCH_METHOD", raising=False)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")


def test_a_short_kernel_is_picked_by_its_own_time_in_a_few_profiler_sessions(monkeypatch):
    device = Device(monkeypatch, EVENTS, KERNEL)
    outcome, request = tune(device)
    assert outcome.best is CANDIDATES[0], request.found.notes  # events alone would take the second
    assert any("by the profiler" in n for n in request.found.notes)
    # The second round, the full measurement and each settling round: one session each, never one a candidate.
    assert 2 <= len(device.sessions) <= 2 + engine.Screen().policy.settle_rounds and not device.alone
    second, full = device.sessions[:2]
    assert second[3] == engine.Screen().policy.second_rounds and full[3] == engine.Screen().policy.full_rounds
    # A device time needs no launch gap averaged away: at most ``profiled_runs_most`` runs, not 25 ms' worth.
    assert full[2] * full[3] == engine.Screen().policy.profiled_runs_most, device.sessions
    # The screening was by events, each candidate once.
    assert device.event_calls == len(CANDIDATES)


def test_a_long_kernel_and_a_method_asked_for_keep_the_events(monkeypatch):
    device = Device(monkeypatch, [t * 100 for t in EVENTS], [t * 100 for t in KERNEL])
    outcome, request = tune(device)
    assert not device.sessions and not device.alone and outcome.best is CANDIDATES[1]
    assert not any("by the profiler" in n for n in request.found.notes)
    monkeypatch.setenv("TRITON_BENCH_METHOD", "event")  # asked for by name: what it names times every round
    device = Device(monkeypatch, EVENTS, KERNEL)
    outcome, _ = tune(device)
    assert not device.sessions and not device.alone and outcome.best is CANDIDATES[1]


def test_a_timing_plugin_still_times_every_round(monkeypatch, plugins):
    class Mine:
        def __init__(self):
            self.methods = []

        @hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            request.call()
            self.methods.append(request.method)
            return KERNEL[CANDIDATES.index(request.config)] * 2

    mine = Mine()
    plugins(mine)
    device = Device(monkeypatch, EVENTS, KERNEL)
    outcome, _ = tune(device)
    assert not device.sessions and not device.alone and device.event_calls == 0
    assert outcome.best is CANDIDATES[0] and "profiler" in mine.methods  # told how the rounds want timing


def test_a_session_that_records_nothing_leaves_the_later_rounds_to_events_with_their_counts(monkeypatch):
    # CUPTI held by another tool, or no kernel launched: events from then on, asked once, never
    # upstream's whole benchmarking budget per candidate.
    device = Device(monkeypatch, EVENTS, KERNEL, batch_fails=True)
    counts = []
    events = device.bench_event

    def counted(call, dev, n_warmup, n_repeat, quantiles):
        counts.append((n_warmup, n_repeat))
        return events(call, dev, n_warmup, n_repeat, quantiles)

    monkeypatch.setattr(timing, "bench_event", counted)
    attempts = []
    fails = device.profile_rounds
    monkeypatch.setattr(kernel_time, "profile_rounds", lambda *a: attempts.append(1) or fails(*a))
    outcome, request = tune(device)
    assert outcome.best is CANDIDATES[1] and not device.alone and len(attempts) == 1, request.found.notes
    assert any("timed nothing" in n for n in request.found.notes)
    assert len(counts) > len(CANDIDATES) and (None, None) not in counts


def test_inside_a_profiler_session_of_the_users_own_nothing_is_profiled(monkeypatch):
    device = Device(monkeypatch, EVENTS, KERNEL)
    monkeypatch.setattr(kernel_time, "profiler_busy", lambda: True)
    outcome, request = tune(device)
    assert not device.sessions and not device.alone and outcome.best is CANDIDATES[1]


def test_picks_made_so_are_stored_apart_from_picks_timed_by_events_alone(monkeypatch):
    assert timing.method_named("cuda", timing.resolve_method("cuda")) == timing.SHORTS
    assert timing.method_named("npu", "event") == "event" and timing.method_named("cpu", "wall") == "wall"
    monkeypatch.setenv("TRITON_BENCH_METHOD", "event")
    assert timing.method_named("cuda", timing.resolve_method("cuda")) == "event"


def test_a_failing_finalist_in_a_session_is_found_alone_and_never_picked(monkeypatch):
    device = Device(monkeypatch, EVENTS, KERNEL)
    real = device.profile_rounds
    state = {"fail": True}

    def flaky(calls, *args):
        if any(device.index[id(c)] == 0 for c in calls) and state["fail"]:
            raise RuntimeError("an illegal memory access")
        return real(calls, *args)

    def alone(call, name, n_warmup, n_repeat, quantiles):
        if device.index[id(call)] == 0:
            raise RuntimeError("an illegal memory access")
        return Device.cuda_profiler(device, call, name, n_warmup, n_repeat, quantiles)

    monkeypatch.setattr(kernel_time, "profile_rounds", flaky)
    monkeypatch.setattr(kernel_time, "cuda_profiler", alone)
    outcome, _ = tune(device)
    assert outcome.best is CANDIDATES[1] and "illegal memory access" in outcome.failures[CANDIDATES[0]]


def Record(name, start, ns, device=DeviceType.CUDA, index=0, annotation=False):  # noqa: N802 (reads as a type)
    """One of a profiler session's raw records, as kineto gives them (methods, not fields)."""
    return SimpleNamespace(name=lambda: name, start_ns=lambda: start, duration_ns=lambda: ns,
                           device_type=lambda: device, device_index=lambda: index,
                           is_user_annotation=lambda: annotation)


def _session(records):
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: records)),
                           events=lambda: [])


def test_kernel_records_are_read_by_name_in_launch_order_never_the_flush(monkeypatch):
    monkeypatch.setattr(kernel_time, "_current_cuda_device", lambda: 0)  # no GPU here: this process's device 0
    flush = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>"
    records = [Record("add_kernel", 30, 2000), Record(flush, 5, 60000), Record("add_kernel", 10, 1000),
               Record("add_kernel_2", 20, 9000), Record("add_kernel", 50, 3000, DeviceType.CPU),
               Record("add_kernel", 60, 4000, index=1), Record("add_kernel", 70, 5000, annotation=True)]
    assert kernel_time.kernel_times(_session(records), "add_kernel") == [0.001, 0.002]
    # where no kernel has the name whole, a part of it (a compiler's suffix), still never the flush
    assert kernel_time.kernel_times(_session(records), "add_k") == [0.001, 0.009, 0.002]
    assert kernel_time.kernel_times(_session([Record(flush, 5, 60000)]), "kernel") == []


@pytest.mark.parametrize("search", ["halving", "optuna"])
def test_every_search_strategy_hands_a_short_kernels_later_rounds_to_its_own_time(monkeypatch, search):
    # (``exhaustive`` screens nothing: its front ends hand no screen, and every round is the method's.)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH", search)
    device = Device(monkeypatch, EVENTS, KERNEL)
    outcome, request = tune(device)
    assert device.sessions and not device.alone and outcome.best is CANDIDATES[0], request.found.notes


def test_a_users_own_profiler_session_is_seen_and_a_session_that_cannot_start_is_no_candidates_fault():
    """Real ``torch.profiler`` sessions (on the CPU: the only activity this machine has)."""
    from torch.profiler import ProfilerActivity, profile

    assert not kernel_time.profiler_busy()
    with profile(activities=[ProfilerActivity.CPU]):
        assert kernel_time.profiler_busy()
    assert not kernel_time.profiler_busy()
    if not torch.cuda.is_available():  # no CUDA activity to record here: refused as the method's, not a failure
        with pytest.raises(kernel_time.MethodUnavailable, match="did not start"):
            with kernel_time._cuda_session():
                pass
    assert not kernel_time.profiler_busy()
