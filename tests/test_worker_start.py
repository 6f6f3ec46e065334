"""How the isolation worker begins: forked from the user's process while that is safe, else a
fresh interpreter, and in either case holding nothing of the user's process that could act.

Real processes under the interpreter: a user's script decorates a generated kernel of its own (the
worker is forked then), imports a module of generated kernels (imported in the worker too, where
it notes what the worker holds), tunes one, and checks. The one stand-in is a GPU already
initialised (no GPU here): ``torch.cuda.is_initialized`` answers True.
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import python
from test_isolate import _NOTES

from triton_dist_plugin.isolation import fork_checks, isolate, worker_start

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; forks only on Linux")

# Imported by the script after its own kernel made the worker: two generated kernels (imported in
# the worker too, ahead of their first call), and, imported there, a note of what the worker holds.
KERNELS = '''
import json, os, signal, sys, warnings
import triton, triton.language as tl

@triton.autotune(configs=[], key=["n"])
@triton.jit
def first(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

@triton.autotune(configs=[], key=["n"])
@triton.jit
def second(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

with open("/proc/self/comm") as fh:
    name = fh.read().strip()
if name == "tdp-isolation":
    fds = {int(f): os.readlink(f"/proc/self/fd/{f}") for f in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{f}")}
    filters = [(a, c.__name__, getattr(m, "pattern", m) or "") for a, _, c, m, _ in warnings.filters]
    seen = {"fds": fds, "filters": filters,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "sigint": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
            "path": sys.path, "trace": sys.gettrace() is None, "stdout": sys.stdout.fileno(),
            "plugin": sys.modules["triton_dist_plugin"].is_active(), "threads": __import__("torch").get_num_threads(),
            "log_handlers": len(__import__("logging").getLogger().handlers), "wakeup": signal.set_wakeup_fd(-1)}
    with open(os.environ["TDP_SEEN"] + f".{os.getpid()}", "w") as fh:
        json.dump(seen, fh)
'''

SCRIPT = _NOTES + '''
import fcntl, logging, signal, socket, sys, time, threading, warnings
from triton_dist_plugin.isolation import isolate

here = os.environ["TDP_HERE"]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
lock = open(os.path.join(here, "held.lock"), "w")
fcntl.flock(lock, fcntl.LOCK_EX)
signal.signal(signal.SIGTERM, lambda *a: open(os.path.join(here, "handler-ran"), "w").close())
logging.basicConfig(filename=os.path.join(here, "parent.log"))
sys.stdout.write("buffered-once\\n")
if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(60,), name="user-thread", daemon=True).start()
torch.set_num_threads(2)
(torch.ones(1 << 20) * 2).sum()  # torch's CPU thread pool, in use before the fork
import faulthandler
faulthandler.dump_traceback_later(600)  # a watchdog's timer thread
sys.path.insert(0, os.getcwd())  # as `python -c` has it: never the worker's
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)  # as an event loop sets it
warnings.simplefilter("error")  # every warning an error here, the fork's own included

@triton.jit
def copy(x, out, n, BLOCK: triton.language.constexpr):
    offs = triton.language.program_id(0) * BLOCK + triton.language.arange(0, BLOCK)
    triton.language.store(out + offs, triton.language.load(x + offs, mask=offs < n), mask=offs < n)

if sys.argv[1] != "importing":  # a kernel of the script's own: the worker starts as it is decorated
    sys.settrace(lambda *a: None)
    triton.autotune(configs=[], key=["n"])(copy)
    sys.settrace(None)
import kmod
faulthandler.cancel_dump_traceback_later()

worker = isolate._shared
x = torch.randn(300)
out = torch.zeros_like(x)
kmod.second[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, out, 300)
assert torch.equal(out, x)
pid, began = worker.proc.pid, worker.began
with open(f"/proc/{pid}/comm") as fh:
    comm = fh.read().strip()
port = listener.getsockname()[1]
listener.close()
lock.close()  # closed, not unlocked: only a copy of it elsewhere would still hold the lock
again = open(os.path.join(here, "held.lock"), "w")
fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
rebound = socket.socket()
rebound.bind(("127.0.0.1", port))
rebound.listen()
os.kill(pid, signal.SIGTERM)
code = worker.proc.wait(10)
notes = [n for n in records[-1].notes if "isolation worker" in n]
print(json.dumps({"began": began, "comm": comm, "code": code, "notes": notes}))
'''


def _run(tmp_path: Path, mode: str, **env: str) -> tuple[dict, list[dict], str]:
    (tmp_path / "kmod.py").write_text(KERNELS)
    (tmp_path / "main.py").write_text(SCRIPT)
    for name in ("tune", "triton", "home", "elsewhere"):
        (tmp_path / name).mkdir(exist_ok=True)
    full = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tune"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton"), "HOME": str(tmp_path / "home"),
            "TDP_HERE": str(tmp_path), "TDP_SEEN": str(tmp_path / "seen"), "PYTHONPATH": str(tmp_path), **env}
    full.pop(isolate.ENV, None)
    proc = python(tmp_path / "main.py", mode, env=full, cwd=tmp_path / "elsewhere", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("seen.*"))]
    return json.loads(proc.stdout.strip().splitlines()[-1]), seen, proc.stdout


def test_a_forked_worker_holds_nothing_of_its_parent_that_could_act(tmp_path):
    """Forked as the script's own kernel is decorated, after the script used torch's CPU pool and
    set a watchdog timer and a tracer: it imports the kernels' module imported after (as plain
    Triton: the plugin's patches put away) and runs its candidates; it holds none of the parent's
    files (the listening socket can be bound again, the lock file locked again once the parent
    closed them), none of its signal handlers (a SIGTERM kills it, the parent's handler never
    runs), its warnings made errors, its tracer, its path entry for the working directory or its
    buffered output."""
    result, seen, stdout = _run(tmp_path, "plain")
    assert result["began"] == "forked" and result["comm"] == "tdp-isolation"
    assert result["code"] == -15 and not (tmp_path / "handler-ran").exists()
    assert result["notes"] and result["notes"][0].startswith("ran "), result["notes"]
    assert "worker forked" in result["notes"][0] and "0 failed there" in result["notes"][0]
    assert stdout.count("buffered-once") == 1
    (inside,) = seen  # imported once there, and no second worker imported it
    fds = inside["fds"]
    assert {"0", "1", "2"} <= set(fds) and fds["0"] == os.devnull
    others = {n: target for n, target in fds.items() if int(n) > 2}
    assert len(others) == 1 and next(iter(others.values())).startswith("socket:"), fds  # its own socket only
    assert ["default", "DeprecationWarning", "__main__"] in inside["filters"]  # Python's own, as it starts
    assert not [f for f in inside["filters"] if f[0] == "error"]  # none of the parent's errors
    assert inside["sigterm"] and inside["sigint"]  # default, and ^C left to the parent
    assert str(tmp_path / "elsewhere") not in inside["path"] and inside["trace"]
    assert not inside["plugin"] and inside["threads"] == 1 and inside["log_handlers"] == 0 and inside["wakeup"] == -1


def test_no_fork_while_a_module_is_being_imported(tmp_path):
    """A kernel decorated as a library is imported: the child would hold the library half run (and
    running it again repeats what it did, a lock it took, an operator it registered). A fresh
    interpreter then, which imports it whole."""
    result, seen, _ = _run(tmp_path, "importing")
    assert result["began"] == "started as a fresh interpreter (a module is being imported (kmod))", result
    assert result["notes"] and "0 failed there" in result["notes"][0], result["notes"]


def test_a_process_with_other_threads_starts_a_fresh_worker_and_says_why(tmp_path):
    """A thread of the user's could hold a lock the child needs: the worker is a fresh interpreter,
    which still isolates the kernel (imported by name, run, named like a forked one)."""
    result, seen, _ = _run(tmp_path, "thread")
    assert result["began"].startswith("started as a fresh interpreter (other threads run in this process (user-thread")
    assert result["comm"] == "tdp-isolation" and result["code"] == -15
    assert result["notes"] and "0 failed there" in result["notes"][0], result["notes"]
    (inside,) = seen
    assert not [f for f in inside["filters"] if f[0] == "error"] and inside["sigint"]


def test_the_setting_turns_the_fork_off(tmp_path):
    result, _, _ = _run(tmp_path, "plain", **{worker_start.FORK_ENV: "0"})
    assert result["began"] == f"started as a fresh interpreter ({worker_start.FORK_ENV}=0)"


def test_no_fork_once_the_gpu_is_in_use(monkeypatch):
    """Stand-in for a GPU (none here): torch says CUDA is initialised, as after a tensor was put on it."""
    assert fork_checks._device_in_use() is None  # no GPU driver in this process
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert fork_checks._device_in_use() == "this process has used the GPU already"


def test_no_fork_from_a_process_holding_much_memory_of_its_own(monkeypatch):
    """A fork shares the parent's pages until either side writes one: with a large heap (a model
    loaded before the kernel was decorated), a fresh interpreter costs less. The limit is lowered
    here below what this test process holds (torch is imported)."""
    assert fork_checks._large_heap() is None
    monkeypatch.setattr(fork_checks, "_HEAP_MIB", 10)
    refusal = fork_checks._large_heap()
    assert refusal.startswith("this process holds ") and "MiB of its own memory" in refusal, refusal


def test_a_forked_worker_dies_of_a_crashing_candidate_and_is_replaced():
    """The forked child is a process of its own: a candidate that writes far out of bounds kills it,
    not this process, and the next worker takes the rest."""
    from test_isolate import planted

    worker = isolate.Worker()
    try:
        assert worker.began == "forked", worker.began
        first = worker.proc
        x, out = torch.randn(300), torch.zeros(300)
        worker.prepare(planted, type(planted).__name__, (x, out, 300), {})
        for index, fault in enumerate((0, 1, 0)):
            worker.submit(index, {"BLOCK": 64, "FAULT": fault}, (5,))
        failed = worker.finish({})
        assert sorted(failed) == [1] and failed[1].startswith("crashed the isolation worker"), failed
        assert first.returncode is not None and first.returncode != 0 and worker.proc is not first
    finally:
        worker.stop()


def test_a_forked_worker_that_cannot_set_itself_up_is_replaced_by_a_fresh_one(tmp_path):
    """A failure while the child lets go of its parent (planted here): a fresh interpreter takes
    over, and the report says why; the kernel is isolated all the same."""
    (tmp_path / "kmod.py").write_text(KERNELS)
    (tmp_path / "main.py").write_text(
        _NOTES + "from triton_dist_plugin.isolation import worker_start\n"
        "def planted(path):\n    raise RuntimeError('planted')\n"
        "worker_start._as_fresh = planted\n"
        "@triton.jit\ndef copy(x, out, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)\n"
        "kernel = triton.autotune(configs=[], key=['n'])(copy)\n"  # decorated here: the worker is forked
        "x = torch.randn(300)\nout = torch.zeros_like(x)\n"
        "kernel[lambda m: (triton.cdiv(300, m['BLOCK']),)](x, out, 300)\n"
        "assert torch.equal(out, x)\n"
        "print(json.dumps([n for n in records[0].notes if 'isolat' in n]))\n")
    (tmp_path / "home").mkdir()
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tune"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "HOME": str(tmp_path / "home"), "PYTHONPATH": str(tmp_path),
           "TDP_SEEN": str(tmp_path / "seen")}
    env.pop(isolate.ENV, None)
    proc = python(tmp_path / "main.py", env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(notes) == 1 and "0 failed there" in notes[0] and ("worker started as a fresh interpreter (the forked "
                                                               "worker failed: the forked worker could not start "
                                                               "(RuntimeError: planted))") in notes[0], notes


_ASKS_NOTHING = '''
import sys, torch, triton
from triton.backends import backends
asked = []
def recording(name, original):
    def call(*args, **kwargs):
        asked.append(name)
        return original(*args, **kwargs)
    return call
for name in ("is_available", "device_count", "init", "_lazy_init", "current_device", "get_device_capability"):
    setattr(torch.cuda, name, recording(f"torch.cuda.{name}", getattr(torch.cuda, name)))
if hasattr(torch._C, "_cuda_getDeviceCount"):  # a CUDA build
    torch._C._cuda_getDeviceCount = recording("cudaGetDeviceCount", torch._C._cuda_getDeviceCount)
for backend in backends.values():
    backend.driver.is_active = staticmethod(recording(f"{backend.driver.__name__}.is_active", backend.driver.is_active))
import triton_dist_plugin
from triton_dist_plugin.compiling import prestart
import kmod  # two generated kernels: the worker is made as the first is decorated
@triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def explicit(x, n, BLOCK: triton.language.constexpr):
    pass
prestart.prestarted()
from triton.runtime import driver
print(asked, driver._default is None and driver._active is None)
'''


def test_nothing_the_plugin_does_before_the_first_call_asks_a_gpu_driver(tmp_path):
    """A driver initialised before the fork is lost to the worker (and makes the fork refuse):
    activation, decoration and their start-up threads must not ask torch or Triton for a device."""
    (tmp_path / "kmod.py").write_text(KERNELS)
    (tmp_path / "home").mkdir()
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tune"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "HOME": str(tmp_path / "home"), "PYTHONPATH": str(tmp_path)}
    env.pop(isolate.ENV, None)
    (tmp_path / "asks.py").write_text(_ASKS_NOTHING)
    proc = python(tmp_path / "asks.py", env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "[] True", proc.stdout[-2000:]


def test_a_module_the_plugins_own_start_up_threads_import_is_waited_for_not_refused(monkeypatch):
    """Triton's driver module, imported by the start-up thread that builds it, was seen half
    imported at a decoration's fork, which then refused (a fresh interpreter, seconds slower) though
    the fork waits for that thread anyway. A module of Triton's is judged once the threads are done;
    any other half-imported module is refused at once, without waiting for them."""
    import importlib.machinery
    import threading
    import types

    from triton_dist_plugin.compiling import prestart

    monkeypatch.setattr(fork_checks, "lasting_refusal", lambda: None)  # (this process's size, say)
    for name, refused in (("triton._tdp_half_imported", False), ("a_users_library", True)):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__spec__._initializing = True
        monkeypatch.setitem(sys.modules, name, module)
        thread = threading.Thread(target=lambda spec=module.__spec__: time.sleep(2.0) or setattr(
            spec, "_initializing", False), name="tdp-triton-key", daemon=True)
        thread.start()
        monkeypatch.setattr(prestart, "_early", [thread])
        why = fork_checks.refusal() or ""
        assert ("a module is being imported" in why) == refused, why
        assert thread.is_alive() == refused  # refused at once; else only after the thread was done
        thread.join()
