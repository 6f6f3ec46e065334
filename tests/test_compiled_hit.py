"""The compiled cache-hit path (``patched/_hit.c``) does what the Python path it mirrors does.

Built here with the machine's C compiler, as users' machines build it. Its guard must give the
generated guard's key and values for every call (hypothesis, over the kernels and kinds of
``test_launch_guard``); its launch must launch what ``direct.Launcher`` and Triton's own ``run``
launch on every path; and an ``Autotuner``'s ``Hit`` must launch, return and set ``best_config``
exactly as the Python closure it hands other calls to. No GPU is on this machine: the driver and the
compiled kernels' launch are stand-ins (``test_launch_guard._standin``), the rest is Triton's own.
"""

import os
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from test_launch_guard import _backend, _kernels, _same, _standin, _step, calls, plan_for

from triton_dist_plugin import _compat
from triton_dist_plugin.patched import compiled_hit, direct, launch_guard

pytestmark = [
    pytest.mark.skipif(_compat.TRITON_VERSION not in launch_guard.GUARDED_RELEASES,
                       reason="no launch guard on this Triton release"),
    pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler on this machine"),
]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _kernels(tmp_path_factory)


@pytest.fixture(scope="module")
def compiled():
    return compiled_hit._load()  # built into this test session's Triton cache (HOME is a temporary directory)


@pytest.mark.parametrize("name", ["add", "add_dns", "mixed", "mixed_all", "annotated"])
def test_the_compiled_guard_gives_the_generated_guards_key(kernels, compiled, name):
    fn, arity, meta = kernels[name]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(calls(fn, arity))
    def check(drawn):
        _, samples = drawn
        plan = plan_for(fn, meta, samples)
        for args, kwargs in samples:
            want, got = plan.guard(args, kwargs), compiled.guard(plan.program, args, kwargs)
            assert got is not None and len(got) == 2
            assert got[0] == want[0] and [type(v) for v in got[0]] == [type(v) for v in want[0]]
            assert _same(got[1], want[1])
        args, kwargs = samples[0]
        others = [((*args, 1), kwargs), (args, {**kwargs, "extra": 1}), (args, {"grid": (1,), "warmup": False})]
        others += [(args[:i] + (object(),) + args[i + 1:], kwargs) for i in range(len(args))]
        others += [(args, {**kwargs, name: object()}) for name in kwargs if name not in ("grid", "warmup")]
        for changed, named in others:
            try:
                refused = plan.guard(changed, named) is None
            except KeyError:  # another keyword than the plan's: the launcher takes this for a refusal
                refused = True
            if refused:
                assert compiled.guard(plan.program, changed, named) is None, (changed, named)

    check()


def test_the_compiled_guard_refuses_what_the_generated_one_refuses(kernels, compiled):
    fn, _, meta = kernels["add"]
    x = torch.zeros(64)
    plan, why = launch_guard.build(fn, meta, (x, x, x, 8), _backend(), device_attr="is_cpu")
    assert plan is not None, why

    class Sub(torch.Tensor):
        pass

    launch = {"grid": (1,), "warmup": False}
    for args in [(x, x, x), (x, x, x, 8.0), (x, x, x, True), (x, x, None, 8), (x, x, x.to("meta"), 8),
                 (x.as_subclass(Sub), x, x, 8), (x, x, x, 8, 9)]:
        assert plan.guard(args, launch) is None
        assert compiled.guard(plan.program, args, launch) is None, args
    assert compiled.guard(plan.program, (x, x, x, 8), {"grid": (1,)}) is None  # another number of keywords
    huge = compiled.guard(plan.program, (x, x, x[1:], 2**64 + 16), launch)
    assert huge == plan.guard((x, x, x[1:], 2**64 + 16), launch)
    assert huge[0][-3:] == (False, True, 3) and huge[0][5] is False  # the misaligned tensor


def test_the_compiled_launch_launches_what_triton_would_on_every_path(kernels, compiled, monkeypatch):
    """``test_launch_guard``'s random sequences, each call tried by the compiled launch first (kernel
    arguments positional or by keyword): it launches Triton's kernel, grid, stream and values, or
    hands the call back."""
    from hypothesis import strategies as st
    from triton.runtime.jit import JITFunction

    fn = JITFunction(kernels["add"][0].fn)
    meta = {"BLOCK": 128, "num_warps": 4}
    _standin(fn, monkeypatch)
    base = torch.zeros(256)
    pool = [((base, base, base, 64), {}), ((base[1:], base, base, 64), {}), ((base, base, base[4:], 1), {}),
            ((base, None, base, 64), {}), ((base.half(), base.half(), base.half(), 2**33), {}),
            ((base, base, base, 64.0), {}), ((base, base), {"out": base, "n": 64})]
    grids = [(3,), (2, 5), lambda meta_: (meta_["n"] // meta_["BLOCK"] + 1, meta_["out"].numel() % 7, 2)]
    served = []

    class Both:
        def __init__(self):
            self.launcher = direct.Launcher(fn, meta)

        def __call__(self, args, kwargs):
            done = compiled.launch(self.launcher, args, kwargs)
            served.append(done is not None)
            return done[0] if done is not None else self.launcher(args, kwargs)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(pool) - 1), st.integers(0, 2),
                              st.sampled_from(["", "debug", "hook", "chain", "reset"])), min_size=1, max_size=24))
    def check(steps):
        both = Both()
        for index, g, change in steps:
            _step(fn, meta, both, pool[index], grids[g], change)

    check()
    both, handed = Both(), []
    for args, named in pool:
        for grid in grids:
            handed += served
            served.clear()
            for _ in range(4):
                _step(fn, meta, both, (args, named), grid, "")
            # once the binder has confirmed the kernel and the guard learned it, C launches it
            assert served[-1] is True, (args, grid, served)
    assert not all(handed), "nothing was handed back: the test does not reach the Python path"


SRC = '''
import triton.language as tl

def scale(x, out, n, alpha, BLOCK: tl.constexpr):
    pass
'''


def _kernel_module(tmp_path, name: str, source: str, monkeypatch):
    """``source`` imported as the module ``name`` from a file (Triton reads a kernel's source from
    its file), then ``TRITON_INTERPRET=0``: what the direct launcher needs to serve the launches."""
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:  # imported under the interpreter's setting, as the rest of the session imports it (its import checks)
        import triton.experimental.gluon  # noqa: F401
    except ImportError:
        pass
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    return module


def test_a_tuned_kernels_hit_launches_as_its_python_path(tmp_path, compiled, monkeypatch):
    """An ``Autotuner``'s compiled ``run`` and the Python closure it hands other calls to, over the
    same calls: every launch, return value and ``best_config`` alike, across cache edits, a config
    gaining a ``pre_hook``, keyword calls, warmup, knob and hook changes."""

    import triton
    from triton import knobs
    from triton.runtime.jit import JITFunction

    from triton_dist_plugin.patched import kernel_state

    module = _kernel_module(tmp_path, "hit_kernels", SRC, monkeypatch)
    monkeypatch.setattr(compiled_hit, "_module", [compiled])
    x, h = torch.zeros(64), torch.zeros(64, dtype=torch.float16)
    grid = lambda m: (m["n"] // m["BLOCK"],)  # noqa: E731

    def tuner():
        fn = JITFunction(module.scale)
        _standin(fn, monkeypatch)
        configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (16, 32)]
        tuned = triton.autotune(configs=configs, key=["n"])(fn)
        for n, t in ((64, x), (32, x), (64, h)):
            tuned.cache[(n, str(t.dtype), str(t.dtype))] = configs[1]
        tuned[grid](x, x, 64, 1.0)
        return fn, tuned, configs

    def calls(fn, tuned, configs):
        seen = []

        def launch(*args, **named):
            kernel = tuned[named.pop("grid", grid)](*args, **named)
            seen.append((kernel.key, kernel.launches.pop() if kernel.launches else None, tuned.best_config))

        for _ in range(3):
            launch(x, x, 64, 1.0), launch(x[1:], x, 64, 2.0), launch(h, h, 64, 1.0), launch(x, x, 32, 1.0)
            launch(x, out=x, n=64, alpha=1.0), launch(x, x, 64, 1.0, grid=(2, 1))
        tuned.cache[(64, "torch.float32", "torch.float32")] = configs[0]  # upstream's cache edited
        launch(x, x, 64, 1.0), launch(x, x, 64, 1.0)
        with knobs.runtime.scope():
            knobs.runtime.debug = True
            launch(x, x, 64, 1.0), launch(x, x, 64, 1.0)
        with knobs.runtime.scope():
            knobs.runtime.launch_enter_hook = _listening
            launch(x, x, 64, 1.0)
        configs[0].pre_hook = _listening
        launch(x, x, 64, 1.0), launch(x, x, 32, 1.0)
        # each kernel's ``function`` is its own object's id (launch position 4): compared through its key
        return [(key, None if got is None else tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v
                                                     for i, v in enumerate(got) if i != 4), str(best))
                for key, got, best in seen]

    handed = []
    python_launch = direct.Launcher.__call__
    monkeypatch.setattr(direct.Launcher, "__call__", lambda self, *a: handed.append(1) or python_launch(self, *a))
    fn, tuned, configs = tuner()
    hit = tuned.__dict__["run"]
    assert type(hit).__name__ == "Hit" and launch_is_python(hit.slow)
    with_c, by_c = calls(fn, tuned, configs), len(handed)
    fn, tuned, configs = tuner()
    tuned.__dict__["run"] = tuned.__dict__["run"].slow
    handed.clear()
    assert with_c == calls(fn, tuned, configs)
    assert by_c <= len(handed) - 8, (by_c, len(handed))  # the repeated hits never reached Python
    assert tuned in kernel_state.fast_instances


def test_a_subclass_whose_run_calls_autotuners_launches_its_hits_as_upstream(tmp_path, monkeypatch):
    """A tuner class with its own ``run`` that calls ``Autotuner.run`` (fla's ``CachedAutotuner``)
    gets no fast closure; its hits take the config's direct launcher inside the wrapper, and launch,
    return and set ``best_config`` as the same calls through ``JITFunction.run`` do (the launcher
    off), across keyword calls, warmup, a cache edit and a config given a ``pre_hook``."""

    import triton
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    module = _kernel_module(tmp_path, "sub_kernels", SRC, monkeypatch)
    x = torch.zeros(64)
    grid = lambda m: (m["n"] // m["BLOCK"],)  # noqa: E731

    class Cached(Autotuner):
        def run(self, *args, **kwargs):
            self.seen = len(args)
            return super().run(*args, **kwargs)

    def launches(direct_launch: bool) -> tuple:
        fn = JITFunction(module.scale)
        _standin(fn, monkeypatch)
        configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (16, 32)]
        tuned = Cached(fn, fn.arg_names, configs, ["n"], None, None)
        tuned.cache[(64, "torch.float32", "torch.float32")] = configs[1]
        seen = []
        with monkeypatch.context() as patch:
            if not direct_launch:
                patch.setattr(direct, "usable", lambda _: False)

            def launch(*args, **named):
                kernel = tuned[named.pop("grid", grid)](*args, **named)
                seen.append((kernel.key, kernel.launches.pop() if kernel.launches else None, str(tuned.best_config)))

            for _ in range(4):
                launch(x, x, 64, 1.0), launch(x[1:], x, 64, 2.0), launch(x, out=x, n=64, alpha=1.0)
                launch(x, x, 64, 1.0, grid=(2, 1))
                # a compile option by keyword selects another binary, and the next call without it the first
                launch(x, x, 64, 1.0, enable_fp_fusion=False), launch(x, x, 64, 1.0, debug=True)
            tuned.run(x, x, 64, 1.0, grid=grid, warmup=True)
            tuned.cache[(64, "torch.float32", "torch.float32")] = configs[0]
            launch(x, x, 64, 1.0)
            configs[0].pre_hook = _listening
            launch(x, x, 64, 1.0)
        assert "run" not in tuned.__dict__ and tuned.seen == 4
        # the kernel's ``function`` (its object's id, launch position 4) is compared through its key;
        # Triton's metadata and empty hook chains (6 to 8) are left out where nobody listens, as the
        # launcher leaves them (``test_launch_guard._step``)
        return [(key, None if got is None else tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v
                                                     for i, v in enumerate(got) if i not in (4, 6, 7, 8)), best)
                for key, got, best in seen]

    served = []
    python_launch = direct.Launcher.__call__
    monkeypatch.setattr(direct.Launcher, "__call__", lambda self, *a: served.append(1) or python_launch(self, *a))
    with_launcher = launches(True)
    assert len(served) >= 16
    assert with_launcher == launches(False)


def _listening(_) -> None:
    """A launch hook or ``pre_hook`` (one object for both runs, so their launches compare equal)."""


def launch_is_python(run) -> bool:
    return getattr(run, "__qualname__", "").startswith("_fast_run")


def test_the_build_recovers_a_bad_cached_module_and_says_why_it_cannot_build(tmp_path, monkeypatch):
    """A cached module that does not load (cut short, another's) is built again in its place (each
    time in a process of its own, as a module once loaded stays mapped); with no compiler the
    Python path serves and ``why_not`` says why; TRITON_DIST_COMPILED_HIT=0 is obeyed."""
    import subprocess
    import sys

    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), "TRITON_INTERPRET": "0"}
    load = [sys.executable, "-c",
            "from triton_dist_plugin.patched import compiled_hit; print(compiled_hit._load().__file__)"]
    path = subprocess.run(load, env=env, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    with open(path, "r+b") as cached:
        cached.truncate(100)  # cut short
    again = subprocess.run(load, env=env, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    with open(again, "rb") as cached:
        assert again == path and cached.read(4) == b"\x7fELF" and os.path.getsize(again) > 100
    monkeypatch.setattr(compiled_hit, "_module", [])
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert compiled_hit.module() is None and "no-such-compiler" in compiled_hit.why_not
    monkeypatch.setattr(compiled_hit, "_module", [])
    monkeypatch.setenv("TRITON_DIST_COMPILED_HIT", "0")
    assert compiled_hit.module() is None and "TRITON_DIST_COMPILED_HIT=0" in compiled_hit.why_not
    assert not [p for p in (tmp_path / "empty").rglob("*") if p.is_file()]


def test_a_child_forked_while_the_build_holds_its_lock_can_build():
    """A user's fork during the build (the build holds the lock) leaves the child a free lock."""
    with compiled_hit._lock:
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if the lock is free here
            os._exit(0 if compiled_hit._lock.acquire(timeout=5) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


WIDE = 20  # parameters: a tuple of the launch's values this long escapes CPython's free lists


def _wide_tuner(tmp_path, monkeypatch, compiled, warm: int = 5):
    """A tuned stand-in kernel of ``WIDE`` parameters, its key tuned, its ``Hit`` launched ``warm`` times."""

    import triton
    from triton.runtime.jit import JITFunction

    names = ", ".join(f"a{i}" for i in range(WIDE - 2))
    module = _kernel_module(tmp_path, "wide_kernel",
                            f"import triton.language as tl\n\ndef wide({names}, n, BLOCK: tl.constexpr):\n    pass\n",
                            monkeypatch)
    monkeypatch.setattr(compiled_hit, "_module", [compiled])
    fn = JITFunction(module.wide)
    _standin(fn, monkeypatch)
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (16, 32)]
    tuned = triton.autotune(configs=configs, key=["n"])(fn)
    x = torch.zeros(64)
    args = (x,) * (WIDE - 2) + (64,)
    tuned.cache[(64,) + ("torch.float32",) * (WIDE - 2)] = configs[1]
    for _ in range(warm):
        tuned[(1,)](*args)
    assert type(tuned.__dict__["run"]).__name__ == "Hit"
    return tuned, args


def test_a_collection_during_a_hit_never_meets_a_half_built_tuple(tmp_path, compiled, monkeypatch):
    """A garbage collection may start at any allocation and run Python (``gc.callbacks``, as memory
    profilers install): whatever it finds of a hit's key and values is whole."""
    import gc

    tuned, args = _wide_tuner(tmp_path, monkeypatch, compiled)
    seen = []

    def look(phase, _info):
        if phase == "start":
            seen.append(sum(len([type(item) for item in o]) for o in gc.get_objects() if type(o) is tuple))

    threshold = gc.get_threshold()
    gc.callbacks.append(look)
    try:
        for t in range(1, 20):
            gc.set_threshold(t)
            for _ in range(20):
                tuned[(1,)](*args)
    finally:
        gc.callbacks.remove(look)
        gc.set_threshold(*threshold)
    assert seen  # collections ran during the hits


def test_keyword_names_of_a_str_subclass_take_the_python_path(tmp_path, compiled, monkeypatch):
    """A keyword's name that is a ``str`` subclass (its own hash) is looked up as a dict looks it up."""

    class Name(str):
        def __hash__(self):
            return 7

        __eq__ = str.__eq__

    for python in (False, True):  # from the first hit on, before and after the launcher learns the call
        tuned, args = _wide_tuner(tmp_path, monkeypatch, compiled, warm=1)
        run = tuned.__dict__["run"].slow if python else tuned.__dict__["run"]
        for _ in range(5):
            kernel = run(*args, **{Name("grid"): (2,), Name("warmup"): False})
            assert kernel.launches.pop()[:3] == (2, 1, 1)


def test_the_build_starts_ahead_only_where_an_nvidia_driver_is(tmp_path, monkeypatch):
    """``start`` (at activation and decoration) builds in a side thread where a GPU could launch, and
    nowhere else: a CPU machine importing the plugin runs no compiler and writes no cache."""
    from triton_dist_plugin.compiling import prestart

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiled_hit, "_module", [])
    monkeypatch.setattr(compiled_hit, "_builder", [])
    monkeypatch.setattr(prestart, "_side", [])
    monkeypatch.setattr(compiled_hit, "_NVIDIA_DRIVER", (str(tmp_path / "no-driver"),))
    compiled_hit.start()
    assert not prestart._side and not (tmp_path / "cache").exists()
    (tmp_path / "driver").write_text("NVRM version: stand-in\n")
    monkeypatch.setattr(compiled_hit, "_NVIDIA_DRIVER", (str(tmp_path / "driver"),))
    compiled_hit.start()
    (thread,) = prestart._side
    thread.join(120)
    assert [p.name for p in (tmp_path / "cache").rglob("_tdp_hit*")], "the side thread built nothing"
    assert not compiled_hit._module  # it only builds: loading is the first hit's


def test_the_compiled_subscript_calls_run_as_kernelinterfaces_lambda_does(compiled):
    """``tuner[grid](*args, **kwargs)`` through ``Subscript`` and through upstream's lambda: the same
    call of ``run`` (positional arguments, keywords in the lambda's order), ``run`` looked up at the
    call, the same error where ``grid`` or ``warmup`` is given again; bound as a method too."""
    import gc

    from hypothesis import strategies as st
    from triton.runtime.jit import KernelInterface

    class Upstream(KernelInterface):
        def run(self, *args, **kwargs):
            return args, list(kwargs.items())

    class Ours(Upstream):
        __getitem__ = compiled.Subscript()

    names = st.sampled_from(["x", "n", "out", "BLOCK", "grid", "warmup", "alpha"])
    values = st.one_of(st.integers(), st.none(), st.text(max_size=2))

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(values, max_size=80), st.dictionaries(names, values, max_size=4), values)
    def check(args, kwargs, grid):
        outcomes = []
        for tuner in (Upstream(), Ours()):
            try:
                outcomes.append(tuner[grid](*args, **kwargs))
            except TypeError as exc:
                outcomes.append((type(exc), str(exc).split(" got ")[-1]))
        assert outcomes[0] == outcomes[1]

    check()
    import copy
    import inspect
    import weakref

    tuner = Ours()
    launch = tuner[(3,)]
    assert type(launch).__name__ == "Launch" and gc.is_tracked(launch)
    assert copy.copy(launch) is launch and copy.deepcopy(launch) is launch and weakref.ref(launch)() is launch
    lam = Upstream()[(3,)]
    assert (launch.__name__, launch.__qualname__) == (lam.__name__, lam.__qualname__)
    assert str(inspect.signature(Ours.__getitem__)) == "(self, grid)"
    assert (Ours.__getitem__.__name__, Ours.__getitem__.__qualname__) == ("__getitem__", "KernelInterface.__getitem__")
    bound = [tuner.__getitem__(grid=(3,)), Ours.__getitem__(tuner, grid=(3,)), Ours.__getitem__(self=tuner, grid=(3,))]
    for made in bound:
        assert made() == tuner[(3,)]() == ((), [("grid", (3,)), ("warmup", False)])
    for wrong in ({"grid": 1, "other": 2}, {"self": tuner}):
        with pytest.raises(TypeError):
            Ours.__getitem__(**wrong)
    tuner.run = lambda *a, **k: ("replaced", a, k)  # looked up at the call, as the lambda does
    assert launch(1, x=2) == ("replaced", (1,), {"grid": (3,), "warmup": False, "x": 2})
    assert tuner.__getitem__((4,))() == ("replaced", (), {"grid": (4,), "warmup": False})
    with pytest.raises(TypeError):
        compiled.Subscript()(tuner)


def test_a_long_chain_of_launches_frees_without_exhausting_the_stack(compiled, tmp_path):
    """Each ``Launch`` the next one's grid, a million deep: freed as CPython frees nested lambdas,
    without a recursion per link (in a process of its own: the failure is a crash)."""
    import subprocess
    import sys

    script = tmp_path / "chain.py"
    script.write_text(
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport importlib.machinery, importlib.util\n"
        "loader = importlib.machinery.ExtensionFileLoader('_tdp_hit', sys.argv[2])\n"
        "spec = importlib.util.spec_from_file_location('_tdp_hit', sys.argv[2], loader=loader)\n"
        "m = importlib.util.module_from_spec(spec); loader.exec_module(m)\n"
        "sub, t, g = m.Subscript(), object(), None\n"
        "for _ in range(1_000_000):\n    g = sub(t, g)\n"
        "del g\nprint('freed')\n")
    done = subprocess.run([sys.executable, str(script), str(tmp_path), compiled.__file__], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "freed" in done.stdout, (done.returncode, done.stderr[-500:])


def test_a_hit_while_activation_holds_its_lock_does_not_wait_for_it(tmp_path, compiled, monkeypatch):
    """An entry-point plugin that launches a tuned kernel as it loads (inside ``activate``, which
    holds its lock) gets its launch, and activation finishes; the subscript comes with a later hit."""
    import threading

    import triton_dist_plugin as tdp
    from triton_dist_plugin import activation, bus

    tuned, args = _wide_tuner(tmp_path, monkeypatch, compiled)
    tdp.deactivate()
    loads = bus.load_entry_points
    monkeypatch.setattr(bus, "load_entry_points", lambda *a, **k: (tuned[(1,)](*args), loads(*a, **k))[1])
    try:
        worker = threading.Thread(target=tdp.activate, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "activation waited for itself"
    finally:
        monkeypatch.setattr(bus, "load_entry_points", loads)
        if not tdp.is_active():
            tdp.activate()
    assert activation.is_active()


def test_the_compiled_launch_gives_a_callable_grid_the_binders_dict(kernels, compiled, monkeypatch):
    """A grid function is given the dict Triton's binder gives it (``JITFunction.run``): the same
    names in the same order, the same objects, kernel arguments positional or by keyword."""
    from triton.runtime.jit import JITFunction

    fn = JITFunction(kernels["add"][0].fn)
    meta = {"BLOCK": 128, "num_warps": 4}
    _standin(fn, monkeypatch)
    base = torch.zeros(256)
    seen: list = []

    def grid(bound):
        seen.append([(name, id(value)) for name, value in bound.items()])
        return (1,)

    launcher = direct.Launcher(fn, meta)
    for args, named in [((base, base, base, 64), {}), ((base, base), {"out": base, "n": 64})]:
        for _ in range(6):
            fn.run(*args, grid=grid, warmup=False, **named, **meta)
            done = compiled.launch(launcher, args, {"grid": grid, "warmup": False, **named})
            if done is None:  # not learned yet: the launcher's Python path
                launcher(args, {"grid": grid, "warmup": False, **named})
            assert seen[-1] == seen[-2], (seen[-2], seen[-1])
        assert done is not None  # the last ones were C's


def test_the_first_compiled_hit_installs_the_subscript_and_deactivation_removes_it(tmp_path, compiled, monkeypatch):
    """``Autotuner.__getitem__`` is ours from the first compiled hit on, serves the tuned launches,
    and goes with ``deactivate`` (the class has none of its own: ``KernelInterface``'s serves again)."""
    import triton_dist_plugin as tdp

    tuned, args = _wide_tuner(tmp_path, monkeypatch, compiled)
    klass = _compat.Autotuner
    assert type(klass.__dict__["__getitem__"]).__name__ == "Subscript"
    assert type(tuned[(1,)]).__name__ == "Launch"
    assert tuned[(2,)](*args).launches.pop()[:3] == (2, 1, 1)
    tdp.deactivate()
    try:
        assert "__getitem__" not in klass.__dict__
        assert type(tuned[(1,)]).__name__ == "function"  # upstream's lambda
    finally:
        tdp.activate()
