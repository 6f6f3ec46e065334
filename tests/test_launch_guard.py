"""The launch guard tells the kernel of a call exactly as Triton's binder would.

The guard (``patched/launch_guard``) replaces Triton's binder on a tuned launch's hot path. Its
key must be at least as fine as Triton's specialisation: two calls with one key must get one
compiled kernel, or the fast path would launch a binary ``JITFunction.run`` would not. Here the
installed Triton's own binder (built for a CUDA target, which needs no driver) judges hypothesis'
arguments: CPU tensors of every dtype at every alignment, integers at every size class and edge,
``None``, floats, bools and constexpr values, over kernels with defaults, annotations and
``do_not_specialize``. The last test drives ``direct.Launcher`` itself: no GPU is on this machine, so
the driver and the compiled kernels' launch are stand-ins, while the binder, the cache key and the
kernel cache are Triton's own (``benchmarks/check_direct_launch.py`` runs the same cases on a GPU).
"""

import inspect
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triton_dist_plugin import _compat
from triton_dist_plugin.patched import direct, launch_guard

pytestmark = pytest.mark.skipif(_compat.TRITON_VERSION not in launch_guard.GUARDED_RELEASES,
                                reason="no launch guard on this Triton release")

SRC = '''
import triton.language as tl

def add(x, y, out, n, BLOCK: tl.constexpr):
    pass

def mixed(x, w, n, stride, eps, flag, ACT: tl.constexpr, BLOCK: tl.constexpr, HAS_W: tl.constexpr = True, k=1):
    pass

def annotated(x, n: tl.int32, m: tl.int64, scale: tl.float32, BLOCK: tl.constexpr):
    pass
'''


def _kernels(tmp_path_factory):
    """Real ``JITFunction``s (the interpreter makes ``InterpretedFunction``s, so build them directly)."""
    import importlib.util

    from triton.runtime.jit import JITFunction

    path = tmp_path_factory.mktemp("guard") / "guard_kernels.py"
    path.write_text(SRC)
    spec = importlib.util.spec_from_file_location("guard_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {
        "add": (JITFunction(module.add), 4, {"BLOCK": 128, "num_warps": 4}),
        "add_dns": (JITFunction(module.add, do_not_specialize=["n"], do_not_specialize_on_alignment=["x"]), 4,
                    {"BLOCK": 64, "num_warps": 2}),
        "mixed": (JITFunction(module.mixed), 7, {"BLOCK": 32, "num_warps": 4, "num_stages": 2}),
        "mixed_all": (JITFunction(module.mixed), 10, {"num_warps": 4}),
        "annotated": (JITFunction(module.annotated), 4, {"BLOCK": 16}),
    }


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _kernels(tmp_path_factory)


def _backend(name: str = "nvidia"):
    """A real compiler backend for a GPU target (making one needs no driver)."""
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32) if name == "nvidia" else GPUTarget("hip", "gfx942", 64)
    return backends[name].compiler(target)


def _binder(fn, backend=None):
    from triton.runtime.jit import create_function_from_signature

    return create_function_from_signature(fn.signature, fn.params, backend or _backend())


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64, torch.bool,
          torch.float64, torch.uint8]
EDGES = [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 1, 2**31, 2**31 + 16, -2**31, -2**31 - 1, 2**32, 2**63 - 1,
         2**63, 2**63 + 16, 2**64 - 1, 2**64, -2**63, -2**63 - 1]


def _tensor(draw):
    """A CPU tensor (or a module's Parameter) of any dtype whose pointer is 16-byte aligned or not
    (CPU storage starts aligned)."""
    t = torch.zeros(64, dtype=draw(st.sampled_from(DTYPES)))[draw(st.integers(0, 17)):]
    return torch.nn.Parameter(t, requires_grad=False) if draw(st.booleans()) else t


def _value(draw, kind):
    if kind == "tensor":
        return _tensor(draw)
    if kind == "int":
        return draw(st.one_of(st.sampled_from(EDGES), st.integers(-2**70, 2**70)))
    if kind == "float":
        return draw(st.floats(allow_nan=True))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "none":
        return None
    return draw(st.sampled_from([0, 1, True, False, 2, "relu", "gelu", None, torch.float16, 1.5]))


@st.composite
def calls(draw, fn, arity):
    """Argument kinds for the first ``arity`` parameters, where the positional ones end (the rest go
    by keyword, in a drawn order), and twelve calls of those kinds: ``(args, launch keywords)``."""
    kinds = []
    for param in fn.params[:arity]:
        kinds.append("constexpr" if param.is_constexpr else draw(st.sampled_from(["tensor", "int", "float", "bool",
                                                                                  "none"])))
    split = draw(st.integers(0, arity))
    names = draw(st.permutations([p.name for p in fn.params[split:arity]]))
    samples = []
    for _ in range(12):
        values = [_value(draw, kind) for kind in kinds]
        named = dict(zip([p.name for p in fn.params[:arity]], values))
        samples.append((tuple(values[:split]), {"grid": (1,), "warmup": False, **{n: named[n] for n in names}}))
    return kinds, samples


def plan_for(fn, meta: dict, samples: list):
    """The plan built from the first of ``samples`` (drawn by ``calls``), on the stand-in device."""
    args, kwargs = samples[0]
    plan, why = launch_guard.build(fn, meta, args, _backend(), kwargs, device_attr="is_cpu")
    assert plan is not None, why
    return plan


def _launch_values(bound: dict) -> tuple:
    return tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v for v in bound.values())


@pytest.mark.parametrize("name", ["add", "add_dns", "mixed", "mixed_all", "annotated"])
def test_one_guard_key_means_one_specialisation(kernels, name):
    fn, arity, meta = kernels[name]
    binder = _binder(fn)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(calls(fn, arity))
    def check(drawn):
        kinds, samples = drawn
        plan = plan_for(fn, meta, samples)
        assert plan.kinds == tuple(kinds)
        seen: dict = {}
        for args, kwargs in samples:
            found = plan.guard(args, kwargs)
            assert found is not None  # same kinds, on the (stand-in) device
            named = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
            try:
                bound, spec, options = binder(*args, **named, **meta)
            except OverflowError:  # Triton refuses it; its key is one no launch ever stores
                assert "u64" not in str(found[0]) and found[0].count(3) >= 1
                continue
            assert list(plan.bound(args, kwargs)) == list(bound)
            assert all(a is b for a, b in zip(plan.bound(args, kwargs).values(), bound.values()))
            assert found[1] == _launch_values(bound)
            assert seen.setdefault(found[0], tuple(spec)) == tuple(spec), (found[0], seen[found[0]], spec)

    check()


def test_the_guard_refuses_every_other_shape_of_call(kernels):
    fn, _, meta = kernels["add"]
    x, cuda, launch = torch.zeros(64), _backend(), {"grid": (1,), "warmup": False}

    def build(args, meta=meta, backend=cuda, device_attr="is_cpu", **named):
        return launch_guard.build(fn, meta, args, backend, {**launch, **named}, device_attr=device_attr)

    def guard(plan, args, **named):
        try:
            return plan.guard(args, {**launch, **named})
        except KeyError:  # another keyword than the plan's: the launcher takes this for a refusal
            return None

    plan, why = build((x, x, x, 8))
    assert plan is not None, why
    assert guard(plan, (x, x, x, 8)) is not None
    assert guard(plan, (x, x, x)) is None  # arity
    assert guard(plan, (x, x, x), n=8) is None  # a keyword where the plan has a positional argument
    assert guard(plan, (x, x, x, 8.0)) is None and guard(plan, (x, x, x, True)) is None  # kinds
    assert guard(plan, (x, x, None, 8)) is None
    assert guard(plan, (x, x, x.to("meta"), 8)) is None  # off the device

    class Sub(torch.Tensor):
        pass

    assert guard(plan, (x.as_subclass(Sub), x, x, 8)) is None
    param = torch.nn.Parameter(x)
    assert guard(plan, (param, x, x, 8)) is not None  # a Parameter is specialised as a tensor
    keyed, why = build((x, x), n=8, out=x)
    assert keyed is not None and keyed.names == ("out", "n"), why
    assert guard(keyed, (x, x), out=x, n=8) is not None and guard(keyed, (x, x), n=8, out=x) is not None
    assert guard(keyed, (x, x), out=x, n=8, BLOCK=4) is None and guard(keyed, (x, x), y=x, n=8) is None
    assert build((x, x, x, 8), device_attr=None)[0] is None  # not on CUDA: is_cuda is the default check
    assert build((x.as_subclass(Sub), x, x, 8))[0] is None
    assert "given twice" in build((x, x, x, 8, 128))[1]
    assert "given twice" in build((x, x, x, 8), BLOCK=128)[1]
    assert "not a parameter" in build((x, x, x), n=8, num_warps=4)[1]
    assert "missing" in build((x, x, x, 8), meta={})[1]
    assert build((x, x, x, (1, 2)))[0] is None  # a tuple argument
    # AMD's backend adds a buffer-ops fact (storage under 2 GiB) the key does not hold: no guard there.
    assert "backend" in build((x, x, x, 8), backend=_backend("amd"))[1]


def test_the_c_launch_follows_this_tritons_cuda_launcher():
    """What ``launcher_for`` calls in place of ``CudaLauncher.__call__`` is what that method calls."""
    mode = launch_guard._C_LAUNCH.get(_compat.TRITON_VERSION)
    if mode is None:
        pytest.skip("this release's launcher is always called through kernel.run")
    from triton.backends.nvidia.driver import CudaLauncher

    source = re.sub(r"\s+", " ", inspect.getsource(CudaLauncher.__call__))
    if mode == "per_kernel":
        expected = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
                    "self.launch_pdl, global_scratch, profile_scratch, *args)")
        assert "def __call__(self, gridX, gridY, gridZ, stream, function, *args)" in source
    else:
        expected = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
                    "self.launch_pdl, kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, "
                    "global_scratch, profile_scratch, self.arg_annotations, self.kernel_signature, kernel_args)")
    assert expected in source
    assert "kernel_args = args" in source or mode == "per_kernel"


class _Kernel:
    """Stands in for a compiled kernel (no GPU here): its launches are recorded, not run."""

    def __init__(self, key):
        self.key, self.function, self.packed_metadata, self.launches = key, id(key), (4, 1, 0), []

    def run(self, *launch):
        self.launches.append(launch)

    def launch_metadata(self, grid, stream, *values):
        return ("metadata", grid, stream)


def _standin(fn, monkeypatch):
    """``fn`` on a stand-in device 0: Triton's binder, cache key and kernel cache, a recorded launch."""
    import sys

    from triton import knobs
    from triton.runtime.jit import compute_cache_key

    class Active:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 7

    monkeypatch.setattr(sys.modules["triton.runtime.driver"], "driver", type("Driver", (), {"active": Active()})())
    monkeypatch.setattr(launch_guard, "DEVICE_ATTR", "is_cpu")
    backend = _backend()
    fn.device_caches[0] = ({}, {}, backend.target, backend, _binder(fn, backend))

    def run(*args, grid, warmup, **kwargs):  # JITFunction.run's sequence, the compile replaced by _Kernel
        caches = fn.device_caches[0]
        kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
        for name in direct._compilation_knobs():
            kwargs[name] = getattr(knobs.compilation, name)
        bound, spec, options = caches[-1](*args, **kwargs)
        key = compute_cache_key(caches[1], spec, options)
        kernel = caches[0].setdefault(key, _Kernel(key))
        grid = grid(bound) if callable(grid) else grid
        values = bound.values()
        enter = knobs.runtime.launch_enter_hook
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, 7, kernel.function,
                   kernel.packed_metadata, kernel.launch_metadata(grid, 7, *values), enter,
                   knobs.runtime.launch_exit_hook, *values)
        return kernel

    monkeypatch.setattr(fn, "run", run, raising=False)


def _same(a: tuple, b: tuple) -> bool:
    """Equal launch arguments: the same tensor objects, equal other values."""
    return len(a) == len(b) and all(x is y or (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor)
                                               and type(x) is type(y) and x == y) for x, y in zip(a, b))


def _step(fn, meta, launcher, call, grid, change):
    """One launch of ``call`` (positional arguments, kernel arguments by keyword) through
    ``launcher`` and the same through Triton's own ``run``: the same kernel, grid, stream and values
    (a tensor may come as its pointer where nobody listens to the launch)."""
    from triton import knobs

    args, named = call

    if change == "reset":  # Triton's kernel cache for the device made anew: every kernel compiles again
        fn.device_caches[0] = ({}, {}, *fn.device_caches[0][2:])
    seen: list = []
    chain = knobs.runtime.launch_exit_hook if change == "chain" and hasattr(knobs, "HookChain") else None
    with knobs.runtime.scope():
        knobs.runtime.debug = change == "debug"
        if change == "hook":
            knobs.runtime.launch_enter_hook = seen.append
        if chain is not None:
            chain.add(seen.append)
        try:
            expected = fn.run(*args, grid=grid, warmup=False, **named, **meta)
            want = expected.launches.pop()
            kernel = launcher(args, {"grid": grid, "warmup": False, **named})
        finally:
            if chain is not None:
                chain.remove(seen.append)
    assert kernel is expected
    got = kernel.launches.pop()
    assert got[:6] == want[:6]  # grid, stream, function, packed metadata
    if change in ("hook", "chain"):  # a listener sees Triton's metadata, hooks and values
        assert _same(got[6:], want[6:]) and seen == []
        return False
    # JITFunction.run itself (a new entry), or no metadata and no empty hook chain to call
    pointers = tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v for v in want[9:])
    if _same(got[6:], want[6:]):
        return False
    assert got[6:9] == (None, None, None) and (_same(got[9:], want[9:]) or _same(got[9:], pointers))
    return _same(got[9:], pointers) and not _same(got[9:], want[9:])


def test_the_launcher_launches_what_triton_would_on_every_path(kernels, monkeypatch):
    """Random sequences of calls, knob and hook changes: each launch is Triton's kernel, with
    Triton's grid and values, and the guard serves every repeated shape of call."""
    from triton.runtime.jit import JITFunction

    fn = JITFunction(kernels["add"][0].fn)
    meta = {"BLOCK": 128, "num_warps": 4}
    _standin(fn, monkeypatch)
    base = torch.zeros(256)
    # Mixes of kinds whose facts line up alike (a None or a float adds none, a tensor two): each plan
    # keeps its own entries, so none is served another's kernel. Then kernel arguments by keyword,
    # in any order, as libraries pass them.
    pool = [((base, base, base, 64), {}), ((base[1:], base, base, 64), {}), ((base, base, base[4:], 1), {}),
            ((base, base, base, 17), {}), ((base, None, base, 64), {}), ((None, base, base, 64), {}),
            ((base.half(), base.half(), base.half(), 2**33), {}), ((base, base, base, 64.0), {}),
            ((base, base, base, True), {}), ((base, base), {"out": base, "n": 64}),
            ((base,), {"n": 16, "out": base[4:], "y": base}), ((), {"x": base, "y": None, "out": base, "n": 1})]
    grids = [(3,), (2, 5), lambda meta_: (meta_["n"] // meta_["BLOCK"] + 1, meta_["out"].numel() % 7, 2)]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(pool) - 1), st.integers(0, 2),
                              st.sampled_from(["", "debug", "hook", "chain", "reset"])), min_size=1, max_size=24))
    def check(steps):
        launcher = direct.Launcher(fn, meta)
        for index, g, change in steps:
            _step(fn, meta, launcher, pool[index], grids[g], change)
        assert sum(len(plan.entries) for plan in launcher.plans) <= len(launcher.table)

    check()
    # Every shape of call is served by the guard once confirmed through the binder, under every
    # grid, up to MOST_PLANS mixes of kinds; the calls of the mixes after those take the binder.
    launcher = direct.Launcher(fn, meta)
    mixes: list = []
    for args, named in pool:
        mix = (len(args), frozenset(named), launch_guard.kinds_of(fn, args, named))
        mixes += [mix] if mix not in mixes else []
        for grid in grids:
            served = [_step(fn, meta, launcher, (args, named), grid, "") for _ in range(4)]
            assert served[-1] is (mixes.index(mix) < launch_guard.MOST_PLANS), (args, named, grid)
    assert len(launcher.plans) == launch_guard.MOST_PLANS


def test_a_kernel_is_learned_under_the_knobs_its_binder_read(kernels, monkeypatch):
    """A knob changed (by another thread) between the guard's key and the binder's launch: the kernel
    is kept under the knobs the binder read, never under the guard's."""
    from triton import knobs
    from triton.runtime.jit import JITFunction

    fn = JITFunction(kernels["add"][0].fn)
    meta = {"BLOCK": 128, "num_warps": 4}
    _standin(fn, monkeypatch)
    x = torch.zeros(64)
    args = (x, x, x, 64)
    launcher = direct.Launcher(fn, meta)
    launch = {"grid": (1,), "warmup": False}
    launcher(args, launch), launcher(args, launch)  # the binder's entry, then a plan
    bound = direct.Launcher._bound

    def racing(self, *a, **k):
        knobs.runtime.debug = True
        try:
            return bound(self, *a, **k)
        finally:
            knobs.runtime.debug = False

    with knobs.runtime.scope():
        monkeypatch.setattr(direct.Launcher, "_bound", racing)
        launcher(args, launch)  # the guard's key read debug off; the binder launched the debug kernel
        monkeypatch.setattr(direct.Launcher, "_bound", bound)
        assert launcher(args, launch) is fn.run(*args, grid=(1,), warmup=False, **meta)
