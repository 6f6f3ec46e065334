"""The installed ``triton-dist-tune`` console script over real cache files."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import DEVICE, ROOT

from triton_dist_plugin.tune import autotune

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    # A kernel-level entry in the format Triton's Autotuner.check_disk_cache writes
    # (it writes none under the interpreter, so this one is laid down by hand).
    kdir = tmp_path / "triton-cache" / "3f2a"
    kdir.mkdir(parents=True)
    (kdir / "matmul_kernel.autotune.json").write_text(json.dumps({
        "key": [512, 512, 512, "torch.float16"],
        "configs_timings": [[{"kwargs": {"BLOCK_M": 64}, "num_warps": 4, "num_stages": 3, "pre_hook": None},
                             [0.5, 0.4, 0.6]],
                            [{"kwargs": {"BLOCK_M": 128}, "num_warps": 8, "num_stages": 3, "pre_hook": None},
                             [0.3, 0.2, 0.4]]]}))

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def scaled_sum(x, factor):
        return (x * factor).sum()

    scaled_sum(torch.ones(8, device=DEVICE))
    scaled_sum(torch.ones(4, device=DEVICE))
    return tmp_path


def cli(*args):
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return result


def test_console_script_is_installed():
    assert SCRIPT.exists(), "pip install -e . installs the triton-dist-tune console script"


def test_list_shows_function_and_kernel_entries(homes):
    result = cli("list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["kind", "name", "key", "pick"]
    assert sum("scaled_sum" in line for line in lines) == 2
    assert any(line.startswith("kernel") and "matmul_kernel" in line and "0.3000" in line for line in lines)


def test_show_lists_every_candidate_and_marks_the_pick(homes):
    result = cli("show", "matmul_kernel")
    assert result.returncode == 0
    assert "BLOCK_M=64" in result.stdout and "BLOCK_M=128" in result.stdout
    picked = [line for line in result.stdout.splitlines() if line.rstrip().endswith("*")]
    assert len(picked) == 1 and "BLOCK_M=128" in picked[0]
    missing = cli("show", "nothing-like-this")
    assert missing.returncode == 1 and "triton-dist-tune list" in missing.stderr


def test_export_json_and_csv(homes, tmp_path):
    out = tmp_path / "manifest.json"
    assert cli("export", "-o", str(out)).returncode == 0
    data = json.loads(out.read_text())
    assert {d["kind"] for d in data} == {"function", "kernel"} and len(data) == 3
    rows = list(csv.DictReader(io.StringIO(cli("export", "--format", "csv", "--functions").stdout)))
    assert len(rows) == 2 and all(r["kind"] == "function" for r in rows)


def test_clear_needs_a_name_or_all(homes):
    refused = cli("clear")
    assert refused.returncode == 2 and "--all" in refused.stderr
    assert "cleared 2 entries" in cli("clear", "scaled_sum").stdout
    assert "scaled_sum" not in cli("list").stdout
    assert "cleared 1 entries" in cli("clear", "--all").stdout
    assert "nothing tuned yet" in cli("list").stdout


@pytest.mark.parametrize("bad", [{"candidates": [1, 2]}, {"candidates": "abc"}, {"timestamp": 5},
                                 {"configs_timings": "x"}, {"configs_timings": [[1, 2]]}])
def test_a_cache_file_with_wrong_field_types_is_skipped_with_a_warning(homes, bad):
    if "configs_timings" in bad:
        path = homes / "triton-cache" / "3f2a" / "bad.autotune.json"
        path.write_text(json.dumps({"key": [1], **bad}))
    else:
        good = next((homes / ".triton_dist" / "autotune").glob("*/*.json"))
        path = good.with_name("bad.json")
        path.write_text(json.dumps({**json.loads(good.read_text()), **bad}))
    for command in ("list", "show", "export"):
        result = cli(command, *(["scaled_sum"] if command == "show" else []))
        assert result.returncode == 0, result.stderr
        assert f"skipping {path}" in result.stderr
    listed = cli("list").stdout
    assert sum("scaled_sum" in line for line in listed.splitlines()) == 2  # the good entries still show


def test_list_shows_the_plugins_persisted_kernel_picks_and_clear_of_nothing_fails(homes):
    import triton

    from kernels import KERNELS

    add = KERNELS["add"]
    x, y = add.make_inputs("tiny", DEVICE)
    add.launch(triton.autotune(configs=add.configs(DEVICE), key=add.key)(add.jit), x, y)
    listed = cli("list", "--kernels")
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("kernel") and "add_kernel" in line and "(1000," in line
               for line in listed.stdout.splitlines())
    shown = cli("show", "add_kernel")
    assert shown.returncode == 0 and "*" in shown.stdout
    missing = cli("clear", "no_such_kernel")
    assert missing.returncode == 1 and "no entry matches" in missing.stderr
    cleared = cli("clear", "add_kernel")
    assert cleared.returncode == 0 and "cleared 1 entries" in cleared.stdout
    assert "add_kernel" not in cli("list").stdout
