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
from helpers import python, run_cli, run_python

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
    return run_cli(*args, env={"TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(root)})


@pytest.fixture(scope="module")
def _exported_once(tmp_path_factory) -> Path:
    """One tuning and one export for the module (a process each); every test gets its own copy."""
    root = tmp_path_factory.mktemp("exported")
    assert timed_in(root / "here") >= 3
    out = root / "manifest.json"
    assert cli(root / "here", "export", "-o", str(out)).returncode == 0
    return out


@pytest.fixture
def exported(tmp_path, _exported_once) -> Path:
    out = tmp_path / "manifest.json"
    out.write_bytes(_exported_once.read_bytes())
    return out


def test_an_imported_manifest_makes_another_cache_time_nothing(tmp_path, exported):
    (item,) = [i for i in json.loads(exported.read_text()) if i.get("name") == "add_kernel"]
    assert item["relpath"].startswith("kernels/add_kernel/") and item["record"]["pick_config"] == item["pick"]
    there = tmp_path / "there"
    result = cli(there, "import", str(exported))
    assert result.returncode == 0 and "imported 1 entry into" in result.stdout, result.stderr
    assert timed_in(there) == 0
    again = cli(there, "import", str(exported))
    assert "imported 0 entries" in again.stdout and "1 was already there" in again.stdout


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


def _exported_with(exported: Path, change) -> Path:
    items = json.loads(exported.read_text())
    change(next(i for i in items if i.get("name") == "add_kernel"))
    exported.write_text(json.dumps(items))
    return exported


# Each kind of mismatch, and what its skip line must tell the user to do about it.
MISMATCHES = {
    "interpreter": (lambda item: None, {"TRITON_INTERPRET": "0"},
                    "(interpreter: True, here False); set TRITON_INTERPRET=1 for the import and the program"),
    "device name": (lambda item: item["record"]["hardware"].update(name="NVIDIA H200"), {},
                    "import it on a machine like the one that tuned it (device 'NVIDIA H200'), or tune here"),
    "device kind": (lambda item: item["record"]["hardware"].update(device="npu"), {},
                    "measured on a npu device, which this machine cannot use"),
    "python": (lambda item: item["record"]["versions"].update(python="3.10.1"), {},
               "to use it, run Python 3.10.1, as where it was tuned; or tune here"),
    "torch": (lambda item: item["record"]["versions"].update(torch="2.9.0"), {},
              "to use it, pip install 'torch==2.9.0', as where it was tuned"),
    "triton build": (lambda item: item["record"]["context"].update(triton="0" * 64), {},
                     "made under another build of Triton (its hash differs); install the Triton build"),
    "world size": (lambda item: item["record"]["hardware"].update(world_size=4), {},
                   "export it again where it was tuned (triton-dist-tune export), unedited"),
    "edited place": (lambda item: item.update(relpath="kernels/add_kernel/" + "0" * 32 + ".json"), {},
                     "its id does not match its own fields; export it again"),
}


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_every_skip_says_what_would_make_the_entry_apply(tmp_path, exported, kind):
    change, env, advice = MISMATCHES[kind]
    manifest = _exported_with(exported, change)
    there = tmp_path / "there"
    base = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(there), **env}
    result = python(SCRIPT, "import", manifest, env=base, timeout=120)
    assert result.returncode == 0 and "imported 0 entries" in result.stdout, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "add_kernel" in line]
    assert advice in line, line
    assert "`" not in line


def test_the_manifest_setting_warns_with_the_same_advice(tmp_path, exported, monkeypatch):
    from triton_dist_plugin.store import manifest

    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the entries were tuned under the interpreter
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv(manifest.ENV, str(exported))
    with pytest.warns(RuntimeWarning, match="skipped entry .*set TRITON_INTERPRET=1 for the import and the program"):
        manifest.load_from_env()
