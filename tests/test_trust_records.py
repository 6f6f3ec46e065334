"""What the plugin remembers is input from outside: stored picks are keyed on everything that made
them valid, and every record, from any store, a manifest or the command line, passes one check.

Real kernels under the interpreter, real files, real processes; random records from hypothesis.
"""

import json
import math
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import triton_dist_plugin as tdp
from triton_dist_plugin import hookimpl
from triton_dist_plugin.cli import commands as cli
from triton_dist_plugin.store import describe, fingerprint, manifest, persist, records


@triton.jit
def copy_or_nan(x, out, n, BLOCK: tl.constexpr, WRONG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    value = tl.load(x + offs, mask=offs < n)
    if WRONG == 1:
        value = value * float("nan")
    tl.store(out + offs, value, mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 64, "WRONG": 0}), triton.Config({"BLOCK": 64, "WRONG": 1}),
           triton.Config({"BLOCK": 128, "WRONG": 0})]


class WrongIsFastest:
    """Times the NaN-writing candidate fastest: what an unchecked tuning would keep."""

    def __init__(self):
        self.timed = []

    @hookimpl
    def tdp_time_candidate(self, request):
        request.call()
        self.timed.append(request.config)
        return 1.0 if request.config.kwargs["WRONG"] else 2.0 + request.config.kwargs["BLOCK"] / 1000


def launch(kernel, n=200):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return x, out


def kernel_entries(root: Path) -> list:
    return sorted((root / persist.DIRECTORY).glob("*/*.json"))


def written_record(root: Path, tune) -> dict:
    """The one kernel entry ``tune()`` writes with ``root`` as the plugin's cache directory (set
    for the call only: a module-scoped fixture cannot use ``monkeypatch``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
        tune()
    (path,) = kernel_entries(root)
    return json.loads(path.read_text())


@pytest.fixture
def wrong_fastest(plugins):
    timer = WrongIsFastest()
    plugins(timer)
    return timer


# ------------------------------------------------------------------------------------------
# A stored pick is keyed on what made it valid


def test_a_pick_stored_without_the_accuracy_check_is_never_reused_with_it(wrong_fastest, recorder, tmp_path):
    unchecked = triton.autotune(configs=CONFIGS, key=["n"])(copy_or_nan)
    launch(unchecked)
    assert unchecked.best_config.kwargs["WRONG"] == 1  # what the unchecked tuning kept, and stored
    checked = triton.autotune(configs=CONFIGS, key=["n"], check_accuracy=True)(copy_or_nan)
    x, out = launch(checked)
    torch.testing.assert_close(out, x)
    assert checked.best_config.kwargs["WRONG"] == 0 and not recorder.records[-1].cache_hit
    assert "wrong result" in recorder.records[-1].failures[CONFIGS[1]]
    stored = [json.loads(p.read_text()) for p in kernel_entries(tmp_path / "tdp-cache")]
    assert sorted(r["context"]["accuracy"] for r in stored) == [False, True]
    again = triton.autotune(configs=CONFIGS, key=["n"], check_accuracy=True)(copy_or_nan)
    x, out = launch(again)  # the checked pick is on disk now, and is the one reused
    torch.testing.assert_close(out, x)
    assert recorder.records[-1].cache_hit and again.best_config.kwargs["WRONG"] == 0


@pytest.mark.parametrize("change", ["triton", "compile env", "method", "search", "configs"])
def test_a_pick_is_not_reused_when_what_it_was_keyed_on_changes(change, recorder, monkeypatch):
    if change == "method" and DEVICE == "cpu":
        pytest.skip("the interpreter times with the wall clock only")
    launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan))
    configs = CONFIGS[::2]
    with monkeypatch.context() as m:
        if change == "triton":  # another Triton build: its hash differs
            m.setattr(fingerprint, "triton_hash", lambda: "another build")
        elif change == "compile env":  # one of the variables Triton's own caches key on
            m.setenv("TRITON_DEFAULT_FP_FUSION", "0")
        elif change == "method":
            m.setenv("TRITON_BENCH_METHOD", "wall")
        elif change == "search":
            m.setenv("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive")
        else:
            configs = CONFIGS[::2] + [triton.Config({"BLOCK": 32, "WRONG": 0})]
        launch(triton.autotune(configs=configs, key=["n"])(copy_or_nan))
        assert not recorder.records[-1].cache_hit, change
    launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan))
    assert recorder.records[-1].cache_hit  # nothing else changed: the first pick still stands


PICKS_CHILD = textwrap.dedent("""
    import json, sys, torch, triton
    import triton_dist_plugin as tdp
    sys.path.insert(0, "tests")
    from helpers import Recorder
    from kernels import KERNELS

    rec = Recorder()
    tdp.register(rec)
    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)
    x, y = add.make_inputs("tiny", "cpu")
    assert torch.allclose(add.launch(kernel, x, y), x + y)
    print(json.dumps({"timed": len(rec.timed), "hit": rec.records[-1].cache_hit}))
""")


def test_kernel_picks_live_in_tritons_cache_so_a_fresh_triton_cache_resets_them(tmp_path):
    """As upstream's ``cache_results``: pointing ``TRITON_CACHE_DIR`` at a fresh directory (what
    upstream's own test fixtures do) tunes again; the same directory times nothing."""
    home = tmp_path / "home"
    home.mkdir()

    def child(triton_cache):
        env = {"TRITON_INTERPRET": "1", "HOME": str(home), "TRITON_CACHE_DIR": str(triton_cache),
               "TRITON_DIST_AUTOTUNE_DIR": None}
        result = run_python(PICKS_CHILD, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout.strip().splitlines()[-1])

    first = child(tmp_path / "triton-a")
    assert first["timed"] > 0 and not first["hit"]
    assert kernel_entries(tmp_path / "triton-a" / "triton_dist")
    assert child(tmp_path / "triton-a") == {"timed": 0, "hit": True}
    fresh = child(tmp_path / "triton-b")
    assert fresh["timed"] > 0 and not fresh["hit"]
    assert not (home / ".triton_dist").exists()  # nothing kernel-level under the home directory


# ------------------------------------------------------------------------------------------
# One record boundary: random records never raise

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 400), max_value=10 ** 400)
    | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
NUMBERS = st.sampled_from([10 ** 400, -1, 1e308, float("inf"), True, "1", None, [], {}])


def _paths(value, prefix=()):
    """Every place inside a record: the paths a mutation may replace."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _replace(value, path, new):
    if not path:
        return new
    copy = value.copy()
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


def mutated(valid: dict):
    """A valid record with one place replaced by random JSON or an out-of-range number, or
    random JSON altogether."""
    places = list(_paths(valid))
    return st.one_of(
        st.tuples(st.sampled_from(places), JSON | NUMBERS).map(lambda pn: _replace(valid, *pn)),
        st.tuples(st.sampled_from([p for p in places if p]), st.just(None)).map(lambda pn: _drop(valid, pn[0])),
        JSON)


def _drop(value, path):
    if len(path) == 1:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k != path[0]}
        return value[: path[0]] + value[path[0] + 1:]
    copy = value.copy()
    copy[path[0]] = _drop(value[path[0]], path[1:])
    return copy


@pytest.fixture(scope="module")
def tuned_record(tmp_path_factory):
    """One real kernel entry, as the file store wrote it."""
    return written_record(tmp_path_factory.mktemp("tdp-record"),
                          lambda: launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan), 100))


def test_the_written_record_passes_the_check(tuned_record):
    assert records.check(tuned_record, "kernel") is tuned_record


class DictStore:
    """A user's store (as Redis is, through ``tdp_cache_get``): answers whatever it holds."""

    def __init__(self):
        self.held = None

    @hookimpl
    def tdp_cache_get(self, entry):
        return self.held if entry.kind == "kernel" else None


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_records_from_a_file_or_a_store_never_raise_at_a_launch(data, tuned_record, tmp_path_factory):
    """Whatever a stored entry holds, in the file at the key's own place or from a user's store,
    the launch computes the right result, warns at most, and leaves a valid entry behind."""
    import os

    bad = data.draw(mutated(tuned_record))
    via_store = data.draw(st.booleans())
    root = tmp_path_factory.mktemp("tdp-random")
    previous = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(root)
    store = DictStore()
    tdp.register(store)
    try:
        first = triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan)
        launch(first, 100)
        (path,) = kernel_entries(root)
        if via_store:
            store.held = bad if isinstance(bad, dict) else None
        else:
            path.write_text(json.dumps(bad))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan)
            x, out = launch(again, 100)
        torch.testing.assert_close(out, x)
        assert records.valid(json.loads(path.read_text()), "kernel")
        # The command line reads the same entry, and every sibling, without a traceback.
        (root / persist.DIRECTORY / "copy_or_nan" / ("0" * 32 + ".json")).write_text(json.dumps(bad))
        for command in (["list"], ["show", "copy"], ["export"], ["report", "-o", str(root / "r.html")]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert cli.main(command) == 0, command
    finally:
        tdp.unregister(store)
        os.environ.pop("TRITON_DIST_AUTOTUNE_DIR") if previous is None else os.environ.update(
            TRITON_DIST_AUTOTUNE_DIR=previous)


def test_a_bad_sibling_entry_neither_breaks_a_new_key_nor_frozen_modes_nearest_key(tmp_path, monkeypatch, recorder):
    kernel = triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan)
    launch(kernel, 100)
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    good = json.loads(path.read_text())
    for i, bad in enumerate([{**good, "candidates": None}, {**good, "pick_config": [1]},
                             {**good, "candidates": [{"config": "x", "ms": 10 ** 400}]}, [good], "text"]):
        (path.parent / f"{i:032x}.json").write_text(json.dumps(bad))
    x, out = launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan), 300)  # warm-started
    torch.testing.assert_close(out, x)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_FROZEN", "nearest")
    with pytest.warns(RuntimeWarning, match="never tuned"):
        x, out = launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan), 700)
    torch.testing.assert_close(out, x)


# ------------------------------------------------------------------------------------------
# Manifests


def _manifest_item(record: dict, relpath: str) -> dict:
    return {"kind": "kernel", "name": record["kernel"], "key": record["key"], "relpath": relpath, "record": record}


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_importing_a_random_manifest_never_raises_nor_plants_a_bad_entry(data, tuned_record, tmp_path_factory):
    import os

    relpath = f"kernels/copy_or_nan/{describe.entry_digest(tuned_record['source'], tuned_record['hardware'], tuned_record['key'], tuned_record['context'])}.json"  # noqa: E501
    item = _manifest_item(tuned_record, relpath)
    bad = data.draw(mutated(item))
    odd = data.draw(st.sampled_from([relpath, "../x.json", "/etc/x.json", "kernels/../../x.json", "a/b/c/d.json",
                                     "kernels/.hidden/" + "0" * 32 + ".json", "kernels\\copy\\x.json", 7, None]))
    if isinstance(bad, dict) and data.draw(st.booleans()):
        bad = {**bad, "relpath": odd}
    root = tmp_path_factory.mktemp("tdp-import")
    previous = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(root / "cache")
    try:
        source = root / "manifest.json"
        source.write_text(json.dumps([bad, item] if data.draw(st.booleans()) else [bad]))
        try:
            manifest.import_file(source)
        except ValueError:
            pass  # not a manifest at all: the CLI says so in one line
        assert cli.main(["import", str(source)]) in (0, 1)
        written = [p for p in root.rglob("*") if p.is_file() and p != source]
        for path in written:
            assert path.resolve().is_relative_to((root / "cache").resolve()), path
            if path.suffix == ".json":
                assert records.valid(json.loads(path.read_text()), "kernel"), path
    finally:
        os.environ.pop("TRITON_DIST_AUTOTUNE_DIR") if previous is None else os.environ.update(
            TRITON_DIST_AUTOTUNE_DIR=previous)


def test_a_manifest_entry_can_only_land_where_its_own_key_finds_it(tuned_record, tmp_path):
    other = "f" * 32
    path = tmp_path / "m.json"
    path.write_text(json.dumps([_manifest_item(tuned_record, f"kernels/copy_or_nan/{other}.json"),
                                _manifest_item(tuned_record, f"kernels/another_kernel/{other}.json")]))
    written, present, skipped = manifest.import_file(path)
    assert written == 0 and len(skipped) == 2 and all("does not match" in s or "folder" in s for s in skipped)


FROZEN_CHILD = textwrap.dedent("""
    import sys, threading, torch
    from triton_dist_plugin.tune import autotune

    @autotune(config_space=[{"scale": 1.0}, {"scale": 2.0}], key_fn=lambda x: x.numel())
    def scaled(x, scale):
        return x * scale

    if sys.argv[1] == "tune":
        scaled(torch.ones(64))
        sys.exit(0)
    errors, barrier = [], threading.Barrier(8)

    def worker():
        barrier.wait()
        try:
            scaled(torch.ones(64))
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(errors)
    sys.exit(1 if errors else 0)
""")


def test_threads_racing_a_manifest_import_wait_for_its_records(tmp_path):
    """Frozen strict mode raises on a key the cache lacks: a thread must never look before the
    manifest named by the setting is in place (it holds many entries, so importing takes time)."""
    script = tmp_path / "frozen_child.py"
    script.write_text(FROZEN_CHILD)
    env = {"HOME": str(tmp_path / "home"), "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tuned")}
    result = run_python(f"import runpy, sys; sys.argv = ['x', 'tune']; runpy.run_path({str(script)!r})", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    exported = run_python("from triton_dist_plugin import cli; raise SystemExit(cli.main(['export', '-o', "
                          f"{str(tmp_path / 'm.json')!r}]))", env=env)
    assert exported.returncode == 0, exported.stderr[-2000:]
    items = json.loads((tmp_path / "m.json").read_text())
    (item,) = [i for i in items if "record" in i]
    padding = []  # other functions' entries, imported first
    for n in range(400):
        record = {**item["record"], "function": f"pad{n}"}
        digest = describe.entry_digest(record["source"], record["hardware"], record["key"], record["context"])
        padding.append({**item, "relpath": f"pad{n}/{digest}.json", "record": record})
    (tmp_path / "m.json").write_text(json.dumps(padding + [item]))
    env = {**env, "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "fresh"), "TRITON_DIST_AUTOTUNE_FROZEN": "strict",
           "TRITON_DIST_AUTOTUNE_MANIFEST": str(tmp_path / "m.json")}
    result = run_python(f"import runpy, sys; sys.argv = ['x', 'run']; runpy.run_path({str(script)!r}, "
                        "run_name='__main__')", env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]


def test_numbers_a_float_cannot_hold_are_refused_by_the_check(tuned_record):
    for bad in (10 ** 400, -1.0, math.inf, True):
        record = {**tuned_record, "candidates": [{**tuned_record["candidates"][0], "ms": bad}]}
        with pytest.raises(records.RecordError, match=r"candidates\[0\]\.ms"):
            records.check(record, "kernel")


def test_threads_reading_the_manifest_setting_in_process_never_see_it_half_loaded(tmp_path, monkeypatch):
    """The same race inside one process, through the loader itself."""
    path = tmp_path / "m.json"
    path.write_text("[]")
    monkeypatch.setenv(manifest.ENV, str(path))
    calls, done = [], []
    original = manifest.import_file

    def slow(p):
        calls.append(threading.get_ident())
        threading.Event().wait(0.3)
        result = original(p)
        done.append(True)
        return result

    monkeypatch.setattr(manifest, "import_file", slow)
    seen = []
    threads = [threading.Thread(target=lambda: (manifest.load_from_env(), seen.append(bool(done))))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and seen == [True] * 4  # every thread returned after the records were in


def _scaled(x, scale):
    return x * scale


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_function_level_records_never_raise_at_a_call(data, tmp_path_factory):
    """The same boundary for function-level entries: whatever the file holds, the call returns
    the right result and a valid entry is left behind."""
    import os

    from triton_dist_plugin.tune import autotune

    root = tmp_path_factory.mktemp("tdp-function")
    previous = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(root)
    space = [{"scale": 1.0}, {"scale": 1.0 + 0.0}]
    try:
        x = torch.ones(16)
        assert torch.equal(autotune(space, key_fn=lambda x: x.numel())(_scaled)(x), x)
        (path,) = sorted(root.glob("*/*.json"))
        bad = data.draw(mutated(json.loads(path.read_text())))
        path.write_text(json.dumps(bad))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(autotune(space, key_fn=lambda x: x.numel())(_scaled)(x), x)
            assert cli.main(["list"]) == 0 and cli.main(["export"]) == 0
        assert records.valid(json.loads(path.read_text()), "function")
    finally:
        os.environ.pop("TRITON_DIST_AUTOTUNE_DIR") if previous is None else os.environ.update(
            TRITON_DIST_AUTOTUNE_DIR=previous)


# ------------------------------------------------------------------------------------------
# Found by trying the boundary as a hostile user would


def test_the_interpreters_triton_fingerprint_ignores_bytecode_and_is_the_same_in_every_process():
    from triton_dist_plugin.store.fingerprint import _installed_record

    record = _installed_record()
    assert record is None or ".pyc," not in record
    code = ("import os; os.environ['TRITON_INTERPRET'] = '1'\nimport sys\n"
            "if sys.argv[1:] == ['more']:\n    import triton.testing, triton.tools.disasm  # noqa\n"
            "from triton_dist_plugin.store import fingerprint\nprint(fingerprint.triton_hash())")
    hashes = {run_python(f"import sys; sys.argv = ['x', {arg!r}]\n{code}").stdout.strip() for arg in ("", "more")}
    assert len(hashes) == 1 and all(hashes), hashes


def test_a_config_whose_pre_hook_is_a_partial_is_described_without_an_address():
    import functools

    def hook(step, args):
        return None

    config = triton.Config({"BLOCK": 64}, pre_hook=functools.partial(hook, 1))
    text = describe.describe(config)
    assert " at 0x" not in text and "functools.partial" in text, text
    other = triton.Config({"BLOCK": 64}, pre_hook=lambda args: None)
    assert describe.describe(other) != describe.describe(triton.Config({"BLOCK": 64}, pre_hook=lambda args: 1))


def test_a_function_level_entry_of_the_previous_layout_is_still_a_hit(tmp_path):
    from triton_dist_plugin.tune import autotune

    calls = []

    def scaled(x, scale):
        calls.append(scale)
        return x * scale

    space = [{"scale": 1.0}, {"scale": 2.0}]
    x = torch.ones(8)
    autotune(space, key_fn=lambda x: x.numel())(scaled)(x)
    (path,) = sorted((tmp_path / "tdp-cache").glob("*/*.json"))
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "format": 1}))  # as the previous release wrote it
    calls.clear()
    autotune(space, key_fn=lambda x: x.numel())(scaled)(x)
    assert len(calls) == 1  # the pick, called once: nothing timed


def test_text_that_is_not_valid_unicode_is_refused_and_never_reaches_a_terminal(tuned_record, tmp_path, capsys):
    with pytest.raises(records.RecordError, match="not valid Unicode"):
        records.check({**tuned_record, "pick_config": "\ud800x"}, "kernel")
    item = _manifest_item({**tuned_record, "kernel": "\ud800"}, "kernels/copy_or_nan/" + "0" * 32 + ".json")
    source = tmp_path / "m.json"
    source.write_text(json.dumps([item, {"relpath": "x/" + "1" * 32 + ".json", "record": tuned_record}]))
    written, present, skipped = manifest.import_file(source)
    assert written == 0 and len(skipped) == 2  # both skipped, each with its reason; nothing raised


def test_a_misses_log_line_nested_too_deeply_is_skipped(tmp_path):
    from triton_dist_plugin import frozen

    root = tmp_path / "tdp-cache"
    root.mkdir(parents=True, exist_ok=True)
    good = json.dumps({"kernel": "k", "key": "(1,)", "why": "frozen mode"})
    (root / frozen.MISSES).write_text("[" * 100000 + "]" * 100000 + "\n" + good + "\n")
    assert [m["kernel"] for m in frozen.misses()] == ["k"]
    assert cli.main(["misses"]) == 0


def test_the_cli_says_in_one_line_what_it_cannot_write_or_which_setting_is_bad(tmp_path, monkeypatch, capsys):
    assert cli.main(["export", "-o", str(tmp_path / "missing" / "x.json")]) == 1
    assert cli.main(["report", "-o", str(tmp_path)]) == 1
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SHARED", "yes")
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "Traceback" not in "".join(err) and "TRITON_DIST_AUTOTUNE_SHARED" in err[-1], err


def test_a_fresh_temporary_of_a_writer_that_looks_gone_is_left_alone(tmp_path):
    """Another PID namespace under the same host name looks like a dead writer: only a temporary a
    minute old is taken for one."""
    import os
    import time

    from triton_dist_plugin.store import filestore, safe_files

    folder = tmp_path / "d"
    filestore.write_json_atomic(folder / "a.json", {"x": 1}, root=tmp_path)
    fresh = folder / ".partial" / f".b.json.{safe_files._HOST}-999999999.{'0' * 16}.tmp"
    old = folder / ".partial" / f".c.json.{safe_files._HOST}-999999998.{'1' * 16}.tmp"
    fresh.write_text("{}")
    old.write_text("{}")
    os.utime(old, (time.time() - 120, time.time() - 120))
    filestore.write_json_atomic(folder / "a.json", {"x": 2}, root=tmp_path)
    assert fresh.exists() and not old.exists()
