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
        self.first, self.rounds = first, set()

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        self.rounds.add(request.n_repeat)
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
