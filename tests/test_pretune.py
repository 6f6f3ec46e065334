"""Tuning ahead of time: the API and ``triton-dist-tune pretune``, then a later process that
times nothing for the pretuned keys. Real kernels under the interpreter, real processes."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, ROOT, python, run_python

from kernels import KERNELS
from triton_dist_plugin.cli.pretune import cases, pretune

ADD = KERNELS["add"]
SCRIPT = Path(sys.executable).parent / "triton-dist-tune"
ENV = {"TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}


def cli(*args):
    return python(SCRIPT, *args, env={**os.environ, **ENV}, timeout=300)


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


# A module of the user's own, in the directory the command runs from (never on PYTHONPATH).
OWN_MODULE = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def twice_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)


def step(n):
    x = torch.randn(n)
    out = torch.empty_like(x)
    twice_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, 2 * x)
'''


def test_the_command_imports_a_module_from_the_current_directory_as_python_m_does(tmp_path):
    (tmp_path / "my_ops.py").write_text(OWN_MODULE)
    (tmp_path / "cases.json").write_text('[{"n": 300}]')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TRITON_INTERPRET="1", HOME=str(tmp_path), TRITON_DIST_AUTOTUNE_DIR=str(tmp_path / "tdp"))
    result = python(SCRIPT, "pretune", "my_ops:step", "--cases", "cases.json", cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 kernel key over the cases in ")
    assert lines[1].split() == ["kernel", "key", "pick", "how", "seconds"]  # a header row, then a rule
    assert set(lines[2].replace(" ", "")) == {"-"} and len(lines[2].split()) == 5
    assert lines[3].startswith("twice_kernel  (300,") and " tuned " in lines[3]

    (tmp_path / "bad.json").write_text('[{"n": -1}]')
    failed = python(SCRIPT, "pretune", "my_ops:step", "--cases", "bad.json", cwd=tmp_path, env=env, timeout=300)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("triton-dist-tune pretune: case 0 {'n': -1} failed in step: RuntimeError: ")
    assert line.count("pretune:") == 1 and line.endswith("(my_ops.py:15)")  # the user's line it failed at


def test_a_failing_case_names_the_case_and_the_users_line(tmp_path):
    from triton_dist_plugin.cli.pretune import PretuneError

    def step(n):
        return torch.empty(n)

    expected = r"^case 1 \{'n': -2\} failed in step: RuntimeError: .*test_pretune.py:\d+\)$"
    with pytest.raises(PretuneError, match=expected):
        pretune(step, [{"n": 2}, {"n": -2}], progress=False)
