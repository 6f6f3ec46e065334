"""Kernel-level picks persist on disk: another process, or a new tuner of the same kernel, never
times an already tuned key again. Real kernels under the interpreter, real processes, real files."""

import json
import textwrap

import pytest
import torch
import triton
from helpers import DEVICE, Recorder, run_python, start_python

from kernels import KERNELS
from triton_dist_plugin.store import cache, describe, persist

ADD = KERNELS["add"]

# One process: tune the add kernel for n=1000 and report what was timed and picked.
CHILD = textwrap.dedent("""
    import json, sys, torch, triton
    import triton_dist_plugin as tdp
    sys.path.insert(0, "tests")
    from helpers import Recorder
    from kernels import KERNELS

    rec = Recorder()
    tdp.register(rec)
    timed = rec.timed
    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)
    x, y = add.make_inputs("tiny", "cpu")
    out = add.launch(kernel, x, y)
    assert torch.allclose(out, x + y)
    print(json.dumps({"timed": len(timed), "pick": str(kernel.best_config), "bench_time": kernel.bench_time,
                      "timings": {str(c): t for c, t in kernel.configs_timings.items()}}))
""")


def child(env=None) -> dict:
    result = run_python(CHILD, env={"TRITON_INTERPRET": "1", **(env or {})})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def entries(root):
    return sorted((root / persist.DIRECTORY).glob("*/*.json"))


def test_a_second_process_times_nothing_and_gets_the_same_pick_and_attributes(tmp_path, monkeypatch):
    root = tmp_path / "tdp-cache"
    first, second = child(), child()
    assert first["timed"] >= len(ADD.configs("cpu")) and second["timed"] == 0
    assert second["pick"] == first["pick"] and second["bench_time"] == 0.0
    # configs_timings as upstream types it, from the tuning that wrote the entry.
    assert second["timings"] == first["timings"] and all(len(t) == 3 for t in second["timings"].values())
    (path,) = entries(root)
    record = json.loads(path.read_text())
    assert record["kernel"] == "add_kernel" and record["key"].startswith("(1000,")
    assert sum(c["measured"] for c in record["candidates"]) >= 1
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_PERSIST", "0")
    assert child()["timed"] >= len(ADD.configs("cpu"))  # off: tuned again


def test_always_tune_retunes_and_rewrites(tmp_path):
    child()
    (path,) = entries(tmp_path / "tdp-cache")
    before = json.loads(path.read_text())["timestamp"]
    again = child({cache.ALWAYS_TUNE_ENV: "1"})
    assert again["timed"] >= 3 and json.loads(path.read_text())["timestamp"] != before


@pytest.mark.parametrize("damage", [b"\xff\xfe garbage", b"[" * 100_000, b'{"format": 1, "key": "(1,)"}'])
def test_a_damaged_entry_is_retuned_and_replaced(tmp_path, damage):
    child()
    (path,) = entries(tmp_path / "tdp-cache")
    path.write_bytes(damage)
    assert child()["timed"] >= 3
    assert json.loads(path.read_text())["format"] == persist.FORMAT


def test_a_stored_pick_no_longer_among_the_candidates_is_tuned_again(plugins):
    rec = Recorder()
    plugins(rec)
    x, y = ADD.make_inputs("tiny", DEVICE)
    first = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    ADD.launch(first, x, y)
    timed = len(rec.timed)
    same = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)  # a new tuner, same kernel
    torch.testing.assert_close(ADD.launch(same, x, y), x + y)
    assert len(rec.timed) == timed and rec.records[-1].cache_hit
    others = [c for c in ADD.configs(DEVICE) if str(c) != str(first.best_config)]
    fewer = triton.autotune(configs=others, key=ADD.key)(ADD.jit)
    ADD.launch(fewer, x, y)
    assert len(rec.timed) > timed and not rec.records[-1].cache_hit


def test_upstreams_own_disk_cache_keeps_its_meaning(monkeypatch):
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    # Set by hand: upstream turns its cache off under the interpreter (and 3.2 has none); where
    # it is on, it alone applies.
    kernel.cache_results = True
    assert not persist.enabled(kernel)
    kernel.cache_results = False
    assert persist.enabled(kernel)
    monkeypatch.setenv(persist.ENV, "0")
    assert not persist.enabled(kernel)


def test_processes_sharing_one_cache_directory_leave_one_valid_entry(tmp_path):
    """As on a shared filesystem: four processes tune the same key into one directory at once."""
    import os

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    procs = [start_python("-c", CHILD, env=env) for _ in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    (path,) = entries(tmp_path / "tdp-cache")
    # Whole, valid JSON from one of the writers (each tuned on its own; the last replace wins).
    assert json.loads(path.read_text())["pick_config"] in {describe.describe(c) for c in ADD.configs("cpu")}
    assert not [f for f in path.parent.iterdir() if f.suffix == ".tmp"]  # no half-written file left
    assert child()["timed"] == 0  # a fifth process finds the entry
