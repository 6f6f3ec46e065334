"""Where the first call of the 48-config matmul spends its wall time (GPU, empty caches): the
start and end of the plugin's main steps, relative to the call's start.

    python benchmarks/diagnostics/profile_timeline.py [M N K]

``TRITON_DIST_AUTOTUNE_DIR`` may name a plugin cache with tuned keys (a warm start); Triton's
cache is always empty.
"""

import functools
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
os.environ.setdefault("TRITON_DIST_AUTOTUNE_DIR", tempfile.mkdtemp())  # picks persist: start from none, or given
import torch  # noqa: E402
import triton  # noqa: E402

sys.path.insert(0, ".")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
from _common import collect_notes  # noqa: E402

import triton_dist_plugin  # noqa: E402,F401
from kernels import KERNELS  # noqa: E402
from triton_dist_plugin import engine, settle, timing  # noqa: E402
from triton_dist_plugin.compiling import (
    forked_compile,  # noqa: E402
    precompile,  # noqa: E402
)
from triton_dist_plugin.patched import launch, tuning  # noqa: E402
from triton_dist_plugin.search import guided, model  # noqa: E402
from triton_dist_plugin.store import persist  # noqa: E402

# A step is wrapped where it is looked up: split_launch in both modules (tune's call and isolation's).
STEPS = [(launch, "tune"), (launch, "select_configs"), (tuning, "warm_start"), (tuning, "agree"),
         (tuning, "compile_all"), (launch, "split_launch"), (tuning, "split_launch"), (launch.settings, "validate"),
         (launch._compat, "active_device"),
         (precompile, "warm_all"), (forked_compile, "caches_ready"), (forked_compile, "_in_processes"),
         (engine, "_round"), (engine, "run_candidates"), (tuning, "_persist"), (persist.KernelStore, "read"),
         (timing, "resolve_method"), (engine, "record"), (precompile, "warm_one"), (model, "rank"),
         (guided, "guided"), (settle, "settle")]
events: list = []
origin = [0.0]


def wrap(owner, name):
    fn = getattr(owner, name, None)
    if fn is None:
        return

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            events.append((name, start - origin[0], time.perf_counter() - origin[0]))

    setattr(owner, name, timed)


for owner, name in STEPS:
    wrap(owner, name)
mm = KERNELS["matmul"]
notes = collect_notes()
shape = tuple(int(v) for v in sys.argv[1:4]) or (4096, 4096, 4096)
tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)  # as a program: decorate, then load
torch.manual_seed(0)
a = torch.randn(shape[0], shape[2], device="cuda", dtype=torch.float16)
b = torch.randn(shape[2], shape[1], device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
origin[0] = time.perf_counter()
mm.launch(tuned, a, b)
torch.cuda.synchronize()
total = time.perf_counter() - origin[0]
loads = sorted((e for e in events if e[0] == "warm_one"), key=lambda e: e[1])
for name, start, end in sorted((e for e in events if e[0] != "warm_one"), key=lambda e: e[1]):
    print(f"{name:16} {start:7.3f} -> {end:7.3f}  ({end - start:.3f}s)")
if loads:  # the parent taking each compiled candidate from the cache, as it arrives
    print(f"{len(loads)} loads: first {loads[0][1]:.3f} -> {loads[0][2]:.3f}, last {loads[-1][1]:.3f} -> "
          f"{loads[-1][2]:.3f}, longest {max(e[2] - e[1] for e in loads):.3f}s")
for note in notes:
    print("note:", note)
print(f"first call {total:.3f}s, pick {tuned.best_config}")
