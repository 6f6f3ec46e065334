"""Tuning ahead of time: the API and ``triton-dist-tune pretune``, then a later process that
times nothing for the pretuned keys. Real kernels under the interpreter, real processes."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, ROOT, run_python

from kernels import KERNELS
from triton_dist_plugin.pretune import cases, pretune

ADD = KERNELS["add"]
SCRIPT = Path(sys.executable).parent / "triton-dist-tune"
ENV = {"TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}


def cli(*args):
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, env={**os.environ, **ENV}, capture_output=True, text=True,
                          timeout=300)


def test_cases_are_every_combination():
    assert cases(n=[1, 2], dtype=["a"]) == [{"n": 1, "dtype": "a"}, {"n": 2, "dtype": "a"}]


def test_pretune_tunes_each_key_once_and_reports_it():
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)

    def step(n):
        x = torch.randn(n, device=DEVICE)
        torch.testing.assert_close(ADD.launch(kernel, x, x), 2 * x)

    done = pretune(step, cases(n=[300, 500, 300]))
    assert [(t.kernel, t.key[0], t.timed) for t in done] == [("add_kernel", 300, True), ("add_kernel", 500, True)]
    assert done[1].case == {"n": 500} and done[0].pick == str(kernel.cache[done[0].key])
    with pytest.raises(RuntimeError, match=r"case 0 \{'n': -1\} failed"):
        pretune(step, [{"n": -1}])


def test_the_command_pretunes_and_a_later_process_times_nothing(tmp_path):
    case_file = tmp_path / "cases.json"
    case_file.write_text(json.dumps([{"n": 300}, {"n": 500}]))
    for spec in (str(case_file), "pretune_target:sizes"):
        result = cli("pretune", "pretune_target:step", "--cases", spec)
        assert result.returncode == 0, result.stderr[-2000:]
    assert "2 kernel keys" in result.stdout and "from disk" in result.stdout  # the second run found them
    later = run_python(textwrap.dedent("""
        import json, triton_dist_plugin as tdp
        from helpers import Recorder
        rec = Recorder()
        tdp.register(rec)
        import pretune_target
        for n in (300, 500):
            pretune_target.step(n)
        print(json.dumps(len(rec.timed)))
    """), env=ENV)
    assert later.returncode == 0, later.stderr[-2000:]
    assert json.loads(later.stdout.strip().splitlines()[-1]) == 0


def test_bad_cases_are_clear_errors(tmp_path):
    bad = tmp_path / "cases.json"
    bad.write_text('{"n": 3}')
    result = cli("pretune", "pretune_target:step", "--cases", str(bad))
    assert result.returncode == 1 and "expected a JSON list" in result.stderr
    result = cli("pretune", "no_colon", "--cases", str(bad))
    assert result.returncode == 1 and "MODULE:NAME" in result.stderr
