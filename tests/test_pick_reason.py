"""A pick that is not the fastest shown is explained where the times are shown, and what timed is
named: the printout (``TRITON_PRINT_AUTOTUNING``), the demo, ``show``, after a tuning and after a
disk hit. A timer plugin makes the tie: the first candidate in the given order 0.6% slower than
the others, every time (within the 1% tie, so the first keeps the pick)."""

import re

import pytest
import torch
import triton
from helpers import DEVICE, run_cli

from kernels import KERNELS
from triton_dist_plugin import hookimpl
from triton_dist_plugin.reporting import pick_reason

ADD = KERNELS["add"]


class FirstSlower:
    """Times each candidate at 1.0 ms, the first of the given configs at 1.006 ms."""

    def __init__(self, first):
        self.first, self.rounds, self.asked = first, set(), {}

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        self.rounds.add(request.n_repeat)
        self.asked.setdefault(str(request.config), []).append(request.n_repeat)
        return 1.006 if request.config.kwargs == self.first.kwargs else 1.0


@pytest.fixture
def tied(plugins, recorder, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    configs = ADD.configs(DEVICE)
    timer = FirstSlower(configs[0])
    plugins(timer, name="first-slower")
    return configs, recorder


def _launch(configs):
    kernel = triton.autotune(configs=configs, key=ADD.key)(ADD.jit)
    x, y = ADD.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(ADD.launch(kernel, x, y), x + y)
    return kernel


WHY = re.compile(r"why this pick, 0\.6% slower here: too close to call over \d+ interleaved rounds \(noise not "
                 r"measured, 2\.0% assumed\); a tie goes to the first in the configs' order")


def test_the_printout_says_why_and_what_timed_after_a_tuning_and_a_hit(tied, monkeypatch, capsys):
    configs, recorder = tied
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    assert _launch(configs).best_config.kwargs == configs[0].kwargs  # the tie: the first in the given order
    record = recorder.records[-1]
    assert record.decision["tie"] and record.timer == "plugin 'first-slower'", (record.decision, record.timer)
    tuned = capsys.readouterr().out
    _launch(configs)  # a new kernel object: the disk's entry, its decision and timer with it
    assert recorder.records[-1].cache_hit
    hit = capsys.readouterr().out
    for out in (tuned, hit):
        assert "(timed by plugin 'first-slower' on " in out and "wall timing" not in out, out
        assert len(WHY.findall(out)) == 1 and "the pick is the fastest" not in out, out
        assert re.search(r"[-+]-\d|took -|-\d+(\.\d+)?% (longer|slower)", out) is None, out  # signs agree with words


def test_the_demo_and_show_say_why_where_the_times_are_shown(tied, tmp_path, capsys):
    from kernels import demo

    configs, _ = tied
    assert demo.main(["--out", str(tmp_path / "demo.json"), "add"]) == 0
    out = capsys.readouterr().out
    assert len(WHY.findall(out)) == 1 and "timed by plugin 'first-slower'" in out, out
    lines = [line.rstrip() for line in out.splitlines()]
    why = next(i for i, line in enumerate(lines) if WHY.search(line))
    rows = lines[why - len(configs):why]  # right below the candidates' times
    assert all(r.endswith((" ms", "<- pick")) for r in rows) and sum(r.endswith("<- pick") for r in rows) == 1, lines
    shown = run_cli("show", "add_kernel")
    assert shown.returncode == 0, shown.stderr
    assert len(WHY.findall(shown.stdout)) == 1 and "timed by: plugin 'first-slower'" in shown.stdout, shown.stdout


def test_the_runs_a_plugin_was_asked_for_are_said_as_asked(plugins, recorder):
    """A space large enough for a second round: the note says its runs were asked of the plugin."""
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512) for w in (1, 2, 4)]
    timer = FirstSlower(configs[0])
    plugins(timer, name="first-slower")
    _launch(configs)
    notes = " ".join(recorder.records[-1].notes)
    assert "asked of plugin 'first-slower'" in notes, notes
    assert {5, None} <= timer.rounds, timer.rounds  # the screening round's runs and the full measurement's
    # As docs/plugins.md counts them under the wall clock: a screening round, a second round, the
    # full measurement, one call each, then up to settle_rounds settling rounds of 3 runs.
    finalist = timer.asked[str(configs[0])]
    assert finalist[:3] == [5, 25, None] and 1 <= len(finalist[3:]) <= 6 and set(finalist[3:]) == {3}, finalist


@pytest.mark.parametrize("decision, expect", [
    (None, "no decision between finalists was recorded"),
    ({"margin": 0.004, "noise": 0.03, "rounds": 3, "confidence": 1.0, "tie": True}, "too close to call over 3"),
    ({"margin": 0.02, "noise": 0.01, "noise_known": True, "rounds": 4, "confidence": 0.75, "tie": False},
     "4 interleaved rounds after these times decided (over them the closest other took 2.0% longer; noise 1.0%)"),
    ({"margin": "x", "noise": 0.01, "rounds": 4, "confidence": 0.75, "tie": False}, "no decision"),  # from a file
])
def test_one_wording_for_every_decision(decision, expect):
    assert pick_reason.line(1.0, [2.0, 1.5], decision) is None  # the pick is the fastest: nothing to say
    said = pick_reason.line(1.01, [2.0, 1.0, None], decision)
    assert said.startswith("why this pick, 1.0% slower here: ") and expect in said, said
    assert "\n" not in said and len(said) < 200
    assert pick_reason.line(1.00012, [1.0], decision).startswith("why this pick, 0.01% slower here: ")
    assert pick_reason.line(1.00001, [1.0], decision).startswith("why this pick, less than 0.01% slower here: ")


def _view(pick_ms, runner_ms, decision, spread=None):
    from types import SimpleNamespace

    def row(label, ms, pick):
        low, high = (ms * (1 - spread), ms * (1 + spread)) if spread else (None, None)
        return {"label": label, "ms": ms, "p20": low, "p80": high, "round": "full", "pick": pick, "config": label}

    rows = [row("A", pick_ms, True), row("B", runner_ms, False)]
    return SimpleNamespace(pick=rows[0], rows=rows, record={"decision": decision} if decision else {})


TIE = {"margin": -0.01, "noise": 0.02, "noise_known": True, "rounds": 6, "confidence": 0.5, "tie": True}
CLEAR = {"margin": 0.6145, "noise": 0.05, "noise_known": True, "noise_capped": True, "rounds": 0,
         "confidence": 1.0, "tie": False}


@pytest.mark.parametrize("pick_ms, runner_ms, decision, spread", [
    (1.0, 1.01, TIE, 0.002),  # the pick faster in the full measurement, the other faster over the rounds
    (1.006, 1.0, TIE, None),  # the pick slower here
    (1.0, 1.61449, CLEAR, 0.01),  # a clear pick: the full measurement decided
    (1.0, 1.61449, CLEAR, None),  # ... with one number per candidate: the decision's noise judges
    (1.0, 1.02, None, None),  # an older entry: no decision, no spread
])
def test_the_report_box_gives_one_margin_and_one_noise_per_measurement_with_their_signs(
        pick_ms, runner_ms, decision, spread):
    from triton_dist_plugin.reporting.html_charts import verdict

    kind, short, sentence = verdict(_view(pick_ms, runner_ms, decision, spread))
    text = sentence.replace("\x02", "").replace("\x03", "")
    assert re.search(r"[-+]-\d|took [-+]|-\d+(\.\d+)?% (longer|slower)", short + text) is None, (short, text)
    assert text.count("In the full measurement") == 1, text
    shares = re.findall(r"\d+\.\d%", text)
    full = abs(runner_ms / pick_ms - 1) if runner_ms > pick_ms else pick_ms / runner_ms - 1
    assert f"{full:.1%}" in text and f"{full:.1%}" in short, (short, text)  # the table's and the box's agree
    if decision is None or not decision["rounds"]:  # one measurement decided: its margin once, one noise
        assert shares.count(f"{full:.1%}") == 1 and "over the rounds" not in text, text
        assert ("p20" in text) != ("noise" in text and "p20" not in text), text
    else:  # the rounds' margin said as theirs
        assert "over the rounds" in text or "interleaved rounds" in text, text
    if pick_ms > runner_ms:
        assert short.startswith("-") and "the pick slower here" in short, short


class ScreensOnly:
    """Times the rounds that ask for a count (screening, second round); the built-in the rest."""

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        if request.n_repeat is None:
            return None
        request.call()
        return 1.0 + 0.1 * request.config.kwargs["BLOCK"] / 512


def test_the_timer_named_is_the_one_that_timed_the_times_shown(plugins, recorder):
    """A plugin that times only the screening rounds (its name holding a parenthesis) is said for
    those rounds; the full measurement, which the views show, was the built-in's."""
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512) for w in (1, 2, 4)]
    plugins(ScreensOnly(), name="screens (v2)")
    _launch(configs)
    record = recorder.records[-1]
    assert record.timer is None and record.method == "wall", record.timer
    notes = " ".join(record.notes)
    assert "runs (asked of plugin 'screens (v2)') in" in notes, notes  # the second round was the plugin's
    assert not any(n.startswith("measured") and "asked of" in n for n in record.notes), record.notes
    from triton_dist_plugin.reporting.html_charts import _phases

    steps = dict((cls, sec) for cls, _, sec in _phases({"bench_time_s": record.bench_time, "notes": record.notes}))
    assert steps.get("second", 0) > 0 and steps.get("measuring", 0) > 0, steps  # a ')' in the name: still parsed


def test_odd_decisions_from_a_file_are_worded_truthfully():
    failed = {"margin": None, "noise": 0.02, "rounds": 2, "confidence": 0.0, "tie": False, "rounds_failed": True}
    assert pick_reason.word(failed) == "clear" and "the full measurement decided" in pick_reason.sentence(failed)
    said = pick_reason.line(1.0, [0.0], {"margin": 0.5, "noise": 0.02, "rounds": 0, "confidence": 1.0, "tie": False})
    assert said.startswith("why this pick, slower here: the decision recorded with it") and "/a" not in said, said
    for bad in ({**failed, "rounds": -2}, {**failed, "rounds": 2.5}, {**failed, "confidence": 3},
                {**failed, "noise": float("nan")}):
        assert pick_reason.decision_of(bad) is None and pick_reason.word(bad) == "-"
    assert pick_reason.rival(float("inf")) == "the closest other took longer"


def test_a_stored_timer_is_a_short_printable_line_or_the_record_is_refused(tied, tmp_path):
    import json

    from triton_dist_plugin.store import records

    configs, _ = tied
    _launch(configs)
    (path,) = (tmp_path / "tdp-cache" / "kernels").glob("*/*.json")
    record = json.loads(path.read_text())
    assert record["timer"] == "plugin 'first-slower'" and records.valid(record, "kernel")
    for timer in ("x" * 201, "plugin 'a'\n\x1b[31mred", 7):
        assert not records.valid({**record, "timer": timer}, "kernel"), timer


def test_settling_a_finalist_timed_at_zero_does_not_divide_by_zero():
    from triton_dist_plugin import settle
    from triton_dist_plugin.policy import current

    pick, decision = settle.settle({"a": [0.0, 0.0, 0.0], "b": [1.0, 1.0, 1.0]}, ["a", "b"], lambda cs: {}, current())
    assert pick == "a" and decision["margin"] is None and decision["rounds"] == 0
