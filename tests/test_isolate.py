"""Candidates that crash or hang run first in a spawned worker, never in the user's process.

Real kernels under the interpreter, in a real spawned worker: the crash is a store far out of
bounds (the interpreter writes through the raw pointer, and the worker dies of it), the hang is
a loop that never ends. ``benchmarks/bench_faults_gpu.py`` plants the same faults on a GPU.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, python, running

from triton_dist_plugin.isolation import isolate, worker_start


@triton.jit
def planted(x, out, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if FAULT == 1:  # out of bounds, far beyond any allocation
        tl.store(out + offs + (1 << 44), tl.load(x + offs, mask=offs < n), mask=offs < n)
    if FAULT == 2:  # never finishes: a volatile load is read again each time, on a GPU too
        while tl.load(x, volatile=True) == tl.load(x, volatile=True):
            pass
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def crashed(reason: str) -> bool:
    """The store far out of bounds, as the worker reports it: under the interpreter it dies of it;
    on a GPU it reports the illegal address, then exits."""
    return reason.startswith("crashed the isolation worker") or (
        reason.startswith("failed in the isolation worker") and "illegal memory access" in reason)


CONFIGS = [triton.Config({"BLOCK": 64, "FAULT": 0}), triton.Config({"BLOCK": 64, "FAULT": 1}),
           triton.Config({"BLOCK": 64, "FAULT": 2}), triton.Config({"BLOCK": 128, "FAULT": 0})]


def copy_with(kernel, n=300):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return x, out


@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked", "fresh"])
def test_a_crashing_and_a_hanging_candidate_fail_in_the_worker_and_tuning_goes_on(recorder, monkeypatch, fork):
    """Whichever way the worker began (forked where that is safe, else a fresh interpreter)."""
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv(isolate.TIMEOUT_ENV, "5")
    monkeypatch.setenv(worker_start.FORK_ENV, fork)
    _no_worker()  # the first worker of this test begins as ``fork`` says
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(planted)
    x, out = copy_with(kernel)
    torch.testing.assert_close(out, x)
    (record,) = recorder.records
    assert record.best_config.kwargs["FAULT"] == 0
    assert crashed(record.failures[CONFIGS[1]])
    assert "did not finish within 5s" in record.failures[CONFIGS[2]]
    assert {r.config.kwargs["FAULT"] for r in recorder.timed} == {0}  # never run here
    assert any(note.startswith("ran 4 candidates in the isolation worker") for note in record.notes)
    began = "worker forked" if fork == "1" else "worker started as a fresh interpreter"
    assert any(began in note for note in record.notes), record.notes
    x, out = copy_with(kernel, 500)  # this process still works: another key tunes and runs
    torch.testing.assert_close(out, x)


def test_isolation_is_off_for_explicit_configs_by_default(recorder, monkeypatch):
    monkeypatch.delenv(isolate.ENV, raising=False)
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    copy_with(kernel)
    assert not any("isolation" in note for note in recorder.records[0].notes)
    assert isolate.enabled(generated=True) and not isolate.enabled(generated=False)
    monkeypatch.setenv(isolate.ENV, "0")
    assert not isolate.enabled(generated=True)


def _no_worker() -> None:
    if isolate._shared is not None:
        isolate._shared.stop()
    isolate._shared = None


def test_the_worker_starts_when_an_isolated_kernel_is_decorated_and_imports_its_module(recorder, monkeypatch):
    """Its slow start (torch, Triton, the kernel's module) runs before the first call, not in it;
    kernels that will not be isolated, and frozen processes, start none."""
    monkeypatch.setenv(isolate.ENV, "0")
    _no_worker()
    triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_FROZEN", "strict")
    triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    assert isolate._shared is None
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_FROZEN")
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    started = isolate._shared
    assert started is not None and started.proc.poll() is None and started.preloaded == {__name__}
    x, out = copy_with(kernel)
    torch.testing.assert_close(out, x)
    assert isolate._shared is started  # the same worker took the tuning
    (note,) = [n for n in recorder.records[0].notes if "isolation worker" in n]
    assert "ran 2 candidates" in note and "before the job" in note and "0 failed" in note, note


def test_a_worker_started_at_the_decoration_arms_no_release_and_serves_the_first_call(recorder, monkeypatch):
    """It computes ahead what the first job needs but its GPU context (made with that job), so no
    idle release is armed before a tuning has used it; and the worker the decoration started, told
    to warm up, is the one that runs the first call's candidates."""
    import threading

    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "30")
    _no_worker()
    before = set(threading.enumerate())  # (an earlier test's timer may still run)
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    started = isolate._shared
    timers = [t for t in set(threading.enumerate()) - before if t.name == "tdp-isolation-idle"]
    assert not timers and not started.given_work  # nothing to give back yet
    proc = started.proc
    x, out = copy_with(kernel)
    torch.testing.assert_close(out, x)
    assert isolate._shared is started and started.proc is proc and started.released == 0
    assert any(note.startswith("ran 2 candidates in the isolation worker") for note in recorder.records[-1].notes)


def test_every_worker_is_handed_tritons_source_hash_where_this_process_knows_it(monkeypatch):
    """A fresh interpreter would hash Triton's sources again before its first candidate (0.3-0.7 s
    on the first call's path): each worker is told this process's hash as it starts, or None while
    it is not known yet (then it computes its own); and a worker told one uses it, as Triton's
    compile cache key reads it."""
    import pickle

    from triton_dist_plugin import _compat
    from triton_dist_plugin.isolation import channel

    sent: list = []
    original = channel.Channel.send
    monkeypatch.setattr(channel.Channel, "send", lambda self, message: sent.append(message) or original(self, message))
    for known in ("parents-hash", None):
        monkeypatch.setattr(_compat, "known_triton_key", lambda known=known: known)
        sent.clear()
        worker = isolate.Worker()
        try:
            assert pickle.loads(sent[0]) == ("warm", known)
        finally:
            worker.stop()
    code = ("import torch; from triton_dist_plugin.isolation import isolate_worker as w;"
            "from triton_dist_plugin import _compat as c;"
            "w.warm(torch, 'parents-hash'); print(c.triton_key(), c.triton_key_home().triton_key())")
    result = python("-c", code, timeout=120)
    assert result.stdout.split() == ["parents-hash", "parents-hash"], result.stderr[-2000:]


def test_this_process_says_its_tritons_source_hash_only_once_computed():
    """Never computed on the caller's path: None until it exists, then Triton's own value."""
    code = ("from triton_dist_plugin import _compat as c;"
            "before = c.known_triton_key(); key = c.triton_key();"
            "print(before, key == c.known_triton_key(), isinstance(key, str) and len(key) > 16)")
    result = python("-c", code, env={**os.environ, "TRITON_DIST_PLUGIN_DISABLE": "1"}, timeout=120)
    assert result.stdout.split() == ["None", "True", "True"], result.stderr[-2000:]


def _wait_for(condition, seconds=30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_worker_idle_after_tuning_is_replaced_by_one_that_holds_nothing(recorder, monkeypatch):
    """Its GPU context (on a GPU, some hundreds of MB) goes once tuning has been idle for
    TRITON_DIST_AUTOTUNE_ISOLATE_IDLE seconds: a fresh worker, given no kernel yet, takes its place,
    with the kernels' modules imported ahead again, and serves the next tuning."""
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "0.3")
    _no_worker()
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    worker = isolate._shared
    copy_with(kernel, 300)
    used = worker.proc
    # Released by the idle time (on a loaded machine a candidate past the isolation timeout may
    # have replaced the worker first: the release then gives back its successor's context).
    assert _wait_for(lambda: worker.released == 1), "the idle worker was never released"
    assert used.wait(10) is not None and worker.proc is not used and worker.proc.poll() is None
    assert worker.job is None and worker.sent_at == 0.0 and worker.preloaded == {__name__}
    fresh = worker.proc
    x, out = copy_with(kernel, 500)  # the next key: the fresh worker runs its candidates
    torch.testing.assert_close(out, x)
    assert isolate._shared is worker and any("ran 2 candidates in the isolation worker" in n
                                             for n in recorder.records[-1].notes)
    assert worker.proc is fresh or worker.released == 2


def test_a_worker_is_kept_while_tunings_follow_and_with_no_idle_time(recorder, monkeypatch):
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "0")
    _no_worker()
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted)
    copy_with(kernel, 300)
    used = isolate._shared.proc
    time.sleep(0.3)
    assert isolate._shared.proc is used and used.poll() is None and isolate._shared.released == 0
    # A release timed for one tuning never takes the worker from the next, begun meanwhile.
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "2")
    copy_with(kernel, 400)
    assert isolate.worker() is isolate._shared  # the next tuning begins, well before the release is due
    time.sleep(2.5)
    assert isolate._shared.proc is used and isolate._shared.released == 0


def test_a_large_job_never_waits_for_a_worker_that_is_not_reading(recorder, monkeypatch):
    """The worker reads nothing while it imports torch: the arguments (here 64 MB, far beyond a
    socket's buffer) go from a thread of their own, so compilation starts at once. A stopped
    worker stands in for a slow one; with the send on the caller's thread this test hangs."""
    import signal
    import threading

    monkeypatch.setenv(isolate.ENV, "1")
    worker = isolate.worker()
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        big = torch.zeros(16 << 20, device=DEVICE)
        job = (planted, type(planted).__name__, (big, big, big.numel()), {})
        sent = threading.Thread(target=worker.prepare, args=job, daemon=True)
        sent.start()
        sent.join(60)
        assert not sent.is_alive(), "prepare blocked on a worker that is not reading"
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    worker.submit(0, {"BLOCK": 1024, "FAULT": 0}, (16,))
    assert worker.finish({}) == {}  # the worker got the job and the candidate, and ran it


def test_with_every_kernel_isolated_the_worker_starts_at_activation(tmp_path):
    """``TRITON_DIST_AUTOTUNE_ISOLATE=1`` isolates every kernel: its worker starts with the plugin,
    importing torch alongside the program; by default (and in a multiprocessing child) none does."""
    probe = ("import triton_dist_plugin; from triton_dist_plugin.isolation import isolate; "
             "print(isolate._shared is not None)")
    child = ("import multiprocessing as mp, subprocess, sys\n"
             "def run(q):\n    import triton_dist_plugin; from triton_dist_plugin.isolation import isolate\n"
             "    q.put(isolate._shared is not None)\n"
             "if __name__ == '__main__':\n    q = mp.get_context('spawn').Queue()\n"
             "    p = mp.get_context('spawn').Process(target=run, args=(q,)); p.start(); print(q.get(timeout=120))\n"
             "    p.join(60)\n")
    (tmp_path / "child.py").write_text(child)
    seen = []
    for value, code in (("1", ["-c", probe]), ("", ["-c", probe]), ("1", [str(tmp_path / "child.py")])):
        env = {**os.environ, isolate.ENV: value}
        proc = python(*code, env=env, cwd=os.getcwd(), timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.append(proc.stdout.split()[-1])
    assert seen == ["True", "False", "False"]


class _Scale:
    factor = 1


_SCALE = _Scale()


def test_a_kernel_inside_a_function_is_rebuilt_in_the_worker_unless_it_uses_what_cannot_be_sent(recorder, monkeypatch):
    """A worker cannot import a kernel defined inside a function: it rebuilds it from its source,
    with the values it closes over; one that uses an object the worker cannot be sent is tuned
    unisolated, with a note that names the object and the fix."""
    monkeypatch.setenv(isolate.ENV, "1")
    far = tl.constexpr(1 << 44)  # a closure variable, sent by value

    @triton.jit
    def local_copy(x, out, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if FAULT == 1:
            tl.store(out + offs + far, tl.load(x + offs, mask=offs < n), mask=offs < n)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    configs = [CONFIGS[0], CONFIGS[1], CONFIGS[3]]
    x, out = copy_with(triton.autotune(configs=configs, key=["n"])(local_copy))
    torch.testing.assert_close(out, x)
    (record,) = recorder.records
    assert record.best_config.kwargs["FAULT"] == 0
    assert crashed(record.failures[CONFIGS[1]])
    assert any(note.startswith("ran 3 candidates in the isolation worker") for note in record.notes), record.notes

    @triton.jit
    def scaled_copy(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n) * _SCALE.factor, mask=offs < n)

    blocks = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    x, out = copy_with(triton.autotune(configs=blocks, key=["n"])(scaled_copy))
    torch.testing.assert_close(out, x)
    (note,) = [n for n in recorder.records[1].notes if "isolat" in n]
    assert note.startswith("not isolated: ") and "not defined at module level" in note, note
    assert "uses _SCALE (a _Scale)" in note and "make it a tl.constexpr" in note, note


def _script_env(tmp_path: Path) -> dict:
    """A fresh process's settings: the interpreter, every kernel isolated, empty caches and home."""
    for name in ("tune", "triton", "home"):
        (tmp_path / name).mkdir(exist_ok=True)
    return {**os.environ, "TRITON_INTERPRET": "1", isolate.ENV: "1", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tune"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton"), "HOME": str(tmp_path / "home")}


_NOTES = """
import json, os, torch, triton, triton.language as tl
import triton_dist_plugin as tdp
records = []
class Records:
    @tdp.hookimpl
    def tdp_on_tuned(self, record):
        records.append(record)
tdp.register(Records())
"""


def test_a_kernel_in_the_main_script_is_not_run_again_by_a_worker(tmp_path):
    """A worker would have to run the user's main script again to import a kernel defined there
    (what a multiprocessing spawn does): it rebuilds the kernel from its source instead, so the
    kernel is isolated and the script's top level runs once."""
    script = tmp_path / "main_script.py"
    runs = tmp_path / "runs.txt"
    script.write_text(_NOTES + f"""
with open({str(runs)!r}, "a") as fh:
    fh.write("ran\\n")

@triton.jit
def copy(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

kernel = triton.autotune(configs=[triton.Config({{"BLOCK": 64}}), triton.Config({{"BLOCK": 128}})], key=["n"])(copy)
x = torch.randn(300, device="cuda" if torch.cuda.is_available() else "cpu")
out = torch.zeros_like(x)
kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, out, 300)
assert torch.equal(out, x)
print([n for n in records[0].notes if "isolat" in n])
""")
    proc = python(script, env=_script_env(tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ran 2 candidates in the isolation worker" in proc.stdout, proc.stdout
    assert runs.read_text() == "ran\n"


def test_a_crashing_candidate_of_a_main_script_kernel_fails_in_the_worker_not_in_the_script(tmp_path):
    """The usual first kernel: defined in the script itself, with a global constant, a helper
    ``@triton.jit`` function and heuristics. Its out-of-bounds candidate kills the worker, not the
    script, which goes on with the good pick and the right output."""
    script = tmp_path / "train.py"
    script.write_text(_NOTES + """
FAR = tl.constexpr(1 << 44)  # beyond any allocation

@triton.jit
def load_block(x, offs, n):
    return tl.load(x + offs, mask=offs < n)

@triton.autotune(configs=[triton.Config({"BLOCK": 64, "FAULT": 0}), triton.Config({"BLOCK": 64, "FAULT": 1}),
                          triton.Config({"BLOCK": 128, "FAULT": 0})], key=["n"])
@triton.heuristics({"TWICE": lambda args: args["n"] > 0})  # evaluated by the script, sent to the worker
@triton.jit
def copy(x, out, n, BLOCK: tl.constexpr, FAULT: tl.constexpr, TWICE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if FAULT == 1:
        tl.store(out + offs + FAR, load_block(x, offs, n), mask=offs < n)
    tl.store(out + offs, load_block(x, offs, n) * (2 if TWICE else 1), mask=offs < n)

if __name__ == "__main__":
    x = torch.randn(300, device="cuda" if torch.cuda.is_available() else "cpu")
    out = torch.zeros_like(x)
    copy[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, out, 300)
    assert torch.equal(out, 2 * x)
    (record,) = records
    failures = [(c.kwargs, reason) for c, reason in record.failures.items()]
    print(json.dumps({"pick": record.best_config.kwargs, "failures": failures,
                      "notes": [n for n in record.notes if "isolat" in n]}))
""")
    proc = python(script, env=_script_env(tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["pick"]["FAULT"] == 0
    ((config, reason),) = result["failures"]
    assert config["FAULT"] == 1 and crashed(reason), reason
    assert any(n.startswith("ran 3 candidates in the isolation worker") for n in result["notes"]), result["notes"]


def test_a_rebuilt_kernel_has_the_compiled_kernel_cache_key_of_the_original(tmp_path):
    """The worker finds what the parent compiled in Triton's disk cache only if the rebuilt kernel
    hashes as the original does: same source, first line, options, constants and helpers."""
    (tmp_path / "kern.py").write_text("""
import triton, triton.language as tl
SHIFT = tl.constexpr(3)

@triton.jit(noinline=True)
def helper(x, offs):
    return tl.load(x + offs + SHIFT)

# a comment between the decorators
@triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
@triton.jit(do_not_specialize=["n"])
def kern(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, helper(x, offs), mask=offs < n)
""")
    check = ("import kern\nfrom triton_dist_plugin.isolation import isolate_source, isolate_worker\n"
             "found, layers = isolate_source.locate(kern.kern)\n"
             "assert 'source' not in found and [type(h).__name__ for h in layers] == ['Heuristics']\n"  # imported
             "built = isolate_worker.rebuild(isolate_source.source_of(kern.kern.fn))\n"
             "assert type(built).__name__ == 'JITFunction' and built is not kern.kern.fn\n"
             "assert built.cache_key == kern.kern.fn.cache_key, (built.src, kern.kern.fn.src)\n"
             "assert built.params[2].do_not_specialize and not built.params[0].do_not_specialize\n"
             "print('same')\n")
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(tmp_path)}
    proc = python("-c", check, env=env, cwd=os.getcwd(), timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "same", proc.stderr[-2000:]


_PLANTED = ("json", "pickle", "socket", "select", "torch", "triton", "numpy")


def test_the_worker_never_runs_code_from_the_working_directory(tmp_path, monkeypatch):
    """Files in the working directory named like the modules a worker imports (``json.py``,
    ``torch.py``...) never run there: it starts with ``-I`` and this process's path less the
    working directory. A kernel in a module of that directory (next to the user's script, say)
    is still isolated: rebuilt from its source."""
    assert all(name in sys.modules for name in _PLANTED)  # so this process never imports the plants
    for name in _PLANTED:
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / ('ran-' + name))!r}, 'w').close()\n")
    (tmp_path / "next_to_script.py").write_text(
        "import triton, triton.language as tl\n"
        "@triton.jit\n"
        "def copy(x, out, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    if FAULT == 1:\n"
        "        tl.store(out + offs + (1 << 44), tl.load(x + offs, mask=offs < n), mask=offs < n)\n"
        "    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path), *sys.path])  # as `python -c` or a script here has it
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delitem(sys.modules, "next_to_script", raising=False)
    from next_to_script import copy

    worker = isolate.Worker()
    try:
        x, out = torch.randn(300, device=DEVICE), torch.zeros(300, device=DEVICE)
        worker.prepare(copy, type(copy).__name__, (x, out, 300), {})
        assert worker.unisolated is None and worker.job is not None
        for index, fault in enumerate((0, 1, 0)):
            worker.submit(index, {"BLOCK": 64, "FAULT": fault}, (5,))
        failed = worker.finish({})
    finally:
        worker.stop()
    assert sorted(failed) == [1] and crashed(failed[1]), failed
    assert not list(tmp_path.glob("ran-*")), "a worker ran a module planted in the working directory"


def test_the_worker_path_leaves_out_the_working_directory_unless_pythonpath_names_it(tmp_path, monkeypatch):
    from triton_dist_plugin.isolation.isolate_source import search_path

    other = tmp_path / "lib"
    other.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", ".", str(tmp_path), "lib", *sys.path])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    kept, dropped = search_path()
    assert str(tmp_path) not in kept and "" not in kept and str(other) in kept and dropped == {str(tmp_path)}
    assert all(os.path.isabs(p) for p in kept)
    monkeypatch.setenv("PYTHONPATH", ".")
    kept, dropped = search_path()
    assert kept[0] == str(tmp_path) and kept.count(str(tmp_path)) == 1 and not dropped


_PARENT = """
import os, sys, time, torch
from triton_dist_plugin.isolation import isolate
from spin import spin
worker = isolate.worker()
if sys.argv[1] == "running":  # a candidate that never finishes
    x = torch.zeros(64)
    worker.prepare(spin, type(spin).__name__, (x,), {})
    worker.submit(0, {"BLOCK": 64}, (1,))
    assert worker._receive(120)[0] == "ready"
    holder = 0
else:  # waiting for work, with a forked child holding this end of the socket open
    assert worker.proc.poll() is None
    holder = os.fork()
    if holder == 0:
        time.sleep(120)
        os._exit(0)
print(worker.proc.pid, holder, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(("sig", "state"), [(signal.SIGKILL, "running"), (signal.SIGTERM, "running"),
                                            (signal.SIGKILL, "waiting")], ids=["kill-running", "term-running",
                                                                               "kill-waiting"])
def test_the_worker_dies_with_its_parent(tmp_path, sig, state):
    """Killed parents leave no worker behind: not one running a candidate that never finishes
    (it never reads its socket again, and spun on at full speed), not one waiting for work while
    a forked child of the parent keeps the socket open (it never saw it close)."""
    (tmp_path / "spin.py").write_text(
        "import triton, triton.language as tl\n"
        "@triton.jit\n"
        "def spin(x, BLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0)\n"
        "    while i >= 0:\n"
        "        i += 1\n")
    (tmp_path / "parent.py").write_text(_PARENT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), state], cwd=elsewhere,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    pids: list[int] = []
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids and running(pids[0]), "the parent did not start its worker"
        time.sleep(1.0)
        assert running(pids[0])
        parent.send_signal(sig)
        parent.wait(30)
        deadline = time.monotonic() + 5
        while running(pids[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(pids[0]), f"the worker outlived its parent ({signal.Signals(sig).name}, {state})"
    finally:
        for pid in [*pids, parent.pid]:
            if pid and running(pid):
                os.kill(pid, signal.SIGKILL)


def _workers() -> list[int]:
    """This process's isolation workers, forked or fresh: children named ``tdp-isolation``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            name, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and name == "tdp-isolation" and fields[0] not in "ZX":
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_one_worker_serves_every_tuning_and_none_is_left_behind():
    """The tests above tuned several kernels and replaced crashed and hung workers: one worker
    is running now, and it goes when stopped (or when this process exits: its socket closes)."""
    assert len(_workers()) <= 1
    first = isolate.worker()
    assert isolate.worker() is first and first.proc.poll() is None
    assert _wait_for(lambda: _workers() == [first.proc.pid]), _workers()  # a fresh one names itself once started
    first.stop()
    assert not _workers()
    assert os.getpid()  # the test process itself survived everything above


def test_arguments_reach_the_worker_as_raw_bytes_unchanged():
    """Each tensor travels as its raw bytes (no pickled copy) and is rebuilt with its dtype,
    shape and strides: every dtype, a transposed view, an empty tensor, and plain values."""
    from triton_dist_plugin.isolation import transfer
    from triton_dist_plugin.isolation.transfer import Arriving, Packed

    values = [torch.randn(5, 3).half(), torch.randn(4, 2).bfloat16(), torch.rand(7) > 0.5,
              torch.arange(-3, 9, dtype=torch.int64), torch.randn(3, dtype=torch.complex64),
              torch.randn(6, 4).t(), torch.empty(0, 3), torch.randn(3, 1).expand(3, 5), torch.randn(8, 6)[2:5, 1:4],
              torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last), 3.5, "text", None]
    if hasattr(torch, "float8_e4m3fn"):
        values.append(torch.randn(8).to(torch.float8_e4m3fn))
    packed = Packed(tuple(values), {"last": values[0]})
    assert not packed.shared  # CPU tensors: their bytes take the socket
    job = {"args": packed.args, "kwargs": packed.kwargs, "shared": packed.sizes}
    received = [bytearray(bytes(b)) for b in packed.inline]  # what the worker's recv_bytes_into fills
    args, kwargs = Arriving(job, received).arguments([], [])
    for value, back in [*zip(values, args), (values[0], kwargs["last"])]:
        if isinstance(value, torch.Tensor):  # the same strides over the same layout: an expanded one stays one row
            assert back.dtype == value.dtype and back.shape == value.shape and back.stride() == value.stride()
            assert back.untyped_storage().nbytes() == (transfer.span(value)[1] if value.numel() else 0)
            as_bits = (lambda t: t.view(torch.uint8)) if value.element_size() == 1 else (lambda t: t)  # float8
            assert torch.equal(as_bits(back), as_bits(value))
        else:
            assert back == value


def test_a_worker_that_replaced_a_crashed_one_runs_every_later_step(monkeypatch):
    """The crashed worker's last candidate was its only one: the next takes the job all the same,
    so a later step's candidates run there (they used to wait, unread, until the timeout)."""
    monkeypatch.setenv(isolate.TIMEOUT_ENV, "60")
    worker = isolate.Worker()
    try:
        x, out = torch.randn(300), torch.zeros(300)
        worker.prepare(planted, type(planted).__name__, (x, out, 300), {})
        assert list(worker.finish({0: ({"BLOCK": 64, "FAULT": 1}, (5,))})) == [0]
        started = time.monotonic()
        assert worker.finish({1: ({"BLOCK": 64, "FAULT": 0}, (5,))}) == {}
        assert time.monotonic() - started < 40 and worker.given_work  # its context is given back when idle
    finally:
        worker.stop()


def test_a_kernel_the_worker_cannot_load_is_unisolated_for_the_rest_of_the_tuning(monkeypatch):
    """Said once: a later step of the same tuning does not wait for a worker again."""
    monkeypatch.setattr(isolate, "locate", lambda fn: ({"module": "no_such_module_of_kernels", "name": "k",
                                                        "kind": "JITFunction"}, []))
    worker = isolate.Worker()
    waits, receive = [], worker._receive
    monkeypatch.setattr(worker, "_receive", lambda limit: waits.append(limit) or receive(limit))
    try:
        worker.prepare(planted, type(planted).__name__, (torch.randn(8),), {})
        with pytest.raises(isolate.Unisolated, match="no_such_module_of_kernels"):
            worker.finish({0: ({"BLOCK": 64, "FAULT": 0}, (1,))})
        assert waits  # the first step waited for the worker's answer
        waited = len(waits)
        with pytest.raises(isolate.Unisolated, match="no_such_module_of_kernels"):
            worker.finish({1: ({"BLOCK": 64, "FAULT": 0}, (1,))})
        assert len(waits) == waited  # the next did not wait again
    finally:
        worker.stop()


def test_nothing_of_a_tunings_arguments_is_kept_once_it_is_done(monkeypatch):
    """Not by the worker's owner, nor by the thread that wrote them to the worker (the job, last
    sent to the worker that replaced one the last candidate crashed)."""
    import gc
    import weakref

    monkeypatch.setenv(isolate.ENV, "1")
    kernel = triton.autotune(configs=[CONFIGS[0], CONFIGS[1]], key=["n"])(planted)
    x, out = copy_with(kernel, 700)
    assert isolate._shared.given_work and not isolate._shared.tuning  # it ran there, and is done
    refs = [weakref.ref(x), weakref.ref(out)]
    del x, out
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_no_idle_release_while_a_tuning_has_the_worker_and_no_stale_request_is_answered(monkeypatch):
    """A release timer that fires mid-tuning (an earlier tuning's, due as another thread begins)
    leaves the worker alone; a request for a job's arguments after the tuning ended is refused, so
    the worker runs nothing on buffers nobody wrote."""
    import pickle

    from triton_dist_plugin.isolation import idle

    worker = isolate.worker()
    assert worker.tuning
    worker.given_work, released, proc = True, worker.released, worker.proc
    idle._release(worker, worker.generation, isolate._shared_lock, lambda: isolate._shared)
    assert worker.released == released and worker.proc is proc
    isolate.done(worker)
    assert not worker.tuning and worker.packed is None
    (reply,) = worker.channel.answer({0: (b"x" * 64, 0)})
    assert pickle.loads(reply) == ("filled", None, [], "the tuning it was for has ended")


@triton.jit
def _copy_rows(x, out, n, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK * ROWS + tl.arange(0, BLOCK * ROWS)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def test_a_grid_that_reads_a_heuristics_value_is_computed_with_it_for_the_worker(recorder, monkeypatch):
    """The grid of a launch sees the values ``@triton.heuristics`` adds; so does the grid each
    candidate is sent to the worker with (it used to raise ``KeyError`` with isolation on)."""
    monkeypatch.setenv(isolate.ENV, "1")
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(
        triton.heuristics({"ROWS": lambda a: 2})(_copy_rows))
    n = 300
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"] * m["ROWS"]),)](x, out, n)
    torch.testing.assert_close(out, x)
    notes = recorder.records[-1].notes
    assert any(note.startswith("ran 2 candidates in the isolation worker") for note in notes), notes


def test_a_tuning_that_sends_the_worker_nothing_still_lets_the_earlier_context_go(recorder, monkeypatch):
    """The next tuning took the worker (its generation moved on) but sent it no kernel (tuned
    unisolated): the context the first tuning made is still given back once tuning is idle."""
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "0.3")
    _no_worker()
    copy_with(triton.autotune(configs=[CONFIGS[0], CONFIGS[3]], key=["n"])(planted), 300)
    worker = isolate.worker()  # the next tuning begins...
    isolate.done(worker)  # ...and ends without sending it anything
    assert _wait_for(lambda: worker.released == 1), "the first tuning's context was kept"


def test_a_forked_child_has_no_worker_and_a_lock_of_its_own():
    """A child forked while the lock was held (an idle release under way) must not wait on it
    forever, nor stop the parent's worker."""
    first = isolate.worker()
    assert isolate._shared_lock.acquire(timeout=5)
    try:
        pid = os.fork()
        if pid == 0:
            ok = isolate._shared is None and isolate._shared_lock.acquire(timeout=2) and first.proc is None
            os._exit(0 if ok else 1)
    finally:
        isolate._shared_lock.release()
    assert os.waitpid(pid, 0)[1] == 0
    assert isolate._shared is first and first.proc.poll() is None
