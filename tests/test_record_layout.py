"""One record layout (format 3) for kernel-level and function-level picks, and the older layouts
still read: written by both kinds alike, checked field by field (a record that does not fit is
refused naming the field), older entries (built here as the previous releases wrote them) read,
served, listed, exported and imported; a function-level pick is keyed on the search and its
effort as a kernel-level one is. Real kernels under the interpreter, real files; random records
from hypothesis.
"""

import copy
import json

import pytest
import torch
import triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trust_records import CONFIGS, copy_or_nan, kernel_entries, mutated

from triton_dist_plugin.cli import commands as cli
from triton_dist_plugin.store import cache, describe, manifest, persist, records
from triton_dist_plugin.tune import autotune

ROW = {"index", "config", "ms", "timing", "failure", "measured"}
SPACE = [{"scale": 1.0}, {"scale": 2.0}, {"scale": 3.0}]
N = 100
DEFAULTS = {"search": "halving"}


def launch(kernel, n=N):
    x = torch.randn(n)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return x, out


def kernel():
    return triton.autotune(configs=CONFIGS[::2], key=["n"])(copy_or_nan)


class Scaled:
    """A function tuner over ``SPACE`` and the scales it was called with (a hit calls only the pick)."""

    def __init__(self):
        self.calls = []

        def scaled(x, scale):
            self.calls.append(scale)
            return x * scale

        self.fn = scaled
        self.tuner = autotune(SPACE, key_fn=lambda x: x.numel())(scaled)

    def __call__(self, x):
        return self.tuner(x)


def function_file(root) -> list:
    return sorted(p for p in root.glob("*/*.json"))


# -- both kinds write the one layout -------------------------------------------------------------

def _same_layout(record: dict, kind: str) -> None:
    assert record["format"] == records.FORMAT == 3
    assert records.check(record, kind) is record
    assert all(set(c) == ROW for c in record["candidates"]), record["candidates"]
    pick = next(c for c in record["candidates"] if c["index"] == record["pick"])
    assert pick["config"] == record["pick_config"] and pick["ms"] == pick["timing"][0]
    assert isinstance(record["context"], dict) and record["context"]["search"] == "halving"
    assert "effort" not in record["context"]  # the default effort keys nothing, as before efforts existed


def test_a_kernel_writes_the_one_layout_with_each_rows_position_among_its_configs(tmp_path):
    launch(kernel())
    (path,) = kernel_entries(tmp_path / "tdp-cache")
    record = json.loads(path.read_text())
    _same_layout(record, "kernel")
    described = [describe.describe(c) for c in CONFIGS[::2]]
    assert {c["index"]: c["config"] for c in record["candidates"]} == dict(enumerate(described))


def test_a_function_writes_the_one_layout_keyed_on_the_search(tmp_path):
    Scaled()(torch.ones(4))
    (path,) = function_file(tmp_path / "tdp-cache")
    record = json.loads(path.read_text())
    _same_layout(record, "function")
    assert record["context"] == DEFAULTS and record["retained"] == [0, 1, 2]
    source, hw = record["source"], record["hardware"]
    assert path.stem == describe.entry_digest(source, hw, record["key"], record["context"])


# -- a function-level pick is keyed on the search and its effort ---------------------------------

@pytest.mark.parametrize("setting, value", [("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive"),
                                            ("TRITON_DIST_AUTOTUNE_EFFORT", "full")])
def test_a_function_pick_is_not_served_to_a_more_thorough_search_or_effort(setting, value, monkeypatch, tmp_path):
    x = torch.ones(4)
    Scaled()(x)
    with monkeypatch.context() as m:
        m.setenv(setting, value)
        other = Scaled()
        other(x)
        assert len(other.calls) > 1  # tuned again: every candidate, then the pick
        again = Scaled()
        again(x)
        assert len(again.calls) == 1  # its own pick, now stored beside the first
    first = Scaled()
    first(x)
    assert len(first.calls) == 1  # the defaults' pick still stands
    contexts = sorted(json.dumps(json.loads(p.read_text())["context"]) for p in function_file(tmp_path / "tdp-cache"))
    assert len(contexts) == 2 and json.dumps(DEFAULTS) in contexts


def test_a_function_pick_serves_a_less_thorough_effort_and_one_of_that_effort_stays_its_own(monkeypatch, tmp_path):
    """The defaults' pick serves ``quick`` (a harder look knows no less); a pick tuned at ``quick``
    (here, once the defaults' is gone) serves ``quick`` only: the defaults tune again."""
    x = torch.ones(4)
    Scaled()(x)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_EFFORT", "quick")
    served = Scaled()
    served(x)
    assert len(served.calls) == 1  # the defaults' pick, nothing timed
    assert len(list(function_file(tmp_path / "tdp-cache"))) == 1
    for path in function_file(tmp_path / "tdp-cache"):
        path.unlink()
    tuned = Scaled()
    tuned(x)
    assert len(tuned.calls) > 1  # none left: tuned at quick
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_EFFORT")
    defaults = Scaled()
    defaults(x)
    assert len(defaults.calls) > 1  # the quick pick is not the defaults'


# -- older entries, as the previous releases wrote them, are still read -------------------------

def _old_function_record(fn, fmt: int, key: int = 4) -> dict:
    """A function entry as formats 1 and 2 wrote it: ``ms`` the whole timing, no ``context``
    (format 1: no ``measured`` either); its pick the second candidate."""
    reprs = [describe.describe(c) for c in SPACE]
    rows = [{"index": 0, "config": reprs[0], "ms": [2.0, 1.9, 2.2], "failure": None},
            {"index": 1, "config": reprs[1], "ms": [1.0, 0.9, 1.2], "failure": None},
            {"index": 2, "config": reprs[2], "ms": None, "failure": "out of workspace"}]
    if fmt == 2:
        for row in rows:
            row["measured"] = row["failure"] is None
    return {"format": fmt, "function": f"{fn.__module__}.{fn.__qualname__}", "key": repr(key),
            "source": describe.source_digest(fn), "hardware": describe.hardware("cpu", 1),
            "versions": describe.versions(), "timestamp": "2025-01-01T00:00:00+00:00",
            "pick": 1, "pick_config": reprs[1], "method": "wall", "bench_time_s": 0.5,
            "retained": [0, 1, 2], "candidates": rows}


def _plant_old_function(tmp_path, fmt: int):
    """A tuner and its key's entry of format ``fmt``, at the place those formats gave it."""
    tuner = Scaled()
    record = _old_function_record(tuner.fn, fmt)
    digest = describe.entry_digest(record["source"], record["hardware"], record["key"])  # no context then
    path = tmp_path / "tdp-cache" / cache.safe_name(tuner.fn.__name__) / f"{digest}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return tuner, record, path


@pytest.mark.parametrize("fmt", [1, 2])
def test_an_old_function_entry_is_served_under_the_default_search_and_effort(fmt, tmp_path, recorder):
    tuner, record, path = _plant_old_function(tmp_path, fmt)
    assert torch.equal(tuner(torch.ones(4)), torch.ones(4) * 2.0)
    assert tuner.calls == [2.0] and tuner.tuner.best_configs[4] == SPACE[1]  # nothing timed
    hit = recorder.records[-1]
    assert hit.cache_hit and hit.timings[describe.describe(SPACE[0])] == [2.0, 1.9, 2.2]
    assert function_file(tmp_path / "tdp-cache") == [path]  # read where it was: nothing written
    current = records.check(record, "function")
    assert current["format"] == 3 and current["context"] == DEFAULTS and current["pick"] == 1
    assert [c["ms"] for c in current["candidates"]] == [2.0, 1.0, None] and all(set(c) == ROW
                                                                                for c in current["candidates"])


@pytest.mark.parametrize("setting, value", [("TRITON_DIST_AUTOTUNE_SEARCH", "optuna"),
                                            ("TRITON_DIST_AUTOTUNE_EFFORT", "full"),
                                            ("TRITON_DIST_AUTOTUNE_EFFORT", "quick")])
def test_an_old_function_entry_is_served_where_a_pick_of_the_defaults_would_be(setting, value, tmp_path, monkeypatch):
    """It recorded neither: it is taken as tuned under the defaults, so it serves ``quick`` (which
    looks less hard) and is tuned again under another search or a harder effort."""
    tuner, _, path = _plant_old_function(tmp_path, 2)
    monkeypatch.setenv(setting, value)
    tuner(torch.ones(4))
    if value == "quick":
        assert len(tuner.calls) == 1 and len(function_file(tmp_path / "tdp-cache")) == 1
    else:
        assert len(tuner.calls) > 1
        assert len(function_file(tmp_path / "tdp-cache")) == 2  # its own beside it
    assert path.exists()  # the old entry is left as it was


def _old_kernel_record(store: persist.KernelStore, key: str) -> dict:
    """A kernel entry as format 2 wrote it: rows without ``index``, the pick by its description only."""
    described = [describe.describe(c) for c in CONFIGS[::2]]
    rows = [{"config": described[0], "ms": 3.0, "timing": [3.0, 2.9, 3.2], "failure": None, "measured": True},
            {"config": described[1], "ms": 1.5, "timing": [1.5, 1.4, 1.6], "failure": None, "measured": True}]
    return {"format": 2, "kernel": "copy_or_nan", "key": key, "source": store.source, "hardware": store.hw,
            "context": store.context, "versions": describe.versions(), "timestamp": "2025-01-01T00:00:00+00:00",
            "pick_config": described[1], "method": "wall", "bench_time_s": 0.25, "candidates": rows,
            "space": described, "notes": ["screened 2 candidates"]}


def _plant_old_kernel(tmp_path):
    store = persist.KernelStore("copy_or_nan", copy_or_nan, "cpu", 1, CONFIGS[::2], "wall")
    key = repr((N, "torch.float32", "torch.float32"))
    record = _old_kernel_record(store, key)
    path = store.dir / f"{describe.entry_digest(record['source'], record['hardware'], key, record['context'])}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return record, path


def test_an_old_kernel_entry_is_served_listed_and_moved_as_it_was(tmp_path, recorder, monkeypatch, capsys):
    record, path = _plant_old_kernel(tmp_path)
    tuned = kernel()
    x, out = launch(tuned)
    torch.testing.assert_close(out, x)
    assert recorder.records[-1].cache_hit and not recorder.timed
    timings = {describe.describe(c): t for c, t in tuned.configs_timings.items()}
    assert describe.describe(tuned.best_config) == record["pick_config"]
    assert timings == {c["config"]: c["timing"] for c in record["candidates"]}
    assert kernel_entries(tmp_path / "tdp-cache") == [path]
    assert cli.main(["show", "copy_or_nan"]) == 0
    shown = capsys.readouterr()
    assert "1.5000" in shown.out and "skipping" not in shown.err
    assert cli.main(["report", "-o", str(tmp_path / "r.html")]) == 0
    exported = tmp_path / "m.json"
    assert cli.main(["export", "-o", str(exported)]) == 0
    (item,) = json.loads(exported.read_text())
    assert item["record"] == record  # as stored: any release that reads format 2 can import it
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "elsewhere"))
    assert manifest.import_file(exported) == (1, 0, [])
    (moved,) = kernel_entries(tmp_path / "elsewhere")
    assert moved.name == path.name and json.loads(moved.read_text()) == record
    launch(kernel())
    assert recorder.records[-1].cache_hit and not recorder.timed


def test_an_old_function_entry_is_exported_as_stored_and_imported_where_it_was(tmp_path, monkeypatch):
    tuner, record, path = _plant_old_function(tmp_path, 1)
    exported = tmp_path / "m.json"
    assert cli.main(["export", "-o", str(exported)]) == 0
    (item,) = json.loads(exported.read_text())
    assert item["record"] == record and item["pick"] == record["pick_config"]
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "elsewhere"))
    assert manifest.import_file(exported) == (1, 0, [])
    (moved,) = function_file(tmp_path / "elsewhere")
    assert moved.name == path.name
    again = Scaled()
    again(torch.ones(4))
    assert again.calls == [2.0]
    # The same record claiming this version's format: its id would cover its context, so that place is not its own.
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps([{**item, "record": records.check(record, "function")}]))
    written, present, skipped = manifest.import_file(forged)
    assert written == 0 and "its id does not match its own fields" in skipped[0]


# -- a record that does not fit the layout is refused, naming the field --------------------------

def _valid(kind: str) -> dict:
    rows = [records.row(0, "a", [1.0, 0.9, 1.1], None, True), records.row(2, "b", [2.0] * 3, None, True),
            records.row(3, "c", 0.5, None, False), records.row(5, "d", [float("inf")] * 3, "boom", False)]
    return {"format": 3, kind: "f", "key": "(1000, 'torch.float32')", "source": "s", "timestamp": "t",
            "method": "wall", "hardware": {"device": "cpu"}, "versions": {}, "context": {"search": "halving"},
            "bench_time_s": 0.1, "pick": 0, "pick_config": "a", "candidates": rows,
            **({"retained": [0, 2, 3, 5]} if kind == "function" else {"space": ["a", "b", "c", "d"]})}


NOT_THE_LAYOUT = {
    "a row without its index": (lambda r: r["candidates"][1].pop("index"), r"'candidates\[1\]\.index' is missing"),
    "a row without its timing": (lambda r: r["candidates"][2].pop("timing"), r"'candidates\[2\]\.timing' is missing"),
    "a row without measured": (lambda r: r["candidates"][0].pop("measured"), r"'candidates\[0\]\.measured' is miss"),
    "ms the whole timing": (lambda r: r["candidates"][1].update(ms=[2.0] * 3), r"'candidates\[1\]\.ms' is list"),
    "ms not the timing's p50": (lambda r: r["candidates"][1].update(ms=1.5), r"'candidates\[1\]\.timing' has the p50"),
    "no context": (lambda r: r.pop("context"), r"'context' is NoneType, expected an object"),
    "no pick index": (lambda r: r.pop("pick"), r"'pick' is NoneType, expected a whole number"),
    "a pick no row has": (lambda r: r.update(pick=4), r"'pick' is 4, none of the candidates' index"),
    "the pick's config not its row's": (lambda r: r.update(pick_config="b"), r"'pick_config' is not the config of"),
    "a pick not measured fully": (lambda r: r.update(pick=3, pick_config="c"), r"'pick' names candidates\[2\], which "
                                                                                r"was not measured fully"),
    "a pick that failed": (lambda r: r.update(pick=5, pick_config="d"), r"'pick' names candidates\[3\], which failed"),
    "an index twice": (lambda r: r["candidates"][2].update(index=0), r"'candidates\[2\]' repeats candidates\[0\]"),
    "an index retained does not list": (lambda r: r.update(retained=[0, 2, 3]), r"'candidates\[3\]\.index' is 5"),
    "retained twice": (lambda r: r.update(retained=[0, 0, 2, 3, 5]), r"'retained' lists a candidate twice"),
    "a note not text": (lambda r: r.update(notes=["ok", 7]), r"'notes\[1\]' is int, expected text"),
    "a space entry not text": (lambda r: r.update(space=["a", None]), r"'space\[1\]' is NoneType, expected text"),
}


@pytest.mark.parametrize("kind", ["function", "kernel"])
@pytest.mark.parametrize("case", list(NOT_THE_LAYOUT))
def test_a_record_that_does_not_fit_the_layout_is_refused_naming_the_field(kind, case):
    record = _valid(kind)
    assert records.check(copy.deepcopy(record), kind)
    change, message = NOT_THE_LAYOUT[case]
    change(record)
    with pytest.raises(records.RecordError, match=message):
        records.check(record, kind)


def test_a_kernel_record_listing_one_config_twice_is_refused():
    """Readers find a kernel's rows by description: a function's may repeat one (equal dicts in its space)."""
    record = _valid("kernel")
    record["candidates"][1]["config"] = "a"
    with pytest.raises(records.RecordError, match=r"'candidates\[1\]' repeats candidates\[0\]"):
        records.check(record, "kernel")
    assert records.check({**record, "function": "f"}, "function")


def test_a_stored_record_that_does_not_fit_is_warned_about_and_replaced(tmp_path):
    x = torch.ones(4)
    Scaled()(x)
    (path,) = function_file(tmp_path / "tdp-cache")
    record = json.loads(path.read_text())
    record["candidates"][0].pop("timing")
    path.write_text(json.dumps(record))
    tuner = Scaled()
    with pytest.warns(RuntimeWarning, match=r"field 'candidates\[0\]\.timing' is missing"):
        tuner(x)
    assert len(tuner.calls) > 1 and records.valid(json.loads(path.read_text()), "function")


# -- every older record the check lets through reads in this layout ------------------------------

def _plain(x, scale):
    return x * scale


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_whatever_an_older_layout_lets_through_is_read_in_this_one(data):
    """Random changes to older entries of both kinds: each is refused with ``RecordError``, or
    read as a record of this layout that passes the check as it stands."""
    store = persist.KernelStore("copy_or_nan", copy_or_nan, "cpu", 1, CONFIGS[::2], "wall")
    old = data.draw(st.sampled_from([("kernel", _old_kernel_record(store, "(5,)")),
                                     ("function", _old_function_record(_plain, 1)),
                                     ("function", _old_function_record(_plain, 2))]))
    kind, record = old[0], data.draw(mutated(old[1]))
    try:
        current = records.check(record, kind)
    except records.RecordError:
        return
    assert current["format"] == 3 and records.check(current, kind) is current
    assert all(set(c) == ROW for c in current["candidates"])


def test_a_failed_row_repeating_the_picks_description_never_speaks_for_the_pick(tmp_path, recorder):
    """Equal entries of ``config_space`` share a description: a hit's timings take the pick's own
    row, not a later failed one that describes it too."""
    x = torch.ones(4)
    Scaled()(x)
    (path,) = function_file(tmp_path / "tdp-cache")
    record = json.loads(path.read_text())
    record["candidates"].append({"index": 7, "config": record["pick_config"], "ms": None, "timing": None,
                                 "failure": "boom", "measured": True})
    record["retained"] = record["retained"] + [7]
    assert records.check(record, "function")
    path.write_text(json.dumps(record))
    Scaled()(x)
    hit = recorder.records[-1]
    assert hit.cache_hit and hit.timings[record["pick_config"]][0] < float("inf")
