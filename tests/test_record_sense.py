"""A stored record is checked for sense as well as types, and every number in a stored key is
bounded, at the one boundary (``records.check``); the distance between keys is safe for any
value. Real kernels under the interpreter, real files and processes; random keys from hypothesis.
"""

import copy
import json
import math
import re

import pytest
import torch
import triton
from helpers import DEVICE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trust_records import (  # noqa: E402 - the kernel whose second config writes NaN
    CONFIGS,
    copy_or_nan,
    kernel_entries,
    written_record,
)

from triton_dist_plugin import frozen
from triton_dist_plugin.cli import commands as cli
from triton_dist_plugin.store import describe, keys, manifest, persist, records

WRONG = describe.describe(CONFIGS[1])
HANG = "did not finish within 5s (killed in the isolation worker)"


def launch(kernel, n=200):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return x, out


def checked():
    return triton.autotune(configs=CONFIGS, key=["n"], check_accuracy=True)(copy_or_nan)




@pytest.fixture(scope="module")
def failing_record(tmp_path_factory):
    """A real entry with a failed candidate: the accuracy check turned the NaN writer down."""
    return written_record(tmp_path_factory.mktemp("tdp-sense"), lambda: launch(checked(), 100))


def _row(record, config):
    return next(c for c in record["candidates"] if c["config"] == config)


# -- the plugin's own records pass ---------------------------------------------------------------

def test_the_plugins_own_records_with_failures_pass(failing_record):
    assert _row(failing_record, WRONG)["failure"] and _row(failing_record, WRONG)["ms"] is None
    assert records.check(failing_record, "kernel") is failing_record


def test_rows_of_candidates_never_screened_pass():
    """As the engine records a candidate a search never screened nor compiled: no time, a reason."""
    record = _valid_kernel()
    record["candidates"].append({"config": "never screened", "ms": None, "timing": [None, None, None],
                                 "failure": "not screened: the search stopped before it", "measured": False})
    records.check(record, "kernel")


def test_a_function_level_record_with_a_failure_and_a_pruned_candidate_passes(tmp_path):
    from triton_dist_plugin.tune import autotune

    def pick(x, mode):
        if mode == "boom":
            raise MemoryError("out of workspace")
        return x * 1

    tuner = autotune([{"mode": "boom"}, {"mode": "ok"}, {"mode": "pruned"}], key_fn=lambda x: x.numel(),
                     prune_fn=lambda c, x: c["mode"] != "pruned")(pick)
    tuner(torch.ones(4))
    (path,) = sorted((tmp_path / "tdp-cache").glob("*/*.json"))
    record = json.loads(path.read_text())
    assert record["retained"] == [0, 1] and records.check(record, "function") is record


def test_a_writer_never_stores_a_record_that_fails_the_check():
    """A reducer that gave a failed candidate a time: the row is written without it."""
    store = persist.KernelStore("k", copy_or_nan, DEVICE, 1, CONFIGS, "wall")
    timings = {CONFIGS[0]: [1.0] * 3, CONFIGS[1]: [0.5] * 3, CONFIGS[2]: [float("inf")] * 3}
    record = store.record((7,), CONFIGS[0], timings, {CONFIGS[1]: "wrong result"}, [CONFIGS[0], CONFIGS[2]], "wall",
                          0.1)
    assert records.check(record, "kernel") is record
    assert _row(record, WRONG)["ms"] is None and _row(record, describe.describe(CONFIGS[2]))["failure"]


# -- a record that contradicts itself is invalid ------------------------------------------------

def _valid_kernel() -> dict:
    cands = [{"config": c, "ms": t, "timing": [t, t, t] if t is not None else [None] * 3, "failure": f, "measured": m}
             for c, t, f, m in (("a", 1.0, None, True), ("b", 2.0, None, True), ("c", 0.5, None, False),
                                ("d", None, "boom", False))]
    return {"format": 2, "kernel": "k", "key": "(1000, 'torch.float32')", "source": "s", "timestamp": "t",
            "method": "wall", "pick_config": "a", "hardware": {"device": "cpu"}, "versions": {}, "context": {},
            "bench_time_s": 0.1, "candidates": cands}


def _valid_function() -> dict:
    cands = [{"index": i, "config": c, "ms": t, "failure": f, "measured": True}
             for i, c, t, f in ((0, "x", [1.0, 1.0, 1.0], None), (2, "y", None, "boom"), (3, "x", [2.0] * 3, None))]
    return {"format": 2, "function": "f", "key": "5", "source": "s", "timestamp": "t", "method": "wall",
            "pick": 0, "pick_config": "x", "hardware": {"device": "cpu"}, "versions": {}, "bench_time_s": 0.1,
            "retained": [0, 2, 3], "candidates": cands}


def _failed(row: dict, reason) -> dict:
    row.update(failure=reason, ms=None, timing=[None, None, None])
    return row


KERNEL_NONSENSE = {
    "pick marked failed": (lambda r: _failed(r["candidates"][0], HANG),
                           r"'pick_config' names candidates\[0\], which failed \(did not finish"),
    "pick with no time": (lambda r: _failed(r["candidates"][0], None).update(measured=False),
                          r"'pick_config' names candidates\[0\], which has no time"),
    "pick not listed": (lambda r: r.update(pick_config="z"), r"'pick_config' is 'z', none of the candidates"),
    "pick not measured": (lambda r: r["candidates"][0].update(measured=False), r"which was not measured fully"),
    "a time and a failure": (lambda r: r["candidates"][1].update(failure="boom"),
                             r"candidates\[1\]' has both a time and a failure"),
    "measured, no time, no failure": (lambda r: r["candidates"][3].update(failure=None, measured=True),
                                      r"candidates\[3\]\.measured' is true, yet it has neither"),
    "a candidate twice": (lambda r: r["candidates"][1].update(config="a"),
                          r"candidates\[1\]' repeats candidates\[0\]"),
    "timing against ms": (lambda r: r["candidates"][1].update(timing=[3.0] * 3),
                          r"candidates\[1\]\.timing' has the p50"),
}




FUNCTION_NONSENSE = {
    "pick outside retained": (lambda r: r.update(pick=7), r"'pick' is 7, which 'retained' does not list"),
    "index outside retained": (lambda r: r["candidates"][2].update(index=9), r"candidates\[2\]\.index' is 9"),
    "pick marked failed": (lambda r: r.update(pick=2, pick_config="y"), r"'pick' names candidates\[1\], which failed"),
    "pick config not the pick's": (lambda r: r.update(pick_config="y"), r"'pick_config' is not the config"),
    "an index twice": (lambda r: r["candidates"][2].update(index=0), r"candidates\[2\]' repeats candidates\[0\]"),
    "retained twice": (lambda r: r.update(retained=[0, 0, 2, 3]), r"'retained' lists a candidate twice"),
    "pick not a candidate": (lambda r: (r["retained"].append(5), r.update(pick=5)), r"'pick' is '5', none of"),
}


@pytest.mark.parametrize("kind, case", [("kernel", c) for c in KERNEL_NONSENSE] +
                         [("function", c) for c in FUNCTION_NONSENSE])
def test_a_record_that_contradicts_itself_is_invalid(kind, case):
    change, message = (KERNEL_NONSENSE if kind == "kernel" else FUNCTION_NONSENSE)[case]
    record = _valid_kernel() if kind == "kernel" else _valid_function()
    records.check(copy.deepcopy(record), kind)
    change(record)
    with pytest.raises(records.RecordError, match=message):
        records.check(record, kind)


def _contradicting(record: dict) -> dict:
    """``record`` with its pick the NaN writer, which it marks as having hung."""
    bad = copy.deepcopy(record)
    row = _row(bad, WRONG)
    bad.update(pick=row["index"], pick_config=WRONG)
    row.update(failure=HANG, ms=None, timing=[None, None, None], measured=True)
    return bad


def test_a_stored_pick_the_record_marks_failed_is_never_launched(failing_record, tmp_path, recorder):
    """The entry at the key's own place names the NaN writer as its pick and marks it as having
    hung: it is warned about (naming the field) and the key is tuned again, with the check."""
    launch(checked())
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    path.write_text(json.dumps(_contradicting(json.loads(path.read_text()))))
    with pytest.warns(RuntimeWarning, match=r"field 'pick' names candidates\[\d\], which failed"):
        x, out = launch(checked())
    torch.testing.assert_close(out, x)
    assert not recorder.records[-1].cache_hit
    assert records.valid(json.loads(path.read_text()), "kernel")  # replaced by the new tuning's


def test_a_manifest_entry_that_contradicts_itself_is_skipped_with_its_reason(failing_record, tmp_path):
    bad = _contradicting(failing_record)
    digest = describe.entry_digest(bad["source"], bad["hardware"], bad["key"], bad["context"])
    source = tmp_path / "m.json"
    source.write_text(json.dumps([{"kind": "kernel", "name": "copy_or_nan", "key": bad["key"],
                                   "relpath": f"kernels/copy_or_nan/{digest}.json", "record": bad}]))
    written, present, skipped = manifest.import_file(source)
    assert written == 0 and len(skipped) == 1 and "which failed (did not finish within 5s" in skipped[0]
    assert not kernel_entries(tmp_path / "tdp-cache")


def test_the_command_line_names_a_record_that_contradicts_itself(failing_record, tmp_path, capsys):
    launch(checked())
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    path.write_text(json.dumps(_contradicting(json.loads(path.read_text()))))
    for command in (["list"], ["show", "copy"], ["export"]):
        cli.main(command)
        err = capsys.readouterr().err
        assert f"skipping {path}: field 'pick' names" in err and "1 entry could not be read" in err, err


# -- every number of a stored key is bounded ----------------------------------------------------

def _nested(depth: int) -> tuple:
    value: tuple = (1,)
    for _ in range(depth):
        value = (value,)
    return value


@pytest.mark.parametrize("key", ["(" + "9" * 300 + ", 'torch.float32')", "(1e999,)", "(-1e999, 2)", repr(_nested(40)),
                                 repr((2 ** 64,)), repr(("x" * 70000,)), repr(tuple(range(70000)))])
def test_a_stored_key_holding_a_number_no_shape_has_is_invalid(key):
    record = {**_valid_kernel(), "key": key}
    with pytest.raises(records.RecordError, match="field 'key'"):
        records.check(record, "kernel")


def test_a_stored_key_with_a_huge_number_never_breaks_a_new_keys_launch(tmp_path, recorder, monkeypatch):
    """An entry of the same kernel whose key holds a number of 400 digits, beside a good one:
    a new key's launch (a warm start) and frozen mode's nearest key never raise."""
    kernel = triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan)
    launch(kernel, 1000)
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    good = json.loads(path.read_text())
    for big in ["9" * 400, "-" + "9" * 400, "1e999", str(2 ** 70)]:
        key = good["key"].replace("1000", big, 1)
        name = describe.entry_digest(good["source"], good["hardware"], key, good["context"])
        (path.parent / f"{name}.json").write_text(json.dumps({**good, "key": key}))
    x, out = launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan), 900)  # raised OverflowError
    torch.testing.assert_close(out, x)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    with pytest.warns(RuntimeWarning, match=r"nearest tuned key \(900, "):
        x, out = launch(triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan), 800)
    torch.testing.assert_close(out, x)


LIVE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 400), max_value=10 ** 400) | st.floats()
    | st.text(max_size=8),
    lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=8)
KEYS = st.tuples(LIVE, LIVE) | st.tuples(LIVE) | st.tuples(LIVE, LIVE, LIVE) | LIVE


def _text_of(value) -> str:
    try:
        return repr(value)
    except ValueError:  # an int too large to print
        return "(" + "9" * 5000 + ",)"


ANY_NUMBER = st.integers(min_value=-(10 ** 400), max_value=10 ** 400) | st.floats() | st.sampled_from(
    [10 ** 400, -(10 ** 400), float("inf"), float("-inf"), float("nan"), 0, 2 ** 64, 1e308])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(stored=KEYS, odd=st.text(max_size=40), live=KEYS, use_odd=st.booleans(), data=st.data())
def test_the_boundary_takes_or_refuses_any_key_and_distances_never_fail(stored, odd, live, use_odd, data):
    """``check`` accepts a key or raises ``RecordError``, nothing else; a key that passes, and any
    live key at all (one of its shape with any numbers, too), give distances that never raise, are
    never NaN nor negative, and are finite between two stored keys of one signature."""
    text = odd if use_odd else _text_of(stored)
    record = {**_valid_kernel(), "key": text}
    try:
        records.check(record, "kernel")
        passed = True
    except records.RecordError:
        passed = False
    parsed = keys.parse(text)
    if not passed:
        assert parsed is None
        return
    other = keys.parse(_text_of(live))
    twin = tuple(data.draw(ANY_NUMBER) if keys._number(v) else v for v in parsed) if parsed is not None else live
    for a, b in ((parsed, live), (live, parsed), (parsed, other), (parsed, parsed), (parsed, twin), (twin, parsed)):
        d = keys.distance(a, b)
        assert d == d and d >= 0, (a, b, d)
    if parsed is not None:
        assert keys.distance(parsed, parsed) == 0.0
        if other is not None:
            d = keys.distance(parsed, other)
            assert (d < math.inf) == (keys.signature(parsed) == keys.signature(other)), (parsed, other, d)
    keys.nearest([parsed, other, live, twin], twin)  # never raises


def test_distances_of_any_value_never_raise_and_are_never_nan():
    nan, inf = float("nan"), float("inf")
    odd = [(10 ** 400,), (-(10 ** 400),), (nan,), (inf,), (-inf,), (1e308,), (True,), (None,), ("x",), ((1, 2),),
           (2 ** 64, "torch.float16"), (5,), (5.0,), 5, None, "(1,)"]
    for a in odd:
        for b in odd:
            d = keys.distance(a, b)
            assert d == d and d >= 0, (a, b)
    assert keys.distance((10 ** 400,), (10 ** 400 + 1,)) < 1e-300  # huge, but comparable
    assert keys.distance((nan,), (nan,)) == math.inf and keys.distance((inf,), (5,)) == math.inf
    assert keys.nearest([(10 ** 400,), (4,)], (5,)) == (4,)


@pytest.mark.parametrize("pick_ms, other_ms", [(0.0, 1.0), (5e-324, 1.7e308), (1.7e308, 1.75e308), (0.0, 0.0),
                                               (1e-300, 1e300)])
def test_every_view_of_a_valid_record_with_extreme_times_works(failing_record, tmp_path, pick_ms, other_ms):
    """Any finite time >= 0 passes the check, so the report, list, show and export take it: no
    division by a pick timed at 0 ms, no logarithm of 0, no axis past what a float holds."""
    launch(checked())
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    record = json.loads(path.read_text())
    for row in record["candidates"]:
        if row["ms"] is not None:
            ms = pick_ms if row["config"] == record["pick_config"] else other_ms
            row.update(ms=ms, timing=[ms, ms / 2, ms])
    path.write_text(json.dumps(records.check(record, "kernel")))
    for command in (["report", "-o", str(tmp_path / "r.html")], ["list"], ["show", "copy"], ["export"]):
        assert cli.main(command) == 0, command
    page = (tmp_path / "r.html").read_text()
    assert not re.search(r":\s*nan|nan%|nan ms|\bnan<|\binf%|\binf ms", page, re.IGNORECASE), page  # numbers only
