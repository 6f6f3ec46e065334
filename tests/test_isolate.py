"""Candidates that crash or hang run first in a spawned worker, never in the user's process.

Real kernels under the interpreter, in a real spawned worker: the crash is a store far out of
bounds (the interpreter writes through the raw pointer, and the worker dies of it), the hang is
a loop that never ends. ``benchmarks/bench_faults_gpu.py`` plants the same faults on a GPU.
"""

import os
import subprocess
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from helpers import DEVICE

from triton_dist_plugin import isolate


@triton.jit
def planted(x, out, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if FAULT == 1:  # out of bounds, far beyond any allocation
        tl.store(out + offs + (1 << 44), tl.load(x + offs, mask=offs < n), mask=offs < n)
    if FAULT == 2:  # never finishes
        i = tl.program_id(0)
        while i >= 0:
            i += 1
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 64, "FAULT": 0}), triton.Config({"BLOCK": 64, "FAULT": 1}),
           triton.Config({"BLOCK": 64, "FAULT": 2}), triton.Config({"BLOCK": 128, "FAULT": 0})]


def copy_with(kernel, n=300):
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return x, out


def test_a_crashing_and_a_hanging_candidate_fail_in_the_worker_and_tuning_goes_on(recorder, monkeypatch):
    monkeypatch.setenv(isolate.ENV, "1")
    monkeypatch.setenv(isolate.TIMEOUT_ENV, "5")
    kernel = triton.autotune(configs=CONFIGS, key=["n"])(planted)
    x, out = copy_with(kernel)
    torch.testing.assert_close(out, x)
    (record,) = recorder.records
    assert record.best_config.kwargs["FAULT"] == 0
    assert "crashed the isolation worker" in record.failures[CONFIGS[1]]
    assert "did not finish within 5s" in record.failures[CONFIGS[2]]
    assert {r.config.kwargs["FAULT"] for r in recorder.timed} == {0}  # never run here
    assert any(note.startswith("ran 4 candidates in the isolation worker") for note in record.notes)
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
        big = torch.zeros(16 << 20)
        job = (planted, type(planted).__name__, (big, big, big.numel()), {})
        sent = threading.Thread(target=worker.prepare, args=job, daemon=True)
        sent.start()
        sent.join(60)
        assert not sent.is_alive(), "prepare blocked on a worker that is not reading"
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    worker.submit(0, {"BLOCK": 1 << 20, "FAULT": 0}, (16,))
    assert worker.finish({}) == {}  # the worker got the job and the candidate, and ran it


def test_with_every_kernel_isolated_the_worker_starts_at_activation(tmp_path):
    """``TRITON_DIST_AUTOTUNE_ISOLATE=1`` isolates every kernel: its worker starts with the plugin,
    importing torch alongside the program; by default (and in a multiprocessing child) none does."""
    probe = "import triton_dist_plugin; from triton_dist_plugin import isolate; print(isolate._shared is not None)"
    child = ("import multiprocessing as mp, subprocess, sys\n"
             "def run(q):\n    import triton_dist_plugin; from triton_dist_plugin import isolate\n"
             "    q.put(isolate._shared is not None)\n"
             "if __name__ == '__main__':\n    q = mp.get_context('spawn').Queue()\n"
             "    p = mp.get_context('spawn').Process(target=run, args=(q,)); p.start(); print(q.get(timeout=120))\n"
             "    p.join(60)\n")
    (tmp_path / "child.py").write_text(child)
    seen = []
    for value, code in (("1", ["-c", probe]), ("", ["-c", probe]), ("1", [str(tmp_path / "child.py")])):
        env = {**os.environ, isolate.ENV: value}
        proc = subprocess.run([sys.executable, *code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.append(proc.stdout.split()[-1])
    assert seen == ["True", "False", "False"]


def test_a_kernel_a_worker_cannot_import_is_tuned_unisolated_with_a_note(recorder, monkeypatch):
    monkeypatch.setenv(isolate.ENV, "1")

    @triton.jit
    def local_copy(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                             key=["n"])(local_copy)
    x, out = copy_with(kernel)
    torch.testing.assert_close(out, x)
    assert any("not isolated" in note and "module level" in note for note in recorder.records[0].notes)


def test_a_kernel_in_the_main_script_is_not_run_again_by_a_worker(tmp_path):
    """A worker would have to run the user's main script again to find a kernel defined there
    (what a multiprocessing spawn does): that kernel is tuned unisolated, with a note, and the
    script's top level runs once."""
    script = tmp_path / "main_script.py"
    runs = tmp_path / "runs.txt"
    script.write_text(f"""
import os, torch, triton, triton.language as tl
import triton_dist_plugin as tdp
with open({str(runs)!r}, "a") as fh:
    fh.write("ran\\n")
notes = []
class Notes:
    @tdp.hookimpl
    def tdp_on_tuned(self, record):
        notes.extend(record.notes)
tdp.register(Notes())

@triton.jit
def copy(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

kernel = triton.autotune(configs=[triton.Config({{"BLOCK": 64}}), triton.Config({{"BLOCK": 128}})], key=["n"])(copy)
x = torch.randn(300)
out = torch.zeros_like(x)
kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, out, 300)
assert torch.equal(out, x)
print([n for n in notes if "isolat" in n])
""")
    env = {**os.environ, "TRITON_INTERPRET": "1", isolate.ENV: "1"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "defined in the main script" in proc.stdout
    assert runs.read_text() == "ran\n"


def _children() -> list[str]:
    """Command lines of this process's children (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid():
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_one_worker_serves_every_tuning_and_none_is_left_behind():
    """The tests above tuned several kernels and replaced crashed and hung workers: one worker
    is running now, and it goes when stopped (or when this process exits: its socket closes)."""
    assert len([c for c in _children() if "triton_dist_plugin.isolate" in c]) <= 1
    first = isolate.worker()
    assert isolate.worker() is first and first.proc.poll() is None
    first.stop()
    assert not [c for c in _children() if "triton_dist_plugin.isolate" in c]
    assert os.getpid()  # the test process itself survived everything above


def test_arguments_reach_the_worker_as_raw_bytes_unchanged():
    """Each tensor travels as its raw bytes (no pickled copy) and is rebuilt with its dtype,
    shape and strides: every dtype, a transposed view, an empty tensor, and plain values."""
    from triton_dist_plugin.isolate_worker import restore

    values = [torch.randn(5, 3).half(), torch.randn(4, 2).bfloat16(), torch.rand(7) > 0.5,
              torch.arange(-3, 9, dtype=torch.int64), torch.randn(3, dtype=torch.complex64),
              torch.randn(6, 4).t(), torch.empty(0, 3), 3.5, "text", None]
    if hasattr(torch, "float8_e4m3fn"):
        values.append(torch.randn(8).to(torch.float8_e4m3fn))
    buffers: list = []
    items = [isolate._copy(v, buffers) for v in values]
    received = [bytearray(bytes(b)) for b in buffers]  # what the worker's recv_bytes_into fills
    for value, item in zip(values, items):
        back = restore(item, received)
        if isinstance(value, torch.Tensor):
            assert back.dtype == value.dtype and back.shape == value.shape and back.stride() == value.stride()
            as_bits = (lambda t: t.view(torch.uint8)) if value.element_size() == 1 else (lambda t: t)  # float8
            assert torch.equal(as_bits(back), as_bits(value))
        else:
            assert back == value
