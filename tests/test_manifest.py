"""Moving picks between machines: ``export`` a manifest, ``import`` it (or name it in
``TRITON_DIST_AUTOTUNE_MANIFEST``) into another cache, and that cache's processes time nothing.
Real kernels under the interpreter, the installed console script, real processes and files."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, run_python

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"

# Tune (or find) the add kernel for n=1000 and print how many candidates were timed.
CHILD = textwrap.dedent("""
    import json, sys, triton, triton_dist_plugin as tdp
    sys.path.insert(0, "tests")
    from helpers import Recorder
    from kernels import KERNELS
    rec = Recorder()
    tdp.register(rec)
    add = KERNELS["add"]
    add.launch(triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit), *add.make_inputs("tiny", "cpu"))
    print(json.dumps(len(rec.timed)))
""")


def timed_in(root: Path, **env) -> int:
    result = run_python(CHILD, env={"TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(root), **env})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def cli(root: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(root)}
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def exported(tmp_path) -> Path:
    here = tmp_path / "here"
    assert timed_in(here) >= 3
    out = tmp_path / "manifest.json"
    assert cli(here, "export", "-o", str(out)).returncode == 0
    return out


def test_an_imported_manifest_makes_another_cache_time_nothing(tmp_path, exported):
    (item,) = [i for i in json.loads(exported.read_text()) if i.get("name") == "add_kernel"]
    assert item["relpath"].startswith("kernels/add_kernel/") and item["record"]["pick_config"] == item["pick"]
    there = tmp_path / "there"
    result = cli(there, "import", str(exported))
    assert result.returncode == 0 and "imported 1 entries" in result.stdout, result.stderr
    assert timed_in(there) == 0
    again = cli(there, "import", str(exported))
    assert "imported 0 entries" in again.stdout and "1 were already there" in again.stdout


def test_the_manifest_setting_loads_it_before_the_first_lookup(tmp_path, exported):
    assert timed_in(tmp_path / "elsewhere", TRITON_DIST_AUTOTUNE_MANIFEST=str(exported)) == 0


@pytest.mark.parametrize("change", ["hardware", "versions", "relpath"])
def test_entries_from_other_hardware_or_versions_are_skipped_with_a_reason(tmp_path, exported, change):
    items = json.loads(exported.read_text())
    item = next(i for i in items if i.get("name") == "add_kernel")
    if change == "relpath":
        item["relpath"] = "../outside.json"
    else:
        item["record"][change]["name" if change == "hardware" else "python"] = "something else"
    exported.write_text(json.dumps(items))
    there = tmp_path / "there"
    result = cli(there, "import", str(exported))
    expected = {"hardware": "measured on other hardware (name: 'something else'",
                "versions": "measured under other versions (python: 'something else'",
                "relpath": "not a cache entry's place"}[change]
    assert result.returncode == 0 and expected in result.stderr, result.stderr
    assert "imported 0 entries" in result.stdout and not (tmp_path / "outside.json").exists()
    assert timed_in(there) >= 3


def test_a_file_that_is_not_a_manifest_is_a_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"not": "a list"}')
    result = cli(tmp_path, "import", str(bad))
    assert result.returncode == 1 and "is not a manifest" in result.stderr
