"""GPU check of the direct cache-hit launch (``triton_dist_plugin.patched.direct``): every case where the
kernel Triton would pick can change between two launches of one tuned key, and what hooks see.

Each line compares against ``JITFunction.run`` itself or against torch; exit status 1 if any fails.
"""

import sys

import torch
import triton
from triton import knobs

import triton_dist_plugin  # noqa: F401  (patches Triton)
from kernels import KERNELS
from triton_dist_plugin.patched import direct, kernel_state

sys.path.insert(0, "benchmarks")
from _common import save_results  # noqa: E402

add_kernel = KERNELS["add"].jit  # the same kernel every benchmark here launches

results: dict = {}


def check(name: str, ok: bool) -> None:
    results[name] = bool(ok)
    print(f"{'ok ' if ok else 'FAIL'} {name}", flush=True)


tuned = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512) for w in (2, 4)],
                        key=["n"])(add_kernel)
n = 4096
xb, yb = torch.randn(n + 8, device="cuda"), torch.randn(n + 8, device="cuda")
x, y, o = xb[:n], yb[:n], torch.empty(n, device="cuda")
grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
tuned[grid](x, y, o, n)
k1 = tuned[grid](x, y, o, n)
o.zero_()
k1b = tuned[grid](x, y, o, n)
torch.cuda.synchronize()
st = kernel_state.state_of(tuned)
hit = st.fast[st.key_get((x, y, o, n))]
launcher = hit[2]
check("a direct launcher serves the tuned key", launcher is not None and not launcher.off)
check("its self-check passed (no refusals)", not direct.refusals)
check("same compiled kernel on the second launch", k1 is k1b and len(launcher.table) == 1)
check("aligned result", torch.equal(o, x + y))
check("that kernel is the one JITFunction.run picks",
      add_kernel.run(x, y, o, n, grid=grid, warmup=False, **hit[1]) is k1)

# Same key, pointers no longer 16-byte aligned: Triton specialises differently.
x2, y2, o2 = xb[1:n + 1], yb[1:n + 1], torch.empty(n + 1, device="cuda")[1:]
k2 = tuned[grid](x2, y2, o2, n)
k2b = tuned[grid](x2, y2, o2, n)
torch.cuda.synchronize()
check("misaligned arguments get their own kernel", k2 is not k1 and k2b is k2 and len(launcher.table) == 2)
check("misaligned result", torch.equal(o2, x2 + y2))
check("misaligned kernel is the one JITFunction.run picks",
      add_kernel.run(x2, y2, o2, n, grid=grid, warmup=False, **hit[1]) is k2)

# The current stream, and what a launch-enter hook (a profiler's) is given.
seen: list = []
s = torch.cuda.Stream()
knobs.runtime.launch_enter_hook = lambda md: seen.append((md.get()["name"], md.get()["stream"]))
try:
    with torch.cuda.stream(s):
        o.zero_()
        tuned[grid](x, y, o, n)
    s.synchronize()
finally:
    knobs.runtime.launch_enter_hook = None
check("launch-enter hook called once with the current stream", seen == [("add_kernel", s.cuda_stream)])
check("result on a side stream", torch.equal(o, x + y))

# A knob that changes the compile options: Triton compiles a debug kernel, and so must we.
with knobs.runtime.scope():
    knobs.runtime.debug = True
    kd = tuned[grid](x, y, o, n)
    kd_ref = add_kernel.run(x, y, o, n, grid=grid, warmup=False, **hit[1])
check("TRITON_DEBUG on mid-run gives Triton's debug kernel", kd is kd_ref and kd is not k1 and kd.metadata.debug)
check("and off again gives the first kernel back", tuned[grid](x, y, o, n) is k1)

# A pre-run hook sends launches through JITFunction.run, which calls it.
calls: list = []
add_kernel.add_pre_run_hook(lambda *a, **k: calls.append(1))
try:
    tuned[grid](x, y, o, n)
finally:
    add_kernel.pre_run_hooks.clear()
check("pre-run hooks still run", calls == [1])

# Matmul: a transposed B turns stride_bn/stride_bk into 1 (a constant Triton specialises on).
mm = KERNELS["matmul"]
tuned_mm = triton.autotune(configs=mm.configs("cuda")[:4], key=mm.key)(mm.jit)
a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
b = torch.randn(512, 384, device="cuda", dtype=torch.float16)
bt = b.t().contiguous().t()  # same values, column-major
c1 = mm.launch(tuned_mm, a, b)
c1 = mm.launch(tuned_mm, a, b)
c2 = mm.launch(tuned_mm, a, bt)
c2 = mm.launch(tuned_mm, a, bt)
ref = a.float() @ b.float()
torch.cuda.synchronize()
mm_state = kernel_state.state_of(tuned_mm)
mm_launchers = [h[2] for h in mm_state.fast.values()]
check("matmul: one launcher, two specialisations",
      len(mm_launchers) == 1 and mm_launchers[0] is not None and len(mm_launchers[0].table) == 2)
err = max(((c - ref).abs().max() / ref.abs().max()).item() for c in (c1.float(), c2.float()))
check(f"matmul results match torch (max rel err {err:.1e})", err < 1e-2)

# Turned off by the environment: every launch goes through JITFunction.run.
import os  # noqa: E402

os.environ[direct.DIRECT_ENV] = "0"
check("TRITON_DIST_DIRECT_LAUNCH=0 turns it off", not direct.usable(add_kernel))
del os.environ[direct.DIRECT_ENV]

save_results("direct_launch_check_h200.json", {"triton": triton.__version__, "checks": results,
                                               "refusals": direct.refusals})
failed = [k for k, v in results.items() if not v]
print(f"{len(results) - len(failed)}/{len(results)} checks passed")
sys.exit(1 if failed else 0)
