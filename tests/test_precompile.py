"""Compiling candidates up front: the forked-worker stage and the thread stage.

Under the interpreter there is nothing to compile, so the forked stage is driven here with a plain
function standing in for ``JITFunction.warmup`` (it records which process ran it); the real
compile in workers is measured on a GPU by ``benchmarks/bench_tiling_gpu.py``.
"""

import os
import subprocess
import sys
import time

import pytest
from helpers import python, running

from triton_dist_plugin import _compat
from triton_dist_plugin.compiling import forked_compile, precompile


def _warm_recording(directory):
    def warm(*args, tag, grid=None, fail=False, sleep=0.0):
        if sleep:
            time.sleep(sleep)
        if fail:
            raise ValueError(f"candidate {tag} cannot compile")
        with open(os.path.join(directory, f"{tag}.pid"), "w") as fh:
            fh.write(str(os.getpid()))

    return warm


def test_workers_compile_each_candidate_in_another_process(tmp_path):
    warm = _warm_recording(tmp_path)
    kwargs = [{"tag": i, "fail": i == 3, "sleep": 0.2} for i in range(6)]
    arrived = []
    failed = forked_compile.in_processes(warm, (1, 2), {"grid": (1,)}, kwargs, list(range(6)), device=0,
                                     on_compiled=lambda i: arrived.append((i, os.getpid())))
    assert failed == {3: "ValueError: candidate 3 cannot compile"}
    pids = {int((tmp_path / f"{i}.pid").read_text()) for i in range(6) if i != 3}
    assert len(pids) >= 2 and os.getpid() not in pids
    # Each compiled candidate is handed to the parent as it arrives; the failed one is not.
    assert sorted(arrived) == [(i, os.getpid()) for i in (0, 1, 2, 4, 5)]
    assert forked_compile._job is None


def test_a_stuck_worker_ends_the_stage_not_tuning(tmp_path, monkeypatch):
    monkeypatch.setenv(forked_compile.PROCESS_TIMEOUT_ENV, "1")
    warm = _warm_recording(tmp_path)
    kwargs = [{"tag": i, "sleep": 30.0 if i == 1 else 0.0} for i in range(4)]
    started = time.perf_counter()
    assert forked_compile.in_processes(warm, (), {}, kwargs, list(range(4)), device=0) is None
    assert time.perf_counter() - started < 15


def test_the_largest_candidate_starts_compiling_before_the_last_worker_is_forked(tmp_path, monkeypatch):
    # Forks of a process holding CUDA are slow; here each takes 0.3 s more, and the first worker must not wait.
    monkeypatch.setenv(forked_compile.COMPILE_PROCESSES_ENV, "3")
    fork, forks = os.fork, []

    def slow_fork():
        forks.append(time.perf_counter())
        pid = fork()
        if pid:
            time.sleep(0.3)
        return pid

    monkeypatch.setattr(os, "fork", slow_fork)

    def warm(BLOCK):
        (tmp_path / str(BLOCK)).write_text(repr(time.perf_counter()))

    blocks = [16, 64, 256]  # the largest last: taken in the given order, it would wait for the last fork
    notes = {}
    assert forked_compile.in_processes(warm, (), {}, [{"BLOCK": b} for b in blocks], [0, 1, 2], 0, notes=notes) == {}
    assert len(forks) == 3 and float((tmp_path / "256").read_text()) < forks[-1]  # before the last fork began


def test_a_worker_that_dies_ends_the_stage_at_once(tmp_path):
    def warm(tag):
        if tag == 2:
            os._exit(7)  # a crash inside the compiler, say

    notes = {}
    started = time.perf_counter()
    assert forked_compile.in_processes(warm, (), {}, [{"tag": i} for i in range(4)], list(range(4)), 0,
                                       notes=notes) is None
    assert time.perf_counter() - started < 20  # not the stage's time limit (300 s)
    assert "died on task 2 (exit code 7)" in notes["stage 1 ended"]


CHILD = """
import os, sys, time
from triton_dist_plugin.compiling import forked_compile
def warm(tag):
    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()  # a worker, compiling
    time.sleep(60)
forked_compile.in_processes(warm, (), {}, [{"tag": i} for i in range(2)], [0, 1], 0)
"""


def test_compile_workers_do_not_outlive_their_parent(tmp_path):
    workers = tmp_path / "workers"
    workers.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", CHILD, str(workers)], cwd=tmp_path,
                              env={**os.environ, "TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES": "2"})
    try:
        deadline = time.monotonic() + 120
        while len(list(workers.iterdir())) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
        pids = [int(p.name) for p in workers.iterdir()]
        assert len(pids) == 2
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(running(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(running(pid) for pid in pids)


def test_thread_stage_records_failures_and_compiles_the_rest(tmp_path):
    warm = _warm_recording(tmp_path)
    kwargs = [{"tag": i, "fail": i == 2} for i in range(5)]
    failed = precompile.warm_all(warm, (), {"grid": (1,)}, kwargs, device=None)
    assert failed == {2: "ValueError: candidate 2 cannot compile"}
    assert {int((tmp_path / f"{i}.pid").read_text()) for i in (0, 1, 3, 4)} == {os.getpid()}


def test_switches(monkeypatch, tmp_path):
    warm = _warm_recording(tmp_path)
    monkeypatch.setenv(precompile.PARALLEL_COMPILE_ENV, "0")
    assert precompile.warm_all(warm, (), {}, [{"tag": 0}, {"tag": 1, "fail": True}]) == {}
    assert not list(tmp_path.iterdir())
    monkeypatch.delenv(precompile.PARALLEL_COMPILE_ENV)
    monkeypatch.setenv(forked_compile.COMPILE_PROCESSES_ENV, "0")
    assert not forked_compile.processes_usable()
    monkeypatch.setenv(forked_compile.COMPILE_PROCESSES_ENV, "many")
    with pytest.raises(ValueError, match="COMPILE_PROCESSES='many' is not valid: it accepts a whole number"):
        forked_compile.processes_usable()


def test_forked_stage_only_where_workers_share_triton_file_cache(monkeypatch):
    from triton_dist_plugin import _compat

    monkeypatch.setattr(_compat, "interpret", lambda: False)  # as on a GPU machine
    monkeypatch.setattr(_compat, "IS_ASCEND", False)
    monkeypatch.delenv(forked_compile.COMPILE_PROCESSES_ENV, raising=False)
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE", raising=False)
    assert forked_compile.processes_usable()
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    assert not forked_compile.processes_usable()
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE")
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "mypkg.cache:RedisCacheManager")
    assert not forked_compile.processes_usable()


def test_forked_stage_is_opt_in_on_ascend(monkeypatch):
    """triton-ascend's compiler has not been run in forked workers on an NPU host, so there the
    stage waits for an explicit worker count (the NPU itself is not needed for this check)."""
    from triton_dist_plugin import _compat

    monkeypatch.setattr(_compat, "interpret", lambda: False)
    monkeypatch.setattr(_compat, "IS_ASCEND", True)
    monkeypatch.delenv(forked_compile.COMPILE_PROCESSES_ENV, raising=False)
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE", raising=False)
    assert not forked_compile.processes_usable()
    monkeypatch.setenv(forked_compile.COMPILE_PROCESSES_ENV, "8")
    assert forked_compile.processes_usable()


class _Descriptor:
    """A launch argument whose attributes the compiler reads, as a TMA ``TensorDescriptor``'s block shape."""

    def __init__(self):
        self.block_shape = [1, 1]


def _shape_hook(nargs):
    nargs["desc"].block_shape = [nargs["BM"], 8]


def _warm_recording_shape(directory):
    def warm(desc, *, BM, grid=None, **options):
        with open(os.path.join(directory, f"{BM}.shape"), "w") as fh:
            fh.write(f"{desc.block_shape[0]},{desc.block_shape[1]},{os.getpid()}")

    return warm


@pytest.mark.parametrize("stage", ["threads", "processes"])
def test_each_candidate_compiles_on_the_arguments_its_config_pre_hook_shaped(tmp_path, stage):
    import triton

    configs = [triton.Config({"BM": bm}, pre_hook=_shape_hook) for bm in (16, 32, 64, 128)]
    desc = _Descriptor()
    meta = {"grid": (1,)}
    kwargs_of = [{"BM": c.kwargs["BM"]} for c in configs]
    inputs = precompile.hooked_inputs(configs, (desc,), meta, kwargs_of, ["desc"])
    assert sorted(inputs) == [0, 1, 2, 3]
    warm = _warm_recording_shape(tmp_path)
    if stage == "threads":
        failed = precompile.warm_all(warm, (desc,), meta, kwargs_of, device=None, inputs=inputs)
    else:
        failed = forked_compile.in_processes(warm, (desc,), meta, kwargs_of, [0, 1, 2, 3], device=0, inputs=inputs)
    assert failed == {}
    for bm in (16, 32, 64, 128):
        rows, cols, pid = (tmp_path / f"{bm}.shape").read_text().split(",")
        assert (int(rows), int(cols)) == (bm, 8)  # its own hook's shape, whatever ran concurrently
        assert (int(pid) == os.getpid()) == (stage == "threads")
    # The caller's own argument ends as the last hook left it, as a loop of upstream launches would.
    assert desc.block_shape == [128, 8]


def test_a_config_pre_hook_that_raises_leaves_its_candidate_on_the_shared_arguments(tmp_path):
    import triton

    def broken(nargs):
        raise RuntimeError("hook failed")

    configs = [triton.Config({"BM": 16}, pre_hook=broken), triton.Config({"BM": 32}, pre_hook=_shape_hook)]
    inputs = precompile.hooked_inputs(configs, (_Descriptor(),), {}, [{"BM": 16}, {"BM": 32}], ["desc"])
    assert sorted(inputs) == [1]


PRESTART = """
import os, sys, threading
order = os.environ.get("ORDER", "")
if order == "torch-first":
    import torch
if order == "disabled-then-activated":  # imported (switched off) before Triton: it imports Triton itself
    import triton_dist_plugin
import triton, triton.language as tl

@triton.jit
def k(x, BLOCK: tl.constexpr):
    pass

if order in ("kernel-first", "disabled-then-activated"):  # decorated before activation: no decoration hook sees it
    early = triton.autotune(configs=[triton.Config({"BLOCK": 1})], key=[])(k)
if order == "library":  # a library's import turns the plugin on
    import turns_it_on
import triton_dist_plugin
from triton_dist_plugin.compiling import prestart
from triton_dist_plugin.isolation import fork_checks

if order == "disabled-then-activated":
    triton_dist_plugin.activate()
started = lambda: sorted(t.name for t in prestart._early)
print(started())  # at activation
if order == "torch-first":  # what torch's first use of CUDA runs (no GPU here)
    import torch.cuda
    for call, _ in list(torch.cuda._queued_calls):
        call()
    print(started())
at_fork = []
refusal = fork_checks.refusal
fork_checks.refusal = lambda: at_fork.append(started()) or refusal()  # what ran as the worker was forked
generated = order == "generated"  # its worker is forked as it is decorated
tuned = triton.autotune(configs=[] if generated else [triton.Config({"BLOCK": 1})], key=[])(k)
print(started())  # once a kernel is decorated
if generated:
    from triton_dist_plugin.isolation import isolate
    print(isolate._shared.began, at_fork)
prestart.prestarted()
try:
    from triton.runtime.cache import triton_key
except ImportError:
    from triton.compiler.compiler import triton_key
print(triton_key.cache_info().currsize)
"""
BOTH = "['tdp-cuda-utils', 'tdp-triton-key']"


@pytest.mark.parametrize("case, env, expected", [
    ("default", {}, [BOTH, BOTH, "1"]),
    # A worker forked at a decoration waits for them: they started at activation, long before.
    ("generated", {"ORDER": "generated"}, [BOTH, BOTH, f"forked [{BOTH}]", "1"]),
    ("library", {"ORDER": "library"}, [BOTH, BOTH, "1"]),
    ("isolation off", {"TRITON_DIST_AUTOTUNE_ISOLATE": "0"}, [BOTH, BOTH, "1"]),
    ("no fork", {"TRITON_DIST_AUTOTUNE_ISOLATE_FORK": "0"}, [BOTH, BOTH, "1"]),
    ("kernel first", {"ORDER": "kernel-first"}, [BOTH, BOTH, "1"]),
    ("disabled, then activated", {"ORDER": "disabled-then-activated", "TRITON_DIST_PLUGIN_DISABLE": "1"},
     [BOTH, BOTH, "1"]),
    ("torch first", {"ORDER": "torch-first"}, [BOTH, BOTH, BOTH, "1"]),
    ("interpreter", {"TRITON_INTERPRET": "1"}, ["[]", "[]", "0"]),
    ("frozen", {"TRITON_DIST_AUTOTUNE_FROZEN": "strict"}, ["[]", "[]", "0"]),
])
def test_what_the_first_compile_needs_starts_in_threads_off_its_path(case, env, expected, tmp_path):
    """Triton's source hash and its CUDA helper build run in threads, off the first tuning's path
    (the helper fails at once on this machine, which has no CUDA: unseen): from activation, so they
    overlap the program's own start-up (a worker forked at a decoration waits for them; started
    after that fork instead, they landed on the first call's path: ``failure-modes.md``); never
    where nothing compiles. Each a fresh interpreter (``-B``: not forked from a process that has
    imported torch)."""
    if env.get("ORDER") in ("kernel-first", "disabled-then-activated") and not _compat.LAZY_BENCH:
        pytest.skip("Triton < 3.4 asks for a GPU driver as a kernel is decorated (none here) unless the plugin is on")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_DIST_AUTOTUNE")
            and k not in ("TRITON_INTERPRET", "ORDER", "TRITON_DIST_PLUGIN_DISABLE")}
    script = tmp_path / "prestart.py"  # Triton reads a kernel's source from its file
    script.write_text(PRESTART)
    (tmp_path / "turns_it_on.py").write_text("import triton_dist_plugin\n")
    home = tmp_path / "home"
    home.mkdir()
    out = python("-B", script, env={**base, "HOME": str(home), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
                                    "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tune"), **env}, cwd=tmp_path,
                 timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines() == expected, (case, out.stdout)
