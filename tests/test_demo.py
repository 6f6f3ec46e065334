"""The demo (``python -m kernels.demo``) names each kernel as ``triton-dist-tune`` and the tuning
records do, by its Triton function's name, and takes either that name or its short one."""

import json

import pytest
from helpers import run_cli

from kernels import demo


def test_the_demo_names_kernels_as_the_command_line_does_and_takes_either_name(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert demo.main(["add", "softmax_kernel", "add_kernel", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    headers = [line.split("  ")[0] for line in printed.splitlines() if "(demo: " in line]
    assert headers == ["add_kernel (demo: add)", "softmax_kernel (demo: softmax)"], printed  # once each
    report = json.loads(out.read_text())
    assert [(r["kernel"], r["demo"]) for r in report] == [("add_kernel", "add"), ("softmax_kernel", "softmax")]
    for name in ("add_kernel", "softmax_kernel"):  # the command line finds each by the name the demo printed
        shown = run_cli("show", name, "--exact", "--kernels")
        assert shown.returncode == 0 and name in shown.stdout, shown.stderr
    assert run_cli("show", "add", "--exact").returncode == 1  # (and the short name is no entry's)


def test_an_unknown_kernel_lists_both_names(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        demo.main(["nope", "--out", str(tmp_path / "results.json")])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "unknown kernel(s) nope" in error and "add, layernorm" in error and "add_kernel, layernorm_kernel" in error
    assert not (tmp_path / "results.json").exists()
