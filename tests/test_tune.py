"""Function-level autotune: the seed's behaviour, the disk cache, and bad input."""

import json
import math
import multiprocessing as mp
import time

import pytest
import torch
import triton
from helpers import DEVICE, run_python

import triton_dist_plugin as tdp
from kernels import KERNELS
from triton_dist_plugin import hookimpl
from triton_dist_plugin.store import cache, describe, filestore
from triton_dist_plugin.tune import autotune

SCALE = KERNELS["scale"]


def configs():
    return [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (128, 256) for w in (1, 2)]


def key_fn(x, alpha, *args, **kwargs):
    return (tuple(x.shape), str(x.dtype))


def prune_fn(entry, x, alpha, *args, **kwargs):
    return entry["cfg"].kwargs["BLOCK"] <= x.numel()


def make_scale():
    @autotune(config_space=configs(), key_fn=key_fn, prune_fn=prune_fn)
    def scale(x, alpha, cfg):
        # cfg.kwargs and num_warps rather than all_kwargs(): Triton 3.2's interpreter rejects the
        # other compile options its Config carries.
        return SCALE.launch(SCALE.jit, x, alpha, **cfg.kwargs, num_warps=cfg.num_warps)

    return scale


class Tunings:
    def __init__(self):
        self.records = []

    @hookimpl
    def tdp_on_tuned(self, record):
        self.records.append(record)

    @property
    def tuned(self) -> list:
        """The records of tunings (a disk hit's record says ``cache_hit``)."""
        return [r for r in self.records if not r.cache_hit]


@pytest.fixture
def tunings(plugins):
    t = Tunings()
    plugins(t)
    return t


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in (cache.ROOT_ENV, cache.ALWAYS_TUNE_ENV, cache.VERSION_CHECK_ENV):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / ".triton_dist" / "autotune"


def entries(root):
    return sorted(root.glob("*/*.json"))


def test_seed_example_tunes_once_returns_the_result_and_caches_on_disk(tunings, cache_dir, capsys):
    scale = make_scale()
    x = torch.randn(1000, device=DEVICE)
    y = scale(x, 2.5, autotune=True, autotune_verbose=True)
    torch.testing.assert_close(y, 2.5 * x)
    key = key_fn(x, 2.5)
    assert scale.best_configs[key]["cfg"].kwargs["BLOCK"] in (128, 256)
    assert len(tunings.records) == 1 and len(tunings.records[0].timings) == 4
    # Records name the configurations, not their positions in config_space.
    assert tunings.records[0].best_config in {describe.describe(c) for c in configs()}
    assert set(tunings.records[0].timings) == {describe.describe(c) for c in configs()}
    out = capsys.readouterr().out
    assert "tuning key" in out and out.count("candidate ") >= 4 and "picked candidate" in out
    scale(x, 2.5)
    assert len(tunings.records) == 1  # in-process hit
    (path,) = entries(cache_dir)
    assert path.parent.name == "scale"  # <root>/<function_name>/, as the seed lays it out
    record = json.loads(path.read_text())
    assert record["function"] == "test_tune.make_scale.<locals>.scale"
    assert record["key"] == repr(key) and record["pick"] in range(4)
    assert {"torch", "python"} <= record["versions"].keys()
    assert {"triton", "triton-ascend"} & record["versions"].keys()
    assert len(record["candidates"]) == 4 and all(len(c["timing"]) == 3 and c["ms"] == c["timing"][0]
                                                for c in record["candidates"])
    assert record["hardware"]["device"] == DEVICE and record["timestamp"]
    assert "pick: candidate" in path.with_suffix(".log").read_text()


def test_a_new_tuner_finds_the_disk_cache_and_always_tune_retunes(tunings, monkeypatch):
    x = torch.randn(1000, device=DEVICE)
    make_scale()(x, 2.0)
    second = make_scale()
    second(x, 2.0)
    assert len(tunings.tuned) == 1 and second.best_configs
    hit = tunings.records[-1]  # the disk hit has its record too, as a kernel's does
    assert hit.cache_hit and hit.best_config == tunings.tuned[0].best_config and hit.timings
    monkeypatch.setenv(cache.ALWAYS_TUNE_ENV, "1")
    make_scale()(x, 2.0)
    assert len(tunings.tuned) == 2


def test_a_disk_hits_record_reads_every_stored_time_the_record_check_lets_through(tunings, cache_dir):
    x = torch.randn(1000, device=DEVICE)
    make_scale()(x, 2.0)
    (path,) = entries(cache_dir)
    record = json.loads(path.read_text())
    shapes = [lambda t: t[0], lambda t: t[:1], lambda t: t[:2], lambda t: t]  # a number, 1 to 3 numbers
    for candidate, shape in zip(record["candidates"], shapes):  # the p50 (``ms``) stays the timing's first
        if candidate["ms"] is not None:
            candidate["timing"] = shape(candidate["timing"])
    path.write_text(json.dumps(record))
    make_scale()(x, 2.0)
    hit = tunings.records[-1]
    assert hit.cache_hit and len(tunings.tuned) == 1
    for candidate in record["candidates"]:
        timing = hit.timings[candidate["config"]]
        if candidate["ms"] is None:
            assert timing == [math.inf] * 3
        else:
            first = candidate["timing"] if not isinstance(candidate["timing"], list) else candidate["timing"][0]
            assert len(timing) == 3 and timing[0] == first and all(math.isfinite(t) for t in timing), timing


def test_version_check_refuses_a_cache_from_other_versions(tunings, cache_dir, monkeypatch):
    x = torch.randn(1000, device=DEVICE)
    make_scale()(x, 2.0)
    (path,) = entries(cache_dir)
    record = json.loads(path.read_text())
    record["versions"]["triton"] = "0.0.1"
    path.write_text(json.dumps(record))
    make_scale()(x, 2.0)
    assert len(tunings.tuned) == 1  # versions are recorded, not enforced by default
    monkeypatch.setenv(cache.VERSION_CHECK_ENV, "1")
    make_scale()(x, 2.0)
    assert len(tunings.tuned) == 2


DAMAGE = {"not json": b"{not json", "empty": b"", "a list": b'["a list"]', "pick out of range":
          b'{"format": 1, "pick": 99}', "binary": bytes(range(256)) * 4, "nested 100000 deep": b"[" * 100_000}


@pytest.mark.parametrize("damage", DAMAGE)
def test_corrupt_or_truncated_cache_is_reported_ignored_and_replaced(tunings, cache_dir, damage):
    x = torch.randn(1000, device=DEVICE)
    make_scale()(x, 2.0)
    (path,) = entries(cache_dir)
    path.write_bytes(DAMAGE[damage])
    with pytest.warns(RuntimeWarning, match="autotune cache"):
        y = make_scale()(x, 2.0)
    torch.testing.assert_close(y, 2.0 * x)
    assert len(tunings.records) == 2
    assert json.loads(path.read_text())["pick"] in range(4)


@pytest.mark.parametrize("blocker", ["parent is a file", "read-only"])
def test_an_unwritable_cache_keeps_the_pick_in_memory_and_returns_the_result(tunings, tmp_path, monkeypatch,
                                                                             blocker):
    import os

    if blocker == "parent is a file":
        (tmp_path / "file").write_text("")
        root = tmp_path / "file" / "autotune"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        root = tmp_path / "ro"
        root.mkdir()
        root.chmod(0o500)
    monkeypatch.setenv(cache.ROOT_ENV, str(root))
    x = torch.randn(1000, device=DEVICE)
    scale = make_scale()
    expected = (f"the autotune cache {root} cannot be used: {tmp_path / 'file'} is a file.*kept in memory"
                if blocker == "parent is a file" else f"cannot write the autotune cache in {root}.*kept in memory")
    with pytest.warns(RuntimeWarning, match=expected):
        y = scale(x, 2.0)
    torch.testing.assert_close(y, 2.0 * x)
    assert len(tunings.records) == 1 and len(scale.best_configs) == 1
    scale(x, 2.0)  # the pick in memory serves the next call: no second tuning
    assert len(tunings.records) == 1


def test_autotune_false_uses_the_first_config_without_key_or_prune():
    def boom(*args, **kwargs):
        raise AssertionError("must not be called")

    seen = []

    @autotune(config_space=[{"block": 1}, {"block": 2}], key_fn=boom, prune_fn=boom)
    def f(x, block):
        seen.append(block)
        return x * block

    assert f(3, autotune=False) == 3 and seen == [1] and not f.best_configs


def test_business_kwarg_named_like_a_field_is_an_error_unless_allowed():
    @autotune(config_space=[{"block": 1}, {"block": 2}], key_fn=lambda x, **kw: x)
    def f(x, block):
        return block

    with pytest.raises(ValueError, match="block passed by the caller.*autotune_allow_arg_overwrite=True"):
        f(1, block=7)
    assert f(1, block=7, autotune_allow_arg_overwrite=True) == 7


def test_failing_candidate_is_infinite_and_all_failing_is_an_error(tunings):
    @autotune(config_space=[{"mode": "boom"}, {"mode": "ok"}, {"mode": "slow"}], key_fn=lambda x: x)
    def f(x, mode):
        if mode == "boom":
            raise MemoryError("out of workspace")
        if mode == "slow":
            time.sleep(0.002)
        return x

    assert f(5) == 5 and f.best_configs[5] == {"mode": "ok"}
    record = tunings.records[0]
    boom = "{'mode': 'boom'}"
    assert record.timings[boom][0] == float("inf") and "MemoryError: out of workspace" in record.failures[boom]

    @autotune(config_space=[{"mode": 1}, {"mode": 2}], key_fn=lambda x: x)
    def g(x, mode):
        raise RuntimeError(f"broken {mode}")

    with pytest.raises(tdp.NoValidConfig, match="(?s)broken 1.*broken 2"):
        g(1)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="non-empty list"):
        autotune(config_space=[], key_fn=lambda: 0)(lambda: 0)
    with pytest.raises(ValueError, match="does not accept"):
        autotune(config_space=[{"nope": 1}], key_fn=lambda: 0)(lambda x: x)
    with pytest.raises(TypeError, match="key_fn must be callable"):
        autotune(config_space=[{"a": 1}], key_fn=None)(lambda a: a)

    @autotune(config_space=[{"a": 1}, {"a": 2}], key_fn=lambda x: x, prune_fn=lambda e, x: False)
    def f(x, a):
        return a

    with pytest.raises(ValueError, match="prune_fn kept none of the 2 candidates"):
        f(1)

    def bad_key(x):
        raise KeyError("shape not supported: 17")

    with pytest.raises(KeyError, match="shape not supported"):
        autotune(config_space=[{"a": 1}], key_fn=bad_key)(lambda x, a: a)(17)


def test_function_names_are_made_safe_as_directories():
    assert cache.safe_name("mod.fn") == "mod.fn"
    odd = cache.safe_name("a/b:<locals>..")
    assert "/" not in odd and ":" not in odd and "<" not in odd and odd != cache.safe_name("a/b:<locals>.,")


def test_source_digest_follows_the_launched_kernel(tmp_path):
    code = (
        "import triton, triton.language as tl\n"
        "from triton_dist_plugin.store import describe\n"
        "@triton.jit\n"
        "def k(x, BLOCK: tl.constexpr):\n"
        "    tl.store(x + tl.arange(0, BLOCK), {value})\n"
        "def host(x):\n"
        "    k[(1,)](x, BLOCK=16)\n"
        "print(describe.source_digest(host))\n"
    )
    digests = []
    for value in ("1.0", "2.0"):
        src = tmp_path / f"mod_{value[0]}.py"
        src.write_text(code.format(value=value))
        result = run_python(f"import runpy; runpy.run_path({str(src)!r})", env={"TRITON_INTERPRET": "1"})
        assert result.returncode == 0, result.stderr
        digests.append(result.stdout.strip())
    assert digests[0] != digests[1]


def _writer(path, n, i):
    for j in range(n):
        filestore.write_json_atomic(path, {"writer": i, "j": j, "payload": "x" * 20000})


def test_concurrent_writers_leave_valid_json(tmp_path):
    path = tmp_path / "entry.json"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 30, i)) for i in range(4)]
    for p in procs:
        p.start()
    # The writers spend their first second importing: wait for the first write without spinning,
    # then read as fast as possible while they write.
    while not path.exists() and any(p.is_alive() for p in procs):
        time.sleep(0.005)
    reads = 0
    while any(p.is_alive() for p in procs):
        data = filestore.read_json(path)
        if data is not None:
            assert data["payload"] == "x" * 20000
            reads += 1
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert reads > 0  # the file was read while they wrote
    assert json.loads(path.read_text())["j"] == 29
    assert not [f for f in tmp_path.iterdir() if f.suffix == ".tmp"]


@pytest.mark.parametrize("place", ["the directory", "a folder above it"])
def test_a_cache_directory_that_is_a_file_warns_once_for_every_key_and_kernel(tmp_path, monkeypatch, place):
    import warnings

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(cache.ROOT_ENV, str(blocker if place == "the directory" else blocker / "autotune"))
    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs(DEVICE), key=add.key)(add.jit)
    scale = make_scale()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (300, 500):
            x = torch.randn(n, device=DEVICE)
            torch.testing.assert_close(scale(x, 2.0), 2.0 * x)
            torch.testing.assert_close(add.launch(kernel, x, x), 2 * x)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert f"{blocker} is a file, not a directory; picks are kept in memory only" in messages[0]
    assert cache.ROOT_ENV in messages[0] and caught[0].filename == __file__  # the line that tuned first
    assert len(scale.best_configs) == 2 and len(kernel.cache) == 2


def test_a_key_fn_returning_a_list_is_a_clear_error_naming_key_fn():
    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: list(x.shape))
    def scaled(x, factor):
        return x * factor

    with pytest.raises(TypeError, match=r"^autotune\(test_tune\..*scaled\): key_fn returned \[4\] \(a list\), which "
                                        r"cannot be a cache key \(unhashable type: 'list'\); make key_fn return a "
                                        r"tuple.*tuple\(x.shape\)"):
        scaled(torch.ones(4, device=DEVICE))
    assert not scaled.best_configs


class Handle:  # no __repr__ of its own: the default holds the object's address
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):  # ...but equal by value, so a key holding one is found again
        return isinstance(other, Handle) and other.n == self.n

    def __hash__(self):
        return hash(self.n)


class Opaque:  # neither value equality nor a text of its own: each one is a new key
    pass


@pytest.mark.parametrize("what", ["tensor", "one-element tensor", "object", "nested object", "fresh each call",
                                  "NaN"])
def test_a_key_fn_returning_what_hashes_by_identity_is_a_type_error_naming_key_fn(what):
    made = {
        "tensor": lambda x: (tuple(x.shape), torch.tensor([4, 20])),
        "one-element tensor": lambda x: (x.shape[0], torch.tensor(4)),  # equal to another, hashed by identity
        "object": lambda x: Opaque(),
        "nested object": lambda x: (x.shape[0], (str(x.dtype), Opaque())),
        "fresh each call": lambda x: (x.shape[0], object.__new__(type("Anon", (), {"__repr__": lambda s: "Anon"}))),
        "NaN": lambda x: (x.shape[0], float(x.sum()) * float("nan")),  # never equal to itself: a new key each call
    }[what]

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=made)
    def scaled(x, factor):
        return x * factor

    for _ in range(2):  # every call says so, and nothing is tuned or stored
        with pytest.raises(TypeError, match=r"^autotune\(test_tune\..*scaled\): key_fn returned .*compares and hashes "
                                            r"by identity: every call makes a new key.*tuple\(x.shape\)"):
            scaled(torch.ones(4, device=DEVICE))
    assert not scaled.best_configs


def test_singletons_in_a_key_are_values(tmp_path):
    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: (x.dtype, None, x.device, tuple(x.shape)))
    def scaled(x, factor):
        return x * factor

    for _ in range(2):
        assert scaled(torch.ones(4, device=DEVICE)).sum() in (4, 8)
    assert len(scaled.best_configs) == 1  # found again: tuned once


def test_a_key_whose_text_holds_a_memory_address_warns_once_naming_key_fn(tmp_path):
    import warnings

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x, handle: (tuple(x.shape), handle))
    def scaled(x, handle, factor):
        return x * factor

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (1, 2):
            scaled(torch.ones(4, device=DEVICE), Handle(n))
    told = [w for w in caught if "memory address" in str(w.message)]
    assert len(told) == 1, [str(w.message) for w in caught]
    assert "key_fn returned ((4,), <test_tune.Handle object at 0x" in str(told[0].message)
    assert "scaled" in str(told[0].message) and told[0].filename == __file__
    assert len(scaled.best_configs) == 2  # it still tunes: a warning, not an error


def test_a_bad_bench_method_stops_the_call_before_anything_runs_naming_the_setting(tunings, cache_dir, monkeypatch):
    """docs/tune.md: TRITON_BENCH_METHOD is checked as every setting is, though it does not choose
    the method here; a value that names no method stops the call before any candidate runs."""
    calls = []

    @autotune(config_space=[{"a": 1}, {"a": 2}], key_fn=lambda x: x)
    def f(x, a):
        calls.append(a)
        return x

    monkeypatch.setenv("TRITON_BENCH_METHOD", "stopwatch")
    with pytest.raises(tdp.SettingError, match=r"TRITON_BENCH_METHOD='stopwatch' is not valid: it accepts event, "
                                               r"profiler, npu, cudagraph, wall\. Unset it"):
        f(1)
    assert calls == [] and not tunings.records and not entries(cache_dir) and f.best_configs == {}
    monkeypatch.delenv("TRITON_BENCH_METHOD")
    assert f(1) == 1 and list(f.best_configs) == [1] and len(tunings.tuned) == 1  # unset, it tunes


@pytest.mark.parametrize("method", ["profiler", "cudagraph", "wall", "event"])
def test_a_valid_bench_method_leaves_the_function_level_timer_as_it_is(recorder, method, monkeypatch):
    """Whatever TRITON_BENCH_METHOD names, the function-level tuner times with ``event`` on a
    device and ``wall`` on the CPU, 5 + 10 calls, and warns of no fallback."""
    import warnings

    monkeypatch.setenv("TRITON_BENCH_METHOD", method)

    @autotune(config_space=[{"a": 1}, {"a": 2}], key_fn=lambda x: x)
    def f(x, a):
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(3) == 3
    expected = "wall" if DEVICE == "cpu" else "event"
    assert [r.method for r in recorder.records] == [expected]
    assert {(r.method, r.n_warmup, r.n_repeat) for r in recorder.timed} == {(expected, 5, 10)}
