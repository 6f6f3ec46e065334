"""Upstream ``Autotuner`` semantics that user code relies on, kept exactly by the plugin.

Most tests are differential: the same scenario runs

* ``upstream``: the plugin deactivated, a freshly decorated kernel, a kernel-provided ``do_bench``
  (upstream's default benchmarker needs a GPU driver);
* ``plugin``: the plugin active, the same ``do_bench``;
* ``plugin-own-timing``: the plugin active, no ``do_bench`` (it times on its own, also on the CPU),

and what user code can observe (tensor values, hook calls, picks, ``cache`` contents, exceptions)
must match. Where the number of timing runs differs (own timing), repeated runs are collapsed
before comparing, and runs that come back in interleaved rounds are dropped. Kernel arguments are
passed by position and by keyword wherever they matter.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import sys
import textwrap
import warnings

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, run_python
from triton.compiler.errors import CompileTimeAssertionFailure
from triton.runtime import autotuner as upstream_autotuner
from triton.runtime.errors import InterpreterError, OutOfResources

import triton_dist_plugin as tdp
from triton_dist_plugin import _compat, policy

Autotuner = upstream_autotuner.Autotuner
Config = triton.Config

UPSTREAM, PLUGIN, OWN = "upstream", "plugin", "plugin-own-timing"


@pytest.fixture(autouse=True)
def _no_persisted_picks(monkeypatch):
    """Upstream times every key in every process and in every new ``Autotuner``. Persisted picks
    (on by default, ``test_persist.py``) change exactly that, by design; these side-by-side checks
    of what one tuning does run with them off."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
MODES = (UPSTREAM, PLUGIN, OWN)
BY = ["position", "keyword"]
INTERPRET = DEVICE == "cpu"
QUANTILES = (0.5, 0.2, 0.8)  # what upstream's _bench asks every do_bench for

try:
    from triton.runtime.errors import PTXASError
except ImportError:  # Triton < 3.4
    PTXASError = None
try:
    from triton.runtime.errors import AutotunerError
except ImportError:  # Triton < 3.6
    AutotunerError = None

_INIT = inspect.signature(Autotuner.__init__).parameters
_CONFIG = inspect.signature(Config.__init__).parameters
_AUTOTUNING_KNOBS = getattr(getattr(triton, "knobs", None), "autotuning", None)


# -------------------------------------------------------------------------------------------
# Kernels (plain functions: every test jits its own copy, so launch hooks stay with one test)
# -------------------------------------------------------------------------------------------


def _scale(x, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * alpha, mask=mask)


def _accumulate(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def _increment(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


def _bump(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x + offs, mask=mask) + 1
    tl.store(x + offs, value, mask=mask)
    tl.atomic_add(out + offs, value, mask=mask)


def _scale_even(x, out, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out + offs, tl.load(x + offs) * alpha)
    else:
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) * alpha, mask=mask)


def _small_blocks_only(x, out, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 32, "BLOCK too large")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask), mask=mask)


def _described_copy(desc, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    value = desc.load([pid * BLOCK])
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, value * 2, mask=offs < n)


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def blocks(*sizes, **options):
    return [Config({"BLOCK": b}, **options) for b in sizes]


def block_of(config):
    return config.kwargs["BLOCK"]


def seq(n, dtype=torch.float32):
    return torch.arange(n, dtype=dtype, device=DEVICE)


class Launches:
    """A JIT pre-run hook: the named values every launch of one kernel saw.

    ``names`` are the arguments recorded (or a function of all of them, by name). A call that
    only compiles (a GPU's ``warmup``, which runs the same hooks) goes to
    ``compiled`` instead of ``seen``. ``fail`` maps a BLOCK value (or ``"*"``) to an exception
    factory: that config raises it from inside the kernel's own launch path, at its compile and
    at its launch (``fail_at="any"``, like a compile error) or at its launch only
    (``fail_at="launch"``, like a resource limit found when the kernel is loaded). ``log``, if
    given, gets ``("launch" | "compile", BLOCK)`` events.
    """

    def __init__(self, fn, names=("BLOCK",), fail=None, fail_at="any", log=None):
        self.fn, self.names, self.fail, self.fail_at, self.log = fn, names, fail or {}, fail_at, log
        self.seen: list = []
        self.compiled: list = []
        self.raised: list = []
        if hasattr(fn, "add_pre_run_hook"):
            fn.add_pre_run_hook(self)
        else:  # interpreters before 3.6 have no pre-run hooks: wrap the kernel's run()
            original = fn.run

            def run(*args, grid, warmup, **kwargs):
                self.record(args, kwargs, compile_only=bool(warmup))
                return original(*args, grid=grid, warmup=warmup, **kwargs)

            fn.run = run

    def __call__(self, *args, **kwargs):
        # JITFunction.run(..., warmup=True) runs the same hooks for a compile without a launch
        self.record(args, kwargs, compile_only=sys._getframe(1).f_locals.get("warmup") is True)

    def record(self, args, kwargs, compile_only):
        named = {**dict(zip(self.fn.arg_names, args)), **kwargs}
        values = self.names(named) if callable(self.names) else tuple(named.get(n) for n in self.names)
        (self.compiled if compile_only else self.seen).append(values)
        if self.log is not None:
            self.log.append(("compile" if compile_only else "launch", named.get("BLOCK")))
        make = self.fail.get(named.get("BLOCK"), self.fail.get("*"))
        if make is not None and not (compile_only and self.fail_at == "launch"):
            exc = make()
            self.raised.append(exc)
            raise exc

    @property
    def blocks(self):
        return [s[0] for s in self.seen]


def jit(pyfn, names=("BLOCK",), fail=None, fail_at="any", log=None):
    fn = triton.jit(pyfn)
    return fn, Launches(fn, names, fail, fail_at, log)


def launch_events(events):
    """Drop what only a separate compile step adds (a GPU's parallel precompile): compile-only
    calls, and config pre_hook calls that no launch (or autotuner pre_hook) follows."""
    kept = [e for e in events if e[0] != "compile"]
    return [e for i, e in enumerate(kept)
            if e[0] != "config" or (i + 1 < len(kept) and kept[i + 1][0] in ("pre", "launch"))]


class Bench:
    """A kernel's own ``do_bench``: runs the candidate ``runs`` times and reports scripted times,
    so upstream and the plugin pick the same config: by call order, or, with ``launches``, a
    dict from the BLOCK each call launched."""

    def __init__(self, times=(2.0, 1.0), runs=2, bare_float=False, probe=None, error=None, launches=None):
        self.times, self.runs, self.bare_float, self.probe, self.error = times, runs, bare_float, probe, error
        self.launches = launches
        self.calls: list = []
        self.returned: list = []
        self.raised: list = []

    def __call__(self, *args, **kwargs):
        fn = args[0]
        self.calls.append((len(args), dict(kwargs)))
        if self.probe is not None:
            self.probe()
        for _ in range(self.runs):
            fn()
        if self.error is not None:
            exc = self.error()
            self.raised.append(exc)
            raise exc
        if self.launches is not None:
            t = self.times[self.launches.blocks[-1]]
        else:
            t = self.times[(len(self.calls) - 1) % len(self.times)]
        value = t if self.bare_float else [t, t, t]
        self.returned.append(value)
        return value


#: Triton 3.2's Config.all_kwargs() carries warp-specialisation fields its interpreter rejects.
_UPSTREAM_CANNOT_INTERPRET = INTERPRET and "num_buffers_warp_spec" in Config({}).all_kwargs()


@contextlib.contextmanager
def in_mode(mode):
    """Deactivate the plugin for ``upstream``; a kernel must be decorated inside the block."""
    if mode != UPSTREAM:
        yield
        return
    if _UPSTREAM_CANNOT_INTERPRET:
        pytest.skip("upstream Triton 3.2 cannot launch an autotuned kernel under its interpreter")
    tdp.deactivate()
    try:
        yield
    finally:
        tdp.activate()


def observe(scenario, modes=MODES, rounds="as-timed"):
    """``{mode: scenario(mode)}``, each run in its mode; ``rounds``: one of ``ROUNDS``."""
    seen = {}
    for mode in modes:
        with in_mode(mode), rounds_for(mode, rounds):
            seen[mode] = scenario(mode)
    return seen


#: own timing as it happens to come out, and with every finalist sent on to the settling's
#: interleaved rounds (``settle.py``: all counted as close), which on a busy machine happens by chance
ROUNDS = ("as-timed", "interleaved")


@contextlib.contextmanager
def rounds_for(mode, rounds):
    with pytest.MonkeyPatch.context() as patch:
        if mode == OWN and rounds == "interleaved":
            patch.setitem(policy.PRESETS, "default", policy.replace(policy.PRESETS["default"], tie=100.0))
        yield


def bench_for(mode, **kwargs):
    return None if mode == OWN else Bench(**kwargs)


def _upstream_source(owner, name):
    """The source of upstream's ``owner.<name>`` (under the plugin's wrapper, if any)."""
    attr = vars(owner)[name]
    return inspect.getsource(getattr(attr, "__wrapped__", attr))


#: Triton 3.2's ``autotune()`` accepts ``do_bench=`` but does not hand it to the ``Autotuner``.
_DECORATOR_DROPS_DO_BENCH = "do_bench=do_bench" not in _upstream_source(upstream_autotuner, "autotune")


def autotune(fn, configs, key, bench, **kwargs):
    """``triton.autotune(configs, key, do_bench=bench, **kwargs)(fn)``; where the decorator would
    drop ``do_bench``, the ``Autotuner`` is built directly, as such code has to."""
    if bench is None:
        return triton.autotune(configs=configs, key=key, **kwargs)(fn)
    if not _DECORATOR_DROPS_DO_BENCH:
        return triton.autotune(configs=configs, key=key, do_bench=bench, **kwargs)(fn)
    if "check_accuracy" in kwargs:
        pytest.skip("check_accuracy= needs the decorator, which drops do_bench= in this Triton")
    reset, restore = kwargs.pop("reset_to_zero", None), kwargs.pop("restore_value", None)
    return Autotuner(fn, fn.arg_names, configs, key, reset, restore, do_bench=bench, **kwargs)


def call(kernel, by, **named):
    """Launch with ``named`` (in parameter order) by position, by keyword (in reverse order:
    keyword order is free), or mixed (the first argument by position)."""
    if by == "position":
        return kernel[grid](*named.values())
    if by == "keyword":
        return kernel[grid](**dict(reversed(list(named.items()))))
    first, *rest = named
    return kernel[grid](named[first], **{k: named[k] for k in rest})


def collapse(events, period=2):
    """Drop each block of ``period`` events that repeats the block just before it (the timing
    runs of one candidate), so different numbers of timing runs compare equal."""
    kept, i = [], 0
    while i < len(events):
        block = events[i:i + period]
        if len(block) == period and kept[-period:] == block:
            i += period
        else:
            kept.append(events[i])
            i += 1
    return kept


def distinct(events, period=2):
    """Keep the first of each block of ``period`` events (one timing run of one candidate) and drop
    every later copy, adjacent or not: the plugin's own timing may come back to a candidate in
    interleaved rounds, which changes how often and in what order runs repeat, never what one run is."""
    kept, seen = [], set()
    whole = len(events) - len(events) % period
    for i in range(0, whole, period):
        block = tuple(events[i:i + period])
        if block not in seen:
            seen.add(block)
            kept.extend(block)
    return kept + list(events[whole:])


def raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the exception is the observation
        return exc
    return None


# -------------------------------------------------------------------------------------------
# 1. The tuning key
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY + ["mixed"])
def test_key_from_key_args_and_tensor_dtypes_tunes_once_per_key(by):
    n = 96
    x32, x16 = seq(n), seq(n, torch.float16)

    def scenario(mode):
        fn, launches = jit(_scale)
        bench = bench_for(mode)
        kernel = autotune(fn, blocks(32, 64), ["n", "alpha"], bench)
        out = torch.zeros(n, device=DEVICE)
        steps = []
        for x, alpha in ((x32, 2.0), (x32, 2.0), (x32, 3.0), (x16, 3.0), (x16, 3.0)):
            before = len(launches.seen)
            call(kernel, by, x=x, out=out, n=n, alpha=alpha)
            torch.testing.assert_close(out, x.float() * alpha)
            steps.append((len(kernel.cache), len(launches.seen) - before == 1))
        assert all(any(c is kernel.cache[k] for c in kernel.configs) for k in kernel.cache)
        return (list(kernel.cache), steps, {k: block_of(c) for k, c in kernel.cache.items()},
                None if bench is None else len(bench.calls))

    seen = observe(scenario)
    keys, steps, _, _ = seen[UPSTREAM]
    dtypes = ["torch.float32", "torch.float32"]
    if by == "keyword":  # dtypes follow the order the tensors were passed in: out before x here
        expected = [(n, 2.0, *dtypes), (n, 3.0, *dtypes), (n, 3.0, "torch.float32", "torch.float16")]
    else:
        expected = [(n, 2.0, *dtypes), (n, 3.0, *dtypes), (n, 3.0, "torch.float16", "torch.float32")]
    assert keys == expected
    # a repeated key is one launch, a new key tunes again
    assert steps == [(1, False), (1, True), (2, False), (3, False), (3, True)]
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][:2] == seen[UPSTREAM][:2]


# -------------------------------------------------------------------------------------------
# 2-3. reset_to_zero and restore_value
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
def test_reset_to_zero_leaves_one_launchs_result(by):
    n = 96
    x = seq(n) + 1

    def scenario(mode):
        fn, _ = jit(_accumulate)
        kernel = autotune(fn, blocks(32, 64), ["n"], bench_for(mode), reset_to_zero=["out"])
        out = torch.full((n,), 5.0, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n)  # tunes: zeroed before every timing run and after
        first = out.clone()
        call(kernel, by, x=x, out=out, n=n)  # cache hit: not zeroed
        hit = out.clone()
        call(kernel, by, x=x, out=out, n=64)  # a new key tunes again, zeroing all of out
        return (first, hit, out.clone())

    seen = observe(scenario)
    first, hit, retuned = seen[UPSTREAM]
    torch.testing.assert_close(first, x)
    torch.testing.assert_close(hit, 2 * x)
    torch.testing.assert_close(retuned, torch.cat([x[:64], torch.zeros(n - 64, device=DEVICE)]))
    for mode in (PLUGIN, OWN):
        for ours, theirs in zip(seen[mode], seen[UPSTREAM]):
            torch.testing.assert_close(ours, theirs, msg=f"{mode}")


@pytest.mark.parametrize("by", BY)
def test_restore_value_undoes_every_timing_run(by):
    n = 96

    def scenario(mode):
        fn, _ = jit(_increment)
        kernel = autotune(fn, blocks(32, 64), ["n"], bench_for(mode), restore_value=["x"])
        x = seq(n)
        call(kernel, by, x=x, n=n)
        first = x.clone()
        call(kernel, by, x=x, n=n)  # cache hit: nothing to restore
        return (first, x.clone())

    seen = observe(scenario)
    first, hit = seen[UPSTREAM]
    torch.testing.assert_close(first, seq(n) + 1)
    torch.testing.assert_close(hit, seq(n) + 2)
    for mode in (PLUGIN, OWN):
        for ours, theirs in zip(seen[mode], seen[UPSTREAM]):
            torch.testing.assert_close(ours, theirs, msg=f"{mode}")


# -------------------------------------------------------------------------------------------
# 4. The same inside the plugin's accuracy check (check_accuracy=True, only while active)
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("kind", ["reset_to_zero", "restore_value"])
def test_accuracy_check_resets_and_restores_tensors(kind, by):
    n = 96
    for mode in (PLUGIN, OWN):
        if kind == "reset_to_zero":
            fn, _ = jit(_accumulate)
            kernel = autotune(fn, blocks(32, 64, 128), ["n"], bench_for(mode), reset_to_zero=["out"],
                              check_accuracy=True)
            x, out = seq(n) + 1, torch.full((n,), 5.0, device=DEVICE)
            call(kernel, by, x=x, out=out, n=n)
            torch.testing.assert_close(out, x, msg=mode)
            torch.testing.assert_close(x, seq(n) + 1, msg=mode)
        else:
            fn, _ = jit(_increment)
            kernel = autotune(fn, blocks(32, 64, 128), ["n"], bench_for(mode), restore_value=["x"],
                              check_accuracy=True)
            x = seq(n)
            call(kernel, by, x=x, n=n)
            torch.testing.assert_close(x, seq(n) + 1, msg=mode)
        # no candidate was rejected as giving a wrong result
        assert all(math.isfinite(t[0]) for t in kernel.configs_timings.values()), (mode, kernel.configs_timings)


# -------------------------------------------------------------------------------------------
# 5. The autotuner's own pre_hook / post_hook
# -------------------------------------------------------------------------------------------


def _hook_recorder(events, tensors):
    def describe(nargs):
        return (tuple(nargs), nargs.get("BLOCK"), tuple(name for name, t in tensors.items() if nargs.get(name) is t))

    def pre_hook(*args, **kwargs):
        events.append(("pre", len(args), tuple(sorted(kwargs.items())), describe(args[0])))

    def post_hook(*args, **kwargs):
        exc = kwargs.get("exception", "missing")
        events.append(("post", len(args), tuple(sorted(kwargs)), type(exc).__name__, describe(args[0])))

    return pre_hook, post_hook


_FAILING = {  # a config that fails: how, and where upstream finds out
    "OutOfResources at launch": (lambda: OutOfResources(1 << 20, 1 << 16, "shared memory"), "launch"),
    "CompileTimeAssertionFailure at compile": (
        lambda: CompileTimeAssertionFailure(None, None, "static assertion failed"), "any"),
}


@pytest.mark.parametrize("rounds", ROUNDS)
@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("failure", sorted(_FAILING))
def test_user_pre_and_post_hooks_see_every_argument_and_the_reset_only_call(failure, by, rounds):
    make, where = _FAILING[failure]
    n = 96

    def scenario(mode):
        fn, launches = jit(_accumulate, fail={16: make}, fail_at=where)
        x, out = seq(n), torch.zeros(n, device=DEVICE)
        events = []
        pre_hook, post_hook = _hook_recorder(events, {"x": x, "out": out})
        bench = bench_for(mode, times={16: 0.5, 32: 2.0, 64: 1.0}, launches=launches)
        kernel = autotune(fn, blocks(16, 32, 64), ["n"], bench, pre_hook=pre_hook, post_hook=post_hook)
        call(kernel, by, x=x, out=out, n=n)
        tuned = list(events)
        call(kernel, by, x=x, out=out, n=n)  # a cache hit calls neither hook
        return (tuned, events[len(tuned):], block_of(kernel.best_config))

    seen = observe(scenario, rounds=rounds)
    tuned, hit, best = seen[UPSTREAM]
    assert hit == [] and best == 64
    keys = tuned[0][3][0]
    passed = ("x", "out", "n") if by == "position" else ("n", "out", "x")
    names = (("x", "out", "n", "grid", "warmup") if by == "position" else ("grid", "warmup", *passed))
    assert keys == names + ("BLOCK", "num_warps", "num_ctas", "num_stages")
    # the failing candidate: its post_hook gets the exception; the last call is pre_hook(..., reset_only=True)
    assert [e[0] for e in collapse(tuned)] == ["pre", "post"] * 3 + ["pre"]
    assert tuned[1][3] == failure.split()[0]
    assert all(e[3] == "NoneType" for e in tuned[2:-1] if e[0] == "post")
    assert all(e[1:3] == (1, ()) for e in tuned[:-1] if e[0] == "pre")
    assert all(e[1:3] == (1, ("exception",)) for e in tuned if e[0] == "post")
    assert tuned[-1][:3] == ("pre", 1, (("reset_only", True),)) and tuned[-1][3][1] == 64
    assert seen[PLUGIN] == seen[UPSTREAM]
    own_tuned, own_hit, own_best = seen[OWN]  # its own timing may pick another config
    assert distinct(own_tuned[:-1]) == distinct(tuned[:-1])
    assert own_tuned[-1][:3] == tuned[-1][:3] and own_tuned[-1][3][1] == own_best
    failing = tuned[:2]  # timed once, never again
    assert [own_tuned[i:i + 2] for i in range(0, len(own_tuned) - 1, 2)].count(failing) == 1
    assert own_hit == hit


# -------------------------------------------------------------------------------------------
# 6. Config(pre_hook=...)
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rounds", ROUNDS)
@pytest.mark.parametrize("by", BY)
def test_config_pre_hook_runs_before_every_launch_of_its_config(by, rounds):
    n = 96

    def scenario(mode):
        events = []
        fn, _ = jit(_scale, log=events)
        x, out = seq(n), torch.zeros(n, device=DEVICE)

        def config_hook(nargs):
            events.append(("config", tuple(nargs), nargs["BLOCK"], nargs["x"] is x, nargs["out"] is out))

        def pre_hook(nargs, reset_only=False):
            events.append(("pre", nargs["BLOCK"], reset_only))

        configs = blocks(32, 64, pre_hook=config_hook)
        kernel = autotune(fn, configs, ["n"], bench_for(mode), pre_hook=pre_hook)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        tuned = list(events)
        call(kernel, by, x=x, out=out, n=n, alpha=3.0)  # cache hit
        torch.testing.assert_close(out, 3 * x)
        return (launch_events(tuned), launch_events(events[len(tuned):]))

    seen = observe(scenario, rounds=rounds)
    tuned, hit = seen[UPSTREAM]
    names = ("x", "out", "n", "alpha", "grid", "warmup") if by == "position" else (
        "grid", "warmup", "alpha", "n", "out", "x")
    full = names + ("BLOCK", "num_warps", "num_ctas", "num_stages")
    # tuning: the config's hook, then the autotuner's, before each run; after: reset_only, then the
    # launch with the pick (its config hook only); a cache hit: the config hook only
    assert collapse(tuned, 3) == [("config", full, 32, True, True), ("pre", 32, False), ("launch", 32),
                                  ("config", full, 64, True, True), ("pre", 64, False), ("launch", 64),
                                  ("pre", 64, True), ("config", full, 64, True, True), ("launch", 64)]
    assert hit == [("config", full, 64, True, True), ("launch", 64)]
    assert seen[PLUGIN] == seen[UPSTREAM]
    own_tuned, own_hit = seen[OWN]
    timing = len(own_tuned) - 3
    assert distinct(own_tuned[:timing], 3) == collapse(tuned, 3)[:6]
    assert [e[0] for e in own_tuned[timing:]] == ["pre", "config", "launch"]
    assert own_tuned[timing][2] is True and own_tuned[timing][1] == own_tuned[-1][1]
    assert [e[0] for e in own_hit] == ["config", "launch"]


@pytest.mark.parametrize("by", BY)
def test_config_pre_hook_changes_reach_the_compile_and_the_launch(by):
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        pytest.skip("no host-side TensorDescriptor in this Triton")
    n = 256
    x = seq(n)

    def set_block_shape(nargs):  # a TMA descriptor's block shape follows the config
        nargs["desc"].block_shape = [nargs["BLOCK"]]

    def scenario(mode):
        fn, launches = jit(_described_copy, names=lambda named: (list(named["desc"].block_shape), named["BLOCK"]))
        kernel = autotune(fn, blocks(64, 128, pre_hook=set_block_shape), ["n"], bench_for(mode))
        desc = TensorDescriptor(x, [n], [1], [16])  # the block shape is set by the config's hook
        out = torch.zeros(n, device=DEVICE)
        if by == "position":
            kernel[grid](desc, out, n)
        else:
            kernel[grid](out=out, n=n, desc=desc)
        torch.testing.assert_close(out, 2 * x)
        # every compile and launch saw the block shape its config's hook set
        shapes = launches.compiled + launches.seen
        assert all(shape == [block] for shape, block in shapes), (mode, shapes)
        return sorted({block for _, block in shapes})

    seen = observe(scenario)
    assert seen[PLUGIN] == seen[UPSTREAM] == seen[OWN] == [64, 128]


@pytest.mark.parametrize("by", BY)
def test_config_pre_hook_replacing_a_dict_entry_does_not_change_the_launch(by):
    n = 64
    x = seq(n)

    def replace(nargs):
        nargs["alpha"] = 100.0
        nargs["out"] = torch.empty(0)

    def scenario(mode):
        fn, _ = jit(_scale)
        kernel = autotune(fn, blocks(32, 64, pre_hook=replace), ["n"], bench_for(mode))
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        return out.clone()

    seen = observe(scenario)
    torch.testing.assert_close(seen[UPSTREAM], 2 * x)
    torch.testing.assert_close(seen[PLUGIN], seen[UPSTREAM])
    torch.testing.assert_close(seen[OWN], seen[UPSTREAM])


# -------------------------------------------------------------------------------------------
# 7. prune_configs_by
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
def test_early_config_prune_gets_configs_positional_nargs_and_launch_kwargs(by):
    n = 96
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale)
        pruned = []

        def early_config_prune(configs, named_args, **kwargs):
            pruned.append(([block_of(c) for c in configs], tuple(named_args), tuple(kwargs),
                           named_args.get("x") is x or kwargs.get("x") is x))
            return [c for c in configs if block_of(c) != 32]

        bench = bench_for(mode, times=(3.0, 1.0, 2.0))
        kernel = autotune(fn, blocks(16, 32, 64, 128), ["n"], bench,
                          prune_configs_by={"early_config_prune": early_config_prune})
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)  # cache hit: no pruning
        return (pruned, sorted(set(launches.blocks)), sorted(block_of(c) for c in kernel.configs_timings),
                None if bench is None else block_of(kernel.best_config))

    seen = observe(scenario)
    pruned, launched, timed, best = seen[UPSTREAM]
    if by == "position":  # named_args: the positional arguments only; kwargs: the rest of the launch
        assert pruned == [([16, 32, 64, 128], ("x", "out", "n", "alpha"), ("grid", "warmup"), True)]
    else:
        assert pruned == [([16, 32, 64, 128], (), ("grid", "warmup", "alpha", "n", "out", "x"), True)]
    assert launched == timed == [16, 64, 128] and best == 64
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][:3] == seen[UPSTREAM][:3]


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("top_k", [2, 0.5, 3, 0.75])
def test_perf_model_and_top_k(top_k, by):
    n = 96
    x = seq(n)
    estimate = {16: 4.0, 32: 1.0, 64: 3.0, 128: 2.0}

    def scenario(mode):
        fn, launches = jit(_scale)
        modelled = []

        def perf_model(**kwargs):
            modelled.append((tuple(kwargs), kwargs["BLOCK"]))
            return estimate[kwargs["BLOCK"]]

        bench = bench_for(mode, times=(2.0, 1.0, 3.0))
        kernel = autotune(fn, blocks(16, 32, 64, 128), ["n"], bench,
                          prune_configs_by={"perf_model": perf_model, "top_k": top_k})
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        return (modelled, sorted(block_of(c) for c in kernel.configs_timings), sorted(set(launches.blocks)),
                None if bench is None else block_of(kernel.best_config))

    seen = observe(scenario)
    modelled, timed, launched, _ = seen[UPSTREAM]
    names = ("x", "out", "n", "alpha", "grid", "warmup") if by == "position" else (
        "grid", "warmup", "alpha", "n", "out", "x")
    assert modelled == [(names + ("BLOCK", "num_warps", "num_ctas", "num_stages"), b) for b in (16, 32, 64, 128)]
    keep = top_k if isinstance(top_k, int) else int(4 * top_k)  # a float is a fraction of the configs
    assert timed == launched == sorted(sorted(estimate, key=estimate.get)[:keep])
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][:3] == seen[UPSTREAM][:3]


def _twelve():
    return [Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in (16, 32, 64) for w in (1, 2) for s in (1, 2)]


def _cost(**kwargs):  # a perf_model: the one upstream's top_k keeps depends only on the config
    return kwargs["BLOCK"] * 10 + kwargs["num_warps"] * 3 + kwargs["num_stages"]


#: Pruning as real libraries write it: what ``prune_configs_by`` may hand the tuner.
PRUNINGS = {
    "duplicates": {"early_config_prune": lambda configs, nargs, **kw: configs + configs[:5]},
    "equal copies": {"early_config_prune": lambda configs, nargs, **kw: configs + [
        Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=c.num_stages) for c in configs[:5]]},
    "reordered": {"early_config_prune": lambda configs, nargs, **kw: configs[::-1]},
    "mutated": {"early_config_prune": lambda configs, nargs, **kw: [
        setattr(c, "num_stages", 1 + (nargs["n"] > 64)) or c for c in configs]},
    "top_k int": {"perf_model": _cost, "top_k": 7},
    "top_k fraction": {"perf_model": _cost, "top_k": 0.5},
    "pruned then top_k": {"early_config_prune": lambda configs, nargs, **kw: [c for c in configs if c.num_warps > 1],
                          "perf_model": _cost, "top_k": 4},
}


@pytest.mark.parametrize("path", ["whole", "search"])
@pytest.mark.parametrize("pruning", sorted(PRUNINGS))
def test_every_candidate_upstreams_pruning_keeps_is_timed_or_recorded_with_its_reason(pruning, path, monkeypatch,
                                                                                      recorder):
    """Stacked under ``triton.heuristics``, with ``restore_value``, over two keys (the second one
    warm-started from the first) and, with ``path="search"``, a search that screens only a few:
    ``configs_timings`` names exactly the configs upstream's does, and each the plugin did not
    time is there as infinity with the reason in the record."""
    if path == "search":
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_WHOLE", "4")
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "4")

    def scenario(mode):
        fn, _ = jit(_scale_even)
        bench = bench_for(mode, times=(3.0, 1.0, 2.0, 5.0))
        inner = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(fn)
        kernel = autotune(inner, _twelve(), ["n"], bench, restore_value=["out"], prune_configs_by=PRUNINGS[pruning])
        seen = []
        for n in (64, 96):
            x, out = seq(n), torch.zeros(n, device=DEVICE)
            kernel[grid](x, out, n, 2.0)
            torch.testing.assert_close(out, 2 * x)
            seen.append({str(c): t for c, t in kernel.configs_timings.items()})
        return seen

    before = len(recorder.records)
    seen = observe(scenario)
    for mode in (PLUGIN, OWN):
        for key, (theirs, ours) in enumerate(zip(seen[UPSTREAM], seen[mode])):
            assert sorted(ours) == sorted(theirs), (mode, key)
    assert seen[PLUGIN] == seen[UPSTREAM]  # a kernel's own do_bench times every one, as upstream
    own = recorder.records[before:][-2:]  # the own-timing mode's two tunings
    for record in own:  # (by identity: a config mutated by the next key's pruning hashes anew)
        reasons = {id(c): r for c, r in record.failures.items()}
        for config, timing in record.timings.items():
            assert math.isfinite(timing[0]) or reasons.get(id(config)), (str(config), list(reasons.values()))


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("how", ["early_config_prune", "perf_model"])
def test_a_single_survivor_of_pruning_is_not_benchmarked(how, by):
    n = 96
    x = seq(n)
    if how == "early_config_prune":
        prune = {"early_config_prune": lambda configs, named_args, **kwargs: [configs[1]]}
    else:
        prune = {"perf_model": lambda **kwargs: 0 if kwargs["BLOCK"] == 32 else 1, "top_k": 1}

    def scenario(mode):
        fn, launches = jit(_scale)
        bench = bench_for(mode)
        kernel = autotune(fn, blocks(16, 32, 64), ["n"], bench, prune_configs_by=prune)
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        return (None if bench is None else len(bench.calls), launches.blocks, block_of(kernel.best_config),
                [block_of(c) for c in kernel.cache.values()], hasattr(kernel, "bench_time"),
                hasattr(kernel, "configs_timings"))

    seen = observe(scenario)
    calls, launched, best, cached, has_time, has_timings = seen[UPSTREAM]
    assert best == 32 and cached == [32]
    untimed = (0, [32], 32, [32], False, False)
    if "len(pruned_configs) == 1" in _upstream_source(Autotuner, "run"):  # 3.9: no timing at all
        assert seen[UPSTREAM] == untimed
    else:  # earlier releases time the lone survivor (a fixed waste); the plugin follows 3.9 everywhere
        assert calls == 1 and launched == [32] * 3 and has_time and has_timings
    assert seen[PLUGIN] == untimed
    assert seen[OWN][1:] == untimed[1:]


def test_early_config_prune_returning_nothing_raises_like_upstream():
    n = 64
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale)
        kernel = autotune(fn, blocks(32, 64), ["n"], bench_for(mode),
                          prune_configs_by={"early_config_prune": lambda configs, named_args, **kw: []})
        out = torch.zeros(n, device=DEVICE)
        exc = raised(lambda: kernel[grid](x, out, n, 2.0))
        return (type(exc), str(exc), launches.seen, dict(kernel.cache))

    seen = observe(scenario)
    if AutotunerError is not None:  # 3.6+: upstream's own clear error
        assert seen[UPSTREAM][0] is AutotunerError
        assert "No valid autotuner configs after pruning" in seen[UPSTREAM][1]
        assert seen[PLUGIN] == seen[OWN] == seen[UPSTREAM]
    else:  # older releases fail in min() on the empty timings: a ValueError, which the plugin words clearly
        assert seen[UPSTREAM][0] is ValueError
        assert seen[PLUGIN][0] is seen[OWN][0] is ValueError


def test_a_top_k_that_keeps_no_config_fails_or_works_as_upstream_and_names_top_k():
    # int(2 * 0.3) == 0: newer releases keep one config, older ones end with nothing to pick from.
    n = 64
    x = seq(n)

    def scenario(mode):
        fn, _ = jit(_scale)
        kernel = autotune(fn, blocks(32, 64), ["n"], bench_for(mode),
                          prune_configs_by={"perf_model": lambda **kw: kw["BLOCK"], "top_k": 0.3})
        out = torch.zeros(n, device=DEVICE)
        exc = raised(lambda: kernel[grid](x, out, n, 2.0))
        return (None, "", out.tolist()) if exc is None else (type(exc), str(exc), None)

    seen = observe(scenario)
    for mode in (PLUGIN, OWN):
        assert seen[mode][0] is seen[UPSTREAM][0], (mode, seen[mode])
        assert seen[mode][2] == seen[UPSTREAM][2]
        if seen[mode][0] is not None:
            assert "top_k=0.3 keeps no config of 2" in seen[mode][1]


# -------------------------------------------------------------------------------------------
# 8. A kernel's own do_bench
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("returns", ["list", "bare float"])
def test_kernels_own_do_bench_times_each_config_once(returns, by):
    n = 96
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale)
        bench = Bench(times=(2.0, 1.0, 3.0), runs=1, bare_float=returns == "bare float")
        kernel = autotune(fn, blocks(16, 32, 64), ["n"], bench)
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        timings = [(block_of(c), t) for c, t in kernel.configs_timings.items()]
        return (bench.calls, launches.blocks, timings, block_of(kernel.best_config))

    seen = observe(scenario, (UPSTREAM, PLUGIN))
    calls, launched, timings, best = seen[UPSTREAM]
    assert calls == [(1, {"quantiles": QUANTILES})] * 3
    assert launched == [16, 32, 64, 32]
    expected = [2.0, 1.0, 3.0] if returns == "bare float" else [[2.0] * 3, [1.0] * 3, [3.0] * 3]
    assert timings == list(zip([16, 32, 64], expected)) and best == 32
    # configs_timings holds exactly what do_bench returned
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert [type(t) for _, t in seen[PLUGIN][2]] == [type(t) for _, t in timings]


# -------------------------------------------------------------------------------------------
# 9. warmup= / rep= / use_cuda_graph=
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option", [{"warmup": 1}, {"rep": 1}, {"use_cuda_graph": True}], ids=str)
def test_deprecated_timing_options_are_accepted(option):
    (name,) = option
    if name not in _INIT or name not in inspect.signature(upstream_autotuner.autotune).parameters:
        pytest.skip(f"this Triton's Autotuner has no {name}=")
    if name == "use_cuda_graph" and DEVICE != "cpu" and not torch.cuda.is_available():
        pytest.skip("CUDA graphs need CUDA")
    n = 96
    x = seq(n)
    fn, _ = jit(_scale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = triton.autotune(configs=blocks(32, 64), key=["n"], **option)(fn)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)  # as upstream warns
    out = torch.zeros(n, device=DEVICE)
    kernel[grid](x, out, n, 2.0)
    torch.testing.assert_close(out, 2 * x)
    assert len(kernel.cache) == 1


# -------------------------------------------------------------------------------------------
# 10. cache_results= and TRITON_CACHE_AUTOTUNING=1
# -------------------------------------------------------------------------------------------

_DISK_CACHE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import torch, triton, triton.language as tl
    import triton_dist_plugin as tdp

    ROOT, OPTIONS = sys.argv[1], json.loads(sys.argv[2])
    DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

    @triton.jit
    def copy(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    def one(mode):
        os.environ["TRITON_CACHE_DIR"] = os.path.join(ROOT, mode)
        calls = []

        def bench(fn, quantiles):
            calls.append(quantiles)
            fn()
            return [float(len(calls))] * 3

        if mode == "upstream":
            tdp.deactivate()
        try:
            return tune(bench, calls)
        except Exception as exc:
            return {"raised": type(exc).__name__}
        finally:
            if mode == "upstream":
                tdp.activate()

    def tune(bench, calls):
        configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
        kernel = triton.autotune(configs=configs, key=["n"], do_bench=bench, **OPTIONS)(copy)
        x = torch.arange(96, dtype=torch.float32, device=DEVICE)
        out = torch.zeros_like(x)
        kernel[lambda m: (triton.cdiv(96, m["BLOCK"]),)](x, out, 96)
        files = sorted(p.name for p in Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.autotune.json"))
        return {"cache_results": bool(getattr(kernel, "cache_results", False)), "bench_calls": len(calls),
                "keys": [list(k) for k in kernel.cache], "best": kernel.best_config.kwargs, "files": files,
                "timings": sorted(t[0] for t in getattr(kernel, "configs_timings", {}).values()),
                "correct": bool(torch.equal(out, x))}

    print("RESULT " + json.dumps({mode: one(mode) for mode in ("upstream", "plugin")}))
    """
)


@pytest.mark.parametrize("how", ["cache_results=True", "TRITON_CACHE_AUTOTUNING=1"])
def test_disk_cache_of_tuning_results_across_processes(how, tmp_path):
    if "cache_results" not in _INIT:
        pytest.skip("this Triton has no autotuning disk cache")
    script = tmp_path / "tune_twice.py"
    script.write_text(_DISK_CACHE_SCRIPT)
    options = {"cache_results": True} if how.startswith("cache_results") else {}
    env = {"TRITON_CACHE_AUTOTUNING": "1" if "TRITON_CACHE_AUTOTUNING" in how else None}
    runs = []
    for _ in range(2):  # a second fresh process, the same cache directory
        code = (f"import sys, runpy; sys.argv = ['x', {str(tmp_path)!r}, {json.dumps(options)!r}]; "
                f"runpy.run_path({str(script)!r}, run_name='__main__')")
        result = run_python(code, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        line = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        runs.append(json.loads(line[len("RESULT "):]))
    first, second = runs
    if "raised" in first["upstream"]:
        # 3.4 and 3.5 keep cache_results=True under the interpreter, where check_disk_cache finds
        # no JITFunction to key on and fails; the plugin may do the same or tune
        assert INTERPRET and options and first["upstream"] == second["upstream"]
        for run in runs:
            assert run["plugin"] == run["upstream"] or run["plugin"]["correct"], run
        return
    for run in runs:
        assert run["plugin"] == run["upstream"], run
        assert run["upstream"]["correct"]
    if first["upstream"]["cache_results"]:  # the second process reads the first one's timings
        assert first["upstream"]["bench_calls"] == 2 and len(first["upstream"]["files"]) == 1
        assert second["upstream"]["bench_calls"] == 0 and second["upstream"]["best"] == {"BLOCK": 32}
    else:  # 3.6+ turns the disk cache off under the interpreter: each process tunes again
        assert INTERPRET
        assert first["upstream"]["files"] == second["upstream"]["files"] == []
        assert first["upstream"]["bench_calls"] == second["upstream"]["bench_calls"] == 2


# -------------------------------------------------------------------------------------------
# 11. knobs.autotuning.listener
# -------------------------------------------------------------------------------------------


@pytest.mark.skipif(_AUTOTUNING_KNOBS is None or not hasattr(_AUTOTUNING_KNOBS, "listener"),
                    reason="no autotuning listener knob in this Triton")
@pytest.mark.parametrize("by", BY)
def test_autotuning_listener_is_called_once_per_tuning_with_upstreams_arguments(by):
    n = 96
    x = seq(n)

    def scenario(mode):
        fn, _ = jit(_scale)
        heard = []
        _AUTOTUNING_KNOBS.listener = lambda *args, **kwargs: heard.append((args, kwargs))
        try:
            kernel = autotune(fn, blocks(32, 64), ["n"], bench_for(mode))
            single = autotune(fn, blocks(32), ["n"], bench_for(mode))
            pruned = autotune(fn, blocks(32, 64), ["n"], bench_for(mode),
                              prune_configs_by={"early_config_prune": lambda c, named, **kw: c[:1]})
            out = torch.zeros(n, device=DEVICE)
            exc = raised(lambda: call(kernel, by, x=x, out=out, n=n, alpha=2.0))
            if exc is not None:
                return exc
            call(kernel, by, x=x, out=out, n=n, alpha=2.0)  # cache hit: not heard
            call(single, by, x=x, out=out, n=n, alpha=2.0)  # nothing tuned
            call(pruned, by, x=x, out=out, n=n, alpha=2.0)  # one survivor: nothing tuned
            call(kernel, by, x=x, out=out, n=64, alpha=2.0)  # a new key is heard
        finally:
            _AUTOTUNING_KNOBS.listener = None
        assert len(heard) == 2, (mode, heard)
        for (args, kwargs), key in zip(heard, kernel.cache):
            assert args == ()
            assert set(kwargs) == {"fn", "key", "best_config", "configs_timings", "duration", "cache_hit"}
            assert kwargs["fn"] is fn  # the innermost kernel
            assert kwargs["key"] == key and kwargs["best_config"] is kernel.cache[key]
            assert isinstance(kwargs["configs_timings"], dict) and len(kwargs["configs_timings"]) == 2
            assert kwargs["cache_hit"] is False
            assert isinstance(kwargs["duration"], float) and kwargs["duration"] >= 0
        assert heard[-1][1]["configs_timings"] is kernel.configs_timings
        assert heard[-1][1]["duration"] == kernel.bench_time
        return [(kw["key"], block_of(kw["best_config"])) for _, kw in heard]

    seen = observe(scenario)
    if isinstance(seen[UPSTREAM], Exception):
        # Upstream looks for a JITFunction under the tuner and finds none under the interpreter
        # (an InterpretedFunction), so its listener cannot run there; the plugin hands it that kernel.
        assert INTERPRET and isinstance(seen[UPSTREAM], AttributeError)
    else:
        assert seen[PLUGIN] == seen[UPSTREAM]
    assert [k for k, _ in seen[OWN]] == [k for k, _ in seen[PLUGIN]]


# -------------------------------------------------------------------------------------------
# 12. What reaches the kernel's run(): config.all_kwargs(), unchanged
# -------------------------------------------------------------------------------------------


class RecordingKernel:
    """Stands in for a kernel: records what every run() receives."""

    arg_names = ["x", "n"]

    def __init__(self):
        self.runs: list = []
        self.fn = self._source

    @staticmethod
    def _source(x, n):
        return None

    def run(self, *args, **kwargs):
        self.runs.append((len(args), dict(kwargs)))
        return "launched"


def _all_kwargs_configs():
    extra = {"ir_override": "first.ttir"} if "ir_override" in _CONFIG else {}
    return [Config({"BLOCK": 16, "FLAG": True}, num_warps=2, num_stages=1, maxnreg=64, **extra),
            Config({"BLOCK": 32}, num_warps=8, num_ctas=2)]


@pytest.mark.parametrize("by", BY)
def test_run_receives_config_all_kwargs_unchanged(by):
    x = torch.zeros(4, device=DEVICE)
    launch = {"grid": (1,), "warmup": False}
    args, named = ((x, 4), {}) if by == "position" else ((x,), {"n": 4})

    def scenario(mode):
        inner = RecordingKernel()
        kwargs = {} if bench_for(mode) is None else {"do_bench": Bench(runs=1)}
        tuner = Autotuner(inner, inner.arg_names, _all_kwargs_configs(), ["n"], None, None, **kwargs)
        return tuner.run(*args, **launch, **named), inner.runs

    seen = observe(scenario)
    result, runs = seen[UPSTREAM]
    assert result == "launched"
    configs = _all_kwargs_configs()
    for count, received in runs:
        assert count == len(args)
        assert any(received == {**launch, **named, **c.all_kwargs()} for c in configs), received
    assert runs[-1][1] == {**launch, **named, **configs[1].all_kwargs()}  # times 2.0 then 1.0
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][0] == result
    assert {json.dumps(r, sort_keys=True, default=str) for r in seen[OWN][1]} == {
        json.dumps(r, sort_keys=True, default=str) for r in runs}


@pytest.mark.skipif(not INTERPRET or "ir_override" not in _CONFIG, reason="an interpreter and Config(ir_override=)")
@pytest.mark.parametrize("by", BY)
def test_ir_override_is_passed_through_and_ignored_by_the_interpreter(by):
    n = 64
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale)
        configs = [Config({"BLOCK": 32}, ir_override="missing.ttir"), Config({"BLOCK": 64})]
        kernel = autotune(fn, configs, ["n"], bench_for(mode))
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        return (sorted(set(launches.blocks)), list(kernel.cache))

    seen = observe(scenario)
    assert seen[PLUGIN] == seen[OWN] == seen[UPSTREAM]


_NO_INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import json, os
    import torch, triton
    from triton.runtime.autotuner import Autotuner
    assert os.environ.get("TRITON_INTERPRET") is None

    class Kernel:
        arg_names = ["x", "n"]

        def __init__(self):
            self.runs = []
            self.fn = lambda x, n: None

        def run(self, *args, **kwargs):
            self.runs.append(sorted(kwargs))

    def bench(fn, quantiles):
        fn()
        return [1.0 + len(inner.runs)] * 3

    inner = Kernel()
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    tuner = Autotuner(inner, inner.arg_names, configs, ["n"], None, None, do_bench=bench)
    tuner.run(torch.zeros(4), 4, grid=(1,), warmup=False)
    print("RESULT " + json.dumps({"runs": inner.runs, "best": tuner.best_config.kwargs,
                                  "keys": [list(k) for k in tuner.cache]}))
    """
)


def test_tuning_with_own_do_bench_needs_no_gpu_driver(tmp_path):
    script = tmp_path / "no_driver.py"
    script.write_text(_NO_INTERPRETER_SCRIPT)
    code = f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    seen = {}
    for mode, disable in ((UPSTREAM, "1"), (PLUGIN, None)):
        prelude = "" if disable else "import triton_dist_plugin\n"
        result = run_python(prelude + code, env={"TRITON_INTERPRET": None, "TRITON_DIST_PLUGIN_DISABLE": disable})
        assert result.returncode == 0, (mode, result.stderr[-3000:])
        line = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        seen[mode] = json.loads(line[len("RESULT "):])
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[UPSTREAM]["best"] == {"BLOCK": 16}


# -------------------------------------------------------------------------------------------
# 13. A single config
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
def test_single_config_is_launched_without_tuning(by):
    n = 96
    x = seq(n) + 1

    def scenario(mode):
        fn, launches = jit(_accumulate)
        hooked = []
        configs = [Config({"BLOCK": 32}, num_warps=2, pre_hook=lambda nargs: hooked.append(tuple(nargs)))]
        bench = bench_for(mode)
        kernel = autotune(fn, configs, ["n"], bench, reset_to_zero=["out"])
        out = torch.full((n,), 5.0, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n)
        return (None if bench is None else len(bench.calls), launches.blocks, hooked, out.clone(),
                kernel.best_config is configs[0], dict(kernel.cache), hasattr(kernel, "bench_time"),
                hasattr(kernel, "configs_timings"), getattr(kernel, "nargs", "missing"))

    seen = observe(scenario)
    calls, launched, hooked, out, is_best, cache, has_time, has_timings, nargs = seen[UPSTREAM]
    assert (calls, launched, is_best, cache, has_time, has_timings, nargs) == (0, [32], True, {}, False, False, None)
    assert len(hooked) == 1 and "BLOCK" in hooked[0]
    torch.testing.assert_close(out, x + 5)  # no tuning: reset_to_zero never runs
    for mode in (PLUGIN, OWN):
        ours = seen[mode]
        torch.testing.assert_close(ours[3], out)
        assert ours[1:3] + ours[4:] == seen[UPSTREAM][1:3] + seen[UPSTREAM][4:], mode
    assert seen[PLUGIN][0] == 0


# -------------------------------------------------------------------------------------------
# 14. Failing configs
# -------------------------------------------------------------------------------------------

_SKIPPED_FAILURES = {  # raised at the launch (a resource limit found at load) or at the compile too
    "OutOfResources": (lambda: OutOfResources(1 << 20, 1 << 16, "shared memory"), "launch"),
    "CompileTimeAssertionFailure": (lambda: CompileTimeAssertionFailure(None, None, "static assertion failed"), "any"),
    "PTXASError": ((lambda: PTXASError("ptxas fatal")) if PTXASError is not None else None, "any"),
}


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("error", sorted(_SKIPPED_FAILURES))
def test_a_config_failing_with_a_resource_or_compile_error_is_skipped(error, by):
    make, where = _SKIPPED_FAILURES[error]
    if make is None or error not in _upstream_source(Autotuner, "_bench"):
        pytest.skip(f"this Triton does not treat {error} as a failed config")
    n = 96
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale, fail={16: make}, fail_at=where)
        # the failing config would be fastest
        bench = bench_for(mode, times={16: 0.5, 32: 2.0, 64: 1.0}, launches=launches)
        kernel = autotune(fn, blocks(16, 32, 64), ["n"], bench)
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        torch.testing.assert_close(out, 2 * x)
        timings = {block_of(c): t for c, t in kernel.configs_timings.items()}
        return (timings[16], block_of(kernel.best_config), launches.blocks[-1],
                None if bench is None else timings)

    seen = observe(scenario)
    failed, best, last, _ = seen[UPSTREAM]
    assert failed == [math.inf] * 3 and best == last == 64
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][0] == failed and seen[OWN][1] == seen[OWN][2] in (32, 64)


@pytest.mark.parametrize("by", BY)
def test_static_assert_failure_skips_the_config_even_under_the_interpreter(by):
    # On a GPU tl.static_assert raises CompileTimeAssertionFailure, a failed config for upstream;
    # the interpreter raises InterpreterError instead, which upstream lets through. The plugin
    # skips the config in both cases.
    n = 96
    x = seq(n)

    def scenario(mode):
        fn = triton.jit(_small_blocks_only)
        kernel = autotune(fn, blocks(64, 32), ["n"], bench_for(mode, times=(0.5, 1.0)))
        out = torch.zeros(n, device=DEVICE)
        exc = raised(lambda: call(kernel, by, x=x, out=out, n=n))
        if exc is None:
            torch.testing.assert_close(out, x)
        return type(exc), None if exc else block_of(kernel.best_config)

    seen = observe(scenario)
    if INTERPRET:
        assert seen[UPSTREAM] == (InterpreterError, None)
    else:
        assert seen[UPSTREAM] == (type(None), 32)
    assert seen[PLUGIN] == seen[OWN] == (type(None), 32)


def _value_error():
    return ValueError("bad argument for this kernel")


_LET_THROUGH = {
    "ValueError in launch": ({"*": _value_error}, None),
    "TypeError in launch": ({"*": lambda: TypeError("unsupported operand")}, None),
    "OutOfResources then ValueError": ({16: lambda: OutOfResources(1 << 20, 1 << 16, "shared memory"),
                                        32: _value_error}, None),
    "RuntimeError from do_bench": ({}, lambda: RuntimeError("timer broke")),
}


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("case", sorted(_LET_THROUGH) + ["static_assert everywhere"])
def test_when_no_config_works_the_error_upstream_lets_through_is_raised(case, by):
    if case == "static_assert everywhere" and not INTERPRET:
        pytest.skip("on a GPU a static_assert is a failed config, which upstream does not let through")
    n = 96
    x = seq(n)
    fail, bench_error = _LET_THROUGH.get(case, ({}, None))

    def scenario(mode):
        if case == "static_assert everywhere":
            fn, launches = jit(_small_blocks_only)
            configs = blocks(64, 128)
        else:
            fn, launches = jit(_scale, fail=fail)
            configs = blocks(16, 32)
        bench = None if mode == OWN else Bench(runs=1, error=bench_error)
        kernel = autotune(fn, configs, ["n"], bench)
        out = torch.zeros(n, device=DEVICE)
        named = {"x": x, "out": out, "n": n} if case == "static_assert everywhere" else {
            "x": x, "out": out, "n": n, "alpha": 2.0}
        exc = raised(lambda: call(kernel, by, **named))
        originals = launches.raised + (bench.raised if bench is not None else [])
        return (type(exc), str(exc).splitlines()[0] if str(exc) else "", any(exc is e for e in originals),
                dict(kernel.cache))

    seen = observe(scenario, MODES if bench_error is None else (UPSTREAM, PLUGIN))
    kind, message, original, cache = seen[UPSTREAM]
    expected = {"static_assert everywhere": InterpreterError, "TypeError in launch": TypeError,
                "RuntimeError from do_bench": RuntimeError}.get(case, ValueError)
    assert kind is expected and cache == {}
    assert original or case == "static_assert everywhere"
    for mode in (PLUGIN, OWN):
        if mode in seen:
            assert seen[mode][0] is kind, (mode, seen[mode])
            assert seen[mode][1] == message and seen[mode][2:] == (original, cache), (mode, seen[mode])


def test_every_config_out_of_resources_keeps_the_first_and_its_launch_raises_as_upstream():
    # Upstream times every config as infinity, keeps the first anyway, and its launch raises
    # OutOfResources: code that catches it (to fall back to a smaller launch) must see it.
    n = 64
    x = seq(n)

    def scenario(mode):
        fn, launches = jit(_scale, fail={"*": lambda: OutOfResources(1 << 20, 1 << 16, "shared memory")})
        configs = blocks(16, 32)
        kernel = autotune(fn, configs, ["n"], bench_for(mode, runs=1))
        out = torch.zeros(n, device=DEVICE)
        first = raised(lambda: kernel[grid](x, out, n, 2.0))
        again = raised(lambda: kernel[grid](x, out, n, 2.0))  # the key stays picked: no second tuning
        return (type(first), str(first).splitlines()[0], type(again), list(kernel.cache.values()) == configs[:1],
                len(launches.raised))

    seen = observe(scenario)
    assert seen[UPSTREAM][0] is OutOfResources and seen[UPSTREAM][3]
    for mode in (PLUGIN, OWN):
        assert seen[mode][:4] == seen[UPSTREAM][:4], (mode, seen[mode])


# -------------------------------------------------------------------------------------------
# 15. Autotuner subclasses
# -------------------------------------------------------------------------------------------


class OwnLoopTuner(Autotuner):
    """Replaces run(): prunes and benchmarks each config itself through prune_configs/_bench."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        named = {**self.nargs, **kwargs}
        key = tuple(named[k] for k in self.keys)
        if key not in self.cache:
            configs = self.prune_configs(kwargs)
            self.bench_results = {c: self._bench(*args, config=c, **kwargs) for c in configs}
            self.cache[key] = min(self.bench_results, key=self.bench_results.get)
            self.configs_timings = self.bench_results
            self.pre_hook({**self.nargs, **kwargs, **self.cache[key].all_kwargs()}, reset_only=True)
        config = self.best_config = self.cache[key]
        result = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return result


class CountingTuner(Autotuner):
    """Wraps run() and defers to it."""

    launches = 0

    def run(self, *args, **kwargs):
        type(self).launches += 1
        return super().run(*args, **kwargs)


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("subclass", [OwnLoopTuner, CountingTuner], ids=lambda c: c.__name__)
def test_autotuner_subclasses_keep_reset_restore_and_timings(subclass, by):
    n = 96

    def scenario(mode):
        fn, launches = jit(_bump)
        configs = blocks(16, 32, 64)
        bench = bench_for(mode, times=(2.0, 1.0, 3.0))
        extra = {} if bench is None else {"do_bench": bench}
        tuner = subclass(fn, fn.arg_names, configs, ["n"], ["out"], ["x"], **extra)
        x, out = seq(n), torch.full((n,), 7.0, device=DEVICE)
        call(tuner, by, x=x, out=out, n=n)
        results = getattr(tuner, "bench_results", tuner.configs_timings)
        shapes = [(type(t).__name__, len(t), all(isinstance(v, float) for v in t)) for t in results.values()]
        return (x.clone(), out.clone(), shapes, sorted(set(launches.blocks)),
                None if bench is None else (block_of(tuner.best_config), list(results.values())))

    seen = observe(scenario)
    x, out, shapes, launched, picked = seen[UPSTREAM]
    torch.testing.assert_close(x, seq(n) + 1)  # restored after every timing run, then launched once
    torch.testing.assert_close(out, seq(n) + 1)  # zeroed, then launched once
    assert shapes == [("list", 3, True)] * 3 and launched == [16, 32, 64]
    assert picked == (32, [[2.0] * 3, [1.0] * 3, [3.0] * 3])
    for mode in (PLUGIN, OWN):
        torch.testing.assert_close(seen[mode][0], x, msg=mode)
        torch.testing.assert_close(seen[mode][1], out, msg=mode)
        assert seen[mode][2:4] == (shapes, launched), mode
    assert seen[PLUGIN][4] == picked


# -------------------------------------------------------------------------------------------
# 16. Attributes after tuning
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
def test_attributes_after_tuning_have_upstreams_types(by):
    n = 96
    x = seq(n)

    def scenario(mode):
        fn, _ = jit(_scale)
        during = []
        holder = {}
        bench = bench_for(mode, probe=lambda: during.append(holder["kernel"].nargs))
        kernel = holder["kernel"] = autotune(fn, blocks(32, 64), ["n"], bench)
        out = torch.zeros(n, device=DEVICE)
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        assert kernel.nargs is None
        assert any(kernel.best_config is c for c in kernel.configs)
        assert [id(c) for c in kernel.configs_timings] == [id(c) for c in kernel.configs]
        for timing in kernel.configs_timings.values():
            assert isinstance(timing, list) and len(timing) == 3 and all(isinstance(t, float) for t in timing)
        assert isinstance(kernel.bench_time, float) and kernel.bench_time >= 0
        ((key, config),) = kernel.cache.items()
        assert isinstance(key, tuple) and config is kernel.best_config
        call(kernel, by, x=x, out=out, n=n, alpha=2.0)
        assert kernel.nargs is None and kernel.best_config is config
        return ([None if d is None else {k: v is x or v for k, v in d.items() if k != "out"}
                 for d in during], key)

    seen = observe(scenario)
    during, key = seen[UPSTREAM]
    positional = {"x": True, "n": n, "alpha": 2.0} if by == "position" else {}
    assert during == [positional, positional]  # nargs: the positional arguments, while tuning
    assert seen[PLUGIN] == seen[UPSTREAM]
    assert seen[OWN][1] == key


# -------------------------------------------------------------------------------------------
# 17. Heuristics stacked with autotune
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("order", ["autotune over heuristics", "heuristics over autotune"])
def test_heuristics_stacked_with_autotune(order, by):

    def scenario(mode):
        fn, launches = jit(_scale_even, names=("BLOCK", "EVEN"))
        bench = bench_for(mode)
        if order == "autotune over heuristics":
            inner = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(fn)
            kernel = autotune(inner, blocks(32, 64), ["n"], bench)
        else:
            inner = autotune(fn, blocks(32, 64), ["n"], bench)
            kernel = triton.heuristics({"EVEN": lambda a: a["n"] % 64 == 0})(inner)
        results = []
        for n in (128, 96, 128):
            x = seq(n)
            out = torch.zeros(n, device=DEVICE)
            call(kernel, by, x=x, out=out, n=n, alpha=2.0)
            torch.testing.assert_close(out, 2 * x)
            results.append(out.clone())
        tuner = kernel if order == "autotune over heuristics" else inner
        return (results, list(tuner.cache), sorted(set(launches.seen)))

    seen = observe(scenario)
    for mode in (PLUGIN, OWN):
        for ours, theirs in zip(seen[mode][0], seen[UPSTREAM][0]):
            torch.testing.assert_close(ours, theirs)
        assert seen[mode][1:] == seen[UPSTREAM][1:], mode


# -------------------------------------------------------------------------------------------
# 18. The plugin imported after a kernel was decorated
# -------------------------------------------------------------------------------------------

_IMPORT_ORDER_SCRIPT = textwrap.dedent(
    """
    import json, os
    import torch, triton, triton.language as tl

    DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

    def make():
        @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def double(x, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)
        return double

    before = make()
    import triton_dist_plugin
    after = make()

    def launch(kernel, by):
        x = torch.arange(96, dtype=torch.float32, device=DEVICE) + 1
        out = torch.full_like(x, 5.0)
        grid = lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)
        if by == "position":
            kernel[grid](x, out, 96)
        else:
            kernel[grid](n=96, out=out, x=x)
        return {"out": out.tolist(), "keys": [list(k) for k in kernel.cache], "timed": len(kernel.configs_timings)}

    print("RESULT " + json.dumps({name: {by: launch(k, by) for by in ("position", "keyword")}
                                  for name, k in (("before", before), ("after", after))}))
    """
)


def test_kernels_decorated_before_and_after_the_import_behave_alike(tmp_path):
    if not _compat.LAZY_BENCH and INTERPRET:
        pytest.skip("Triton < 3.4 asks for a driver when decorating, before any plugin can step in")
    script = tmp_path / "import_order.py"
    script.write_text(_IMPORT_ORDER_SCRIPT)
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result.returncode == 0, result.stderr[-3000:]
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    seen = json.loads(line[len("RESULT "):])
    assert seen["before"] == seen["after"]
    for by in BY:
        assert seen["after"][by]["out"] == [2.0 * (i + 1) for i in range(96)]
        assert seen["after"][by]["timed"] == 2


def test_an_empty_pruning_names_what_emptied_it():
    # Releases before 3.9 let a fractional top_k round down to zero; the error then says so.
    from triton_dist_plugin.patched import subclass

    fn, _ = jit(_scale)
    by_top_k = autotune(fn, blocks(32, 64), ["n"], None,
                        prune_configs_by={"perf_model": lambda **kw: kw["BLOCK"], "top_k": 0.3})
    by_prune = autotune(fn, blocks(32, 64), ["n"], None,
                        prune_configs_by={"early_config_prune": lambda configs, named_args, **kw: []})
    assert subclass._emptied_by(by_top_k) == "top_k=0.3 keeps no config of 2"
    assert subclass._emptied_by(by_prune) == "early_config_prune returned none"
