"""The accuracy check's invariant, under every path that chooses candidates.

``check_accuracy=True``: the reference is the kernel author's first config that works (the
next in the author's order when one raises, or writes NaN or Inf where the next working one has
finite values); the pick's output always agrees with it, whichever candidates a search, the
cost model, a warm start or a subclass's own loop runs first, and whatever their times. Real
kernels under the interpreter; hypothesis draws the spaces (which candidates are wrong and how,
in which positions), the times (so a wrong candidate is often the fastest) and the cost model's
ranking (so the author's first is often ranked last and never screened by the search).
"""

import builtins
import math
import warnings

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triton.compiler.errors import CompileTimeAssertionFailure
from triton.runtime.errors import InterpreterError

from triton_dist_plugin import _compat, hookimpl
from triton_dist_plugin.autotuner import contextual_autotune
from triton_dist_plugin.patched import accuracy

RIGHT, NAN, INF, LITTLE, LOT, RAISES, WITHIN, ALLNAN = range(8)
FLAWS = {RIGHT: "right", NAN: "NaN", INF: "Inf", LITTLE: "off by 1%", LOT: "off by 100", RAISES: "raises",
         WITHIN: "off within the tolerance", ALLNAN: "NaN everywhere"}
N = 48


@triton.jit
def _graded(x, out, n, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
    tl.static_assert(FLAW != 5, "a broken candidate")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask, other=0.0) * 2.0 + 1.0
    if FLAW == 1:
        v = tl.where(offs == 3, float("nan"), v)
    if FLAW == 2:
        v = tl.where(offs == 3, float("inf"), v)
    if FLAW == 3:
        v = v * 1.01
    if FLAW == 4:
        v = v + 100.0
    if FLAW == 6:
        v = v * 1.000001
    if FLAW == 7:
        v = v * float("nan")
    tl.store(out + offs, v, mask=mask)


def _output(flaw: int, x: torch.Tensor) -> torch.Tensor:
    """What a candidate with ``flaw`` writes (the test's own model of the kernel)."""
    v = x * 2.0 + 1.0
    if flaw in (NAN, INF):
        v = v.clone()
        v[3] = math.nan if flaw == NAN else math.inf
    return {LITTLE: v * 1.01, LOT: v + 100.0, WITHIN: v * 1.000001, ALLNAN: v * math.nan}.get(flaw, v)


def expected_reference(flaws: list, x: torch.Tensor):
    """The spec, written out: walking the author's order, the first candidate that works, unless
    it writes NaN or Inf where one of the next ``accuracy.WITNESSES`` working ones has a finite
    value (then it is wrong, and the walk goes on); None when none works."""
    working = [f for f in flaws if f != RAISES]
    for i, flaw in enumerate(working):
        out = _output(flaw, x)
        witnesses = [_output(w, x) for w in working[i + 1: i + 1 + accuracy.WITNESSES]]
        if any(bool((~torch.isfinite(out) & torch.isfinite(w)).any()) for w in witnesses):
            continue
        return out
    return None


def agrees(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return torch.allclose(out.double(), ref.double(), rtol=1e-3, atol=1e-3, equal_nan=True)


class Scripted:
    """Times each candidate by its ``ID`` (drawn), and ranks them as a cost model (drawn)."""

    def __init__(self):
        self.times: list = []
        self.scores = None

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        if request.config is None:  # a subclass's own self.do_bench(call): no config to tell; timed for real
            return None
        request.call()  # it runs: a wrong candidate raises here as it would
        return self.times[request.config.kwargs["ID"]]

    @hookimpl(tryfirst=True)
    def tdp_rank_candidates(self, request, candidates):
        if self.scores is None:
            return None
        return [self.scores[c.kwargs["ID"]] for c in candidates]


def _launchable(kernel, config: triton.Config) -> dict:
    """The config's keywords as a subclass's own loop passes them (the interpreter takes no compile
    options Triton 3.2's Config carries)."""
    return {k: v for k, v in config.all_kwargs().items()
            if k in kernel.fn.arg_names or k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}


class LibTunerLike(_compat.Autotuner):
    """FlagGems' shape: its own ``run`` prunes, then times each survivor through ``_bench``."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple({**self.nargs, **kwargs}[k] for k in self.keys)
        if key not in self.cache:
            pruned = self.prune_configs(kwargs)
            timings = {c: self._bench(*args, config=c, **kwargs) for c in pruned}
            self.cache[key] = builtins.min(timings, key=timings.get)
            self.configs_timings = timings
        self.best_config = self.cache[key]
        return self.fn.run(*args, **kwargs, **_launchable(self, self.best_config))


class BatchBenchLike(LibTunerLike):
    """Triton-Ascend's newer ``AutoTilingTuner`` shape: ``_batch_bench`` runs and times every
    candidate itself, through ``self.do_bench``."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple({**self.nargs, **kwargs}[k] for k in self.keys)
        if key not in self.cache:
            timings = self._batch_bench(*args, configs=self.prune_configs(kwargs), **kwargs)
            self.cache[key] = builtins.min(timings, key=timings.get)
            self.configs_timings = timings
        self.best_config = self.cache[key]
        return self.fn.run(*args, **kwargs, **_launchable(self, self.best_config))

    def _batch_bench(self, *args, configs, **kwargs):
        def call(config):
            return lambda: self.fn.run(*args, **kwargs, **_launchable(self, config))

        timings = {}
        for config in configs:
            try:
                timings[config] = self.do_bench(call(config), quantiles=(0.5, 0.2, 0.8))
            except Exception:  # its own loop times a broken candidate as infinity
                timings[config] = [math.inf] * 3
        return timings


def _grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def _tune(path: str, configs: list, x: torch.Tensor, out: torch.Tensor):
    """Tune and launch along ``path``; what the launch wrote is in ``out``."""
    if path in ("libtuner", "batch_bench"):
        cls = LibTunerLike if path == "libtuner" else BatchBenchLike
        kernel = cls(_graded, _graded.arg_names, configs, ["n"], None, None)
        kernel.tdp_check_accuracy = True
        kernel[_grid](x, out, N)
        return kernel
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)
    if path == "contextual":
        @contextual_autotune(n_repeat=1, n_warmup=0)
        def step(x, out):
            kernel[_grid](x, out, N)

        step(x, out)
        return kernel
    if path == "warm":  # a nearby key first: the one checked is then warm-started from its ranking
        other = torch.zeros(N - 8, device=DEVICE)
        kernel[lambda m: (triton.cdiv(N - 8, m["BLOCK"]),)](x[: N - 8], other, N - 8)
    kernel[_grid](x, out, N)
    return kernel


#: The settings each path runs with (the search tests' knobs: a budget of 2 screens 2 candidates).
PATHS = {
    "exhaustive": {"TRITON_DIST_AUTOTUNE_SEARCH": "exhaustive"},
    "halving": {},
    "guided": {"TRITON_DIST_AUTOTUNE_SEARCH_WHOLE": "2", "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET": "2"},
    "search": {"TRITON_DIST_AUTOTUNE_SEARCH_WHOLE": "2", "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET": "2",
               "TRITON_DIST_AUTOTUNE_MODEL": "0"},
    "optuna": {"TRITON_DIST_AUTOTUNE_SEARCH": "optuna", "TRITON_DIST_AUTOTUNE_SEARCH_WHOLE": "2",
               "TRITON_DIST_AUTOTUNE_SEARCH_BUDGET": "3"},
    "warm": {"TRITON_DIST_AUTOTUNE_SEARCH_BUDGET": "3"},
    "isolated": {"TRITON_DIST_AUTOTUNE_ISOLATE": "1"},
    "libtuner": {},
    "batch_bench": {},
    "contextual": {},
}
#: Paths that start processes or run the whole function per candidate get fewer examples.
EXAMPLES = {"isolated": 3, "contextual": 5}

space = st.lists(st.tuples(st.sampled_from([8, 16, 32]), st.sampled_from(sorted(FLAWS))), min_size=2, max_size=6)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_pick_always_agrees_with_the_reference(path, monkeypatch, plugins, tmp_path):
    monkeypatch.chdir(tmp_path)  # the contextual tuner logs to ./.autotune_logs
    for name, value in PATHS[path].items():
        monkeypatch.setenv(name, value)
    scripted = Scripted()
    plugins(scripted)

    @settings(max_examples=EXAMPLES.get(path, 12), deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(cands=space, data=st.data())
    def check(cands, data):
        n = len(cands)
        scripted.times = data.draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n), "times")
        scripted.scores = data.draw(st.none() | st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n), "ranking")
        configs = [triton.Config({"BLOCK": b, "FLAW": f, "ID": i}) for i, (b, f) in enumerate(cands)]
        x = torch.linspace(-1, 1, N, device=DEVICE)
        out = torch.zeros(N, device=DEVICE)
        reference = expected_reference([f for _, f in cands], x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the majority warning has its own test
            if reference is None:  # every candidate raises: an error, never a pick
                with pytest.raises((RuntimeError, InterpreterError, CompileTimeAssertionFailure)):
                    _tune(path, configs, x, out)
                return
            kernel = _tune(path, configs, x, out)
        flaw = kernel.best_config.kwargs["FLAW"]
        assert agrees(out, reference), (path, [FLAWS[f] for _, f in cands], FLAWS[flaw])
        assert flaw != RAISES
        torch.testing.assert_close(x, torch.linspace(-1, 1, N, device=DEVICE))  # the input as it was

    check()


def _space(*flaws, block=16):
    return [triton.Config({"BLOCK": block, "FLAW": f, "ID": i}) for i, f in enumerate(flaws)]


def test_the_authors_first_config_is_the_reference_even_when_the_search_never_runs_it(monkeypatch, plugins):
    """The cost model ranks the wrong candidates first and the search screens only two: the
    first config still runs, for the check alone, and the wrong ones are dropped."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_WHOLE", "2")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "2")
    scripted = Scripted()
    scripted.times = [5.0, 0.1, 0.2, 4.0]
    scripted.scores = [9.0, 0.1, 0.2, 8.0]
    plugins(scripted)
    configs = _space(RIGHT, LOT, NAN, RIGHT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    kernel[_grid](x, out, N)
    torch.testing.assert_close(out, _output(RIGHT, x))
    assert kernel.best_config.kwargs["FLAW"] == RIGHT
    for wrong in configs[1:3]:
        assert kernel.configs_timings[wrong] == [math.inf] * 3


@pytest.mark.parametrize("first", [NAN, INF, RAISES])
def test_a_first_config_that_raises_or_writes_nan_is_never_the_reference(first, recorder):
    configs = _space(first, RIGHT, LOT, RIGHT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    kernel[_grid](x, out, N)
    torch.testing.assert_close(out, _output(RIGHT, x))
    failures = recorder.records[-1].failures
    assert configs[0] in failures and configs[2] in failures and configs[1] not in failures
    if first != RAISES:
        assert "NaN or Inf" in failures[configs[0]] and "finite values" in failures[configs[0]]


def test_nan_every_candidate_writes_is_the_right_answer(recorder):
    """An input holding NaN: every candidate writes NaN there, so the first is still the reference."""
    configs = _space(RIGHT, LOT, RIGHT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    x[5] = math.nan
    kernel[_grid](x, out, N)
    assert agrees(out, _output(RIGHT, x)) and math.isnan(out[5])
    assert set(recorder.records[-1].failures) == {configs[1]}


def test_most_candidates_agreeing_against_the_reference_is_a_warning_naming_both():
    configs = _space(LOT, RIGHT, RIGHT, RIGHT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    with pytest.warns(RuntimeWarning, match=r"3 candidates agree with each other and not with the accuracy "
                                            r"check's reference .*FLAW: 4.* put a config you trust first") as told:
        kernel[_grid](x, out, N)
    (warned,) = [w for w in told if "agree with each other" in str(w.message)]  # (not an interpreter's own)
    assert "FLAW: 0" in str(warned.message) and warned.filename == __file__
    torch.testing.assert_close(out, _output(LOT, x))  # the author's first is trusted, as documented


def test_the_check_restores_the_arguments_between_steps_and_after():
    """Each candidate runs from the arguments as they were before tuning, also in a later step
    of a search, after timing runs changed them; and the check leaves them as it found them."""
    @triton.jit
    def bump(x, n, BLOCK: tl.constexpr, ID: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)

    configs = [triton.Config({"BLOCK": b, "ID": i}) for i, b in enumerate((8, 16, 32))]
    x = torch.zeros(N, device=DEVICE)
    seen = []

    def make_call(config, ran=None):
        def call():
            seen.append(float(x[0]))
            bump[lambda m: (triton.cdiv(N, m["BLOCK"]),)](x, N, **config.kwargs)
            if ran is not None:
                ran()
        return call

    gate = accuracy.Gate("bump", configs, make_call, {"x": x})
    assert gate.check(configs[:1], {}) == {}
    x += 10.0  # timing runs in between
    assert gate.check(configs[1:], {}) == {}
    assert seen == [0.0, 0.0, 0.0] and float(x[0]) == 10.0


def test_reference_order_follows_the_author_not_the_pruning():
    author = _space(RIGHT, LOT, NAN, RIGHT)
    pruned = [author[3], author[1], author[0]]  # a perf_model's order
    assert accuracy.reference_order(pruned, author) == [author[0], author[1], author[3]]
    rebuilt = [triton.Config(dict(c.kwargs)) for c in pruned]  # pruning that rebuilds configs
    # An equal config's place counts where configs compare by value (Triton 3.3+); before, as given.
    by_value = "__eq__" in vars(triton.Config)
    expected = [rebuilt[2], rebuilt[1], rebuilt[0]] if by_value else rebuilt
    assert accuracy.reference_order(rebuilt, author) == expected
    assert accuracy.reference_order(pruned, author, designated=author[1])[0] is author[1]


@triton.jit
def _wrong_when_large(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) * 2.0
    if BLOCK >= 32:
        v = tl.where(offs == 1, float("nan"), v)
    tl.store(out + offs, v, mask=mask)


def test_a_generated_space_is_checked_against_its_conservative_candidate(recorder):
    """``configs=[]``: the reference is the generator's designated candidate (the smallest tiles),
    however the generated list and the search order them."""
    kernel = triton.autotune(configs=[], key=["n"], check_accuracy=True)(_wrong_when_large)
    n = 256
    x, out = torch.linspace(-1, 1, n, device=DEVICE), torch.zeros(n, device=DEVICE)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, 2 * x)
    record = recorder.records[-1]
    large = [c for c in record.timings if c.kwargs["BLOCK"] >= 32]
    assert large and all("NaN or Inf" in record.failures[c] for c in large)


def test_a_generator_plugin_that_sets_request_reference_the_old_way_still_designates_it(plugins):
    """A ``tdp_generate_configs`` plugin written when the findings lived on the request sets
    ``request.reference``: it warns, lands in ``request.found``, and the check takes it as its
    reference, not the first config returned (the fastest, and wrong)."""
    configs, seen = _space(LOT, RIGHT, RIGHT), {}

    class Designates:
        @hookimpl
        def tdp_generate_configs(self, request):
            request.reference = configs[1]
            seen["found"] = request.found.reference
            return list(configs)

    scripted = Scripted()
    scripted.times = [0.1, 5.0, 6.0]
    plugins(scripted)
    plugins(Designates())
    kernel = triton.autotune(configs=[], key=["n"], check_accuracy=True)(_graded)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    with pytest.warns(DeprecationWarning, match=r"request\.found\.reference"):
        kernel[_grid](x, out, N)
    assert seen["found"] is configs[1]
    assert kernel.best_config.kwargs["FLAW"] == RIGHT and kernel.configs_timings[configs[0]] == [math.inf] * 3
    torch.testing.assert_close(out, x * 2 + 1)


# -- what a candidate wrote, wherever and however it wrote it ---------------------------------------


@triton.jit
def _in_place(x, n, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) * 2.0 + 1.0
    if FLAW == 4:
        v = v + 100.0
    tl.store(x + offs, v, mask=mask)


@pytest.mark.parametrize("tuner", ["autotune", "own run"])
def test_restore_value_does_not_hide_what_a_candidate_wrote(tuner, plugins):
    """``restore_value`` puts ``x`` back after every run: the check reads what the kernel wrote
    before that, so the wrong in-place candidate (the fastest) is still caught."""
    scripted = Scripted()
    scripted.times = [5.0, 0.1]
    plugins(scripted)
    configs = _space(RIGHT, LOT)
    if tuner == "autotune":
        kernel = triton.autotune(configs=configs, key=["n"], restore_value=["x"], check_accuracy=True)(_in_place)
    else:
        kernel = LibTunerLike(_in_place, _in_place.arg_names, configs, ["n"], None, ["x"])
        kernel.tdp_check_accuracy = True
    x = torch.linspace(-1, 1, N, device=DEVICE)
    expected = x * 2 + 1
    kernel[_grid](x, N)
    torch.testing.assert_close(x, expected)
    assert kernel.best_config.kwargs["FLAW"] == RIGHT and kernel.configs_timings[configs[1]] == [math.inf] * 3


@triton.jit
def _dequantize(q, out, n, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(q + offs, mask=mask).to(tl.float32) * 2.0
    if FLAW == 4:
        v = v + 100.0
    tl.store(out + offs, v, mask=mask)


def test_float8_arguments_are_checked(plugins):
    q = torch.linspace(-1, 1, N, device=DEVICE).to(torch.float8_e4m3fn)
    try:  # the kernel alone, untuned: Triton-Ascend's interpreter cannot load float8
        _dequantize[_grid](q, torch.zeros(N, device=DEVICE), N, BLOCK=16, FLAW=RIGHT, ID=0)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"this Triton cannot run a float8 kernel here: {str(exc)[:120]}")
    scripted = Scripted()
    scripted.times = [5.0, 0.1]
    plugins(scripted)
    configs = _space(RIGHT, LOT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_dequantize)
    out = torch.zeros(N, device=DEVICE)
    kernel[_grid](q, out, N)
    torch.testing.assert_close(out, q.float() * 2)
    assert kernel.best_config.kwargs["FLAW"] == RIGHT


@triton.jit
def _biased(x, bias, out, n, stride, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) + tl.load(bias + offs * stride, mask=mask)
    if FLAW == 4:
        v = v + 100.0
    tl.store(out + offs, v, mask=mask)


@pytest.mark.parametrize("inputs", ["broadcast", "requires grad"])
def test_inputs_the_check_must_not_write_are_left_alone(inputs, plugins):
    """A broadcast input (stride 0) and a leaf that requires grad: the check never writes them
    (nothing changed them), and still compares what the candidates wrote."""
    scripted = Scripted()
    scripted.times = [5.0, 0.1]
    plugins(scripted)
    configs = _space(RIGHT, LOT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_biased)
    x = torch.linspace(-1, 1, N, device=DEVICE)
    bias = torch.ones(1, device=DEVICE).expand(N) if inputs == "broadcast" else \
        torch.nn.Parameter(torch.ones(N, device=DEVICE))
    out = torch.zeros(N, device=DEVICE)
    kernel[_grid](x, bias, out, N, bias.stride(0))
    torch.testing.assert_close(out, x + 1)
    assert kernel.best_config.kwargs["FLAW"] == RIGHT


def test_a_read_only_input_is_not_copied_for_each_run():
    from triton_dist_plugin.patched.comparison import Arguments

    x, out = torch.ones(8), torch.zeros(8)
    arguments = Arguments({"x": x, "out": out, "n": 8})
    out += 1
    state = arguments.state()
    assert state["x"] is arguments.original["x"] and state["out"] is not arguments.original["out"]
    arguments.put()
    assert float(out.sum()) == 0.0


def test_outputs_written_through_tensor_descriptors_are_compared(plugins):
    descriptor = pytest.importorskip("triton.tools.tensor_descriptor")

    @triton.jit
    def scale_desc(x_desc, out_desc, n, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
        off = tl.program_id(0) * BLOCK
        v = x_desc.load([off]) * 2.0 + 1.0
        if FLAW == 4:
            v = v + 100.0
        out_desc.store([off], v)

    scripted = Scripted()
    scripted.times = [5.0, 0.1]
    plugins(scripted)
    configs = _space(RIGHT, LOT)
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(scale_desc)
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    make = descriptor.TensorDescriptor
    kernel[_grid](make(x, shape=[N], strides=[1], block_shape=[16]),
                  make(out, shape=[N], strides=[1], block_shape=[16]), N)
    torch.testing.assert_close(out, x * 2 + 1)
    assert kernel.best_config.kwargs["FLAW"] == RIGHT


# -- subclass loops that time candidates one at a time ----------------------------------------------


class OwnPrune(LibTunerLike):
    """A subclass with its own ``prune_configs`` (the batch is never used: it may drop some)."""

    def prune_configs(self, kwargs):
        return super().prune_configs(kwargs)


class Unpruned(LibTunerLike):
    """A loop that times configs it never pruned (a proposer's, say)."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = tuple({**self.nargs, **kwargs}[k] for k in self.keys)
        if key not in self.cache:
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.configs}
            self.cache[key] = builtins.min(timings, key=timings.get)
            self.configs_timings = timings
        self.best_config = self.cache[key]
        return self.fn.run(*args, **kwargs, **_launchable(self, self.best_config))


@pytest.mark.parametrize("loop", ["parallel compile off", "own prune_configs", "configs it did not prune"])
def test_a_subclass_loop_timing_candidates_one_at_a_time_is_checked_too(loop, plugins, monkeypatch):
    if loop == "parallel compile off":
        monkeypatch.setenv("TRITON_AUTOTUNE_PARALLEL_COMPILE", "0")
    cls = {"parallel compile off": LibTunerLike, "own prune_configs": OwnPrune, "configs it did not prune": Unpruned}
    scripted = Scripted()
    scripted.times = [5.0, 0.1, 0.2, 4.0]
    plugins(scripted)
    configs = _space(RIGHT, LOT, NAN, RIGHT)
    kernel = cls[loop](_graded, _graded.arg_names, configs, ["n"], None, None)
    kernel.tdp_check_accuracy = True
    x, out = torch.linspace(-1, 1, N, device=DEVICE), torch.zeros(N, device=DEVICE)
    kernel[_grid](x, out, N)
    torch.testing.assert_close(out, _output(RIGHT, x))
    assert [kernel.configs_timings[c] == [math.inf] * 3 for c in configs] == [False, True, True, False]
    assert "_tdp_loop_gate" not in kernel.__dict__  # let go once every candidate was checked


@pytest.mark.filterwarnings("ignore:_graded. 2 candidates agree")  # the two copies agree with each other
def test_contextual_tuning_drops_every_copy_of_a_wrong_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the contextual tuner logs to ./.autotune_logs
    n = 256
    configs = [triton.Config({"BLOCK": 8, "FLAW": RIGHT, "ID": 0}), triton.Config({"BLOCK": 256, "FLAW": LOT, "ID": 1}),
               triton.Config({"BLOCK": 256, "FLAW": LOT, "ID": 1})]  # the last: an equal copy of the wrong one
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_graded)

    @contextual_autotune(n_repeat=2, n_warmup=0)
    def step(x, out):
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)

    x, out = torch.linspace(-1, 1, n, device=DEVICE), torch.zeros(n, device=DEVICE)
    step(x, out)
    torch.testing.assert_close(out, _output(RIGHT, x))
    assert kernel.best_config is configs[0]
