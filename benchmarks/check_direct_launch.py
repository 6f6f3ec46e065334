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
from triton_dist_plugin.patched import compiled_hit, direct, kernel_state

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
check(f"the compiled cache-hit path serves it ({compiled_hit.why_not or 'built'})",
      type(tuned.__dict__.get("run")).__name__ == "Hit")

# Launches the Python launcher took (the compiled path hands it what it does not serve).
python_launches: list = []
_python_launch = direct.Launcher.__call__
direct.Launcher.__call__ = lambda self, *a: python_launches.append(1) or _python_launch(self, *a)

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
previous_hook = knobs.runtime.launch_enter_hook  # None, or Triton's (empty) hook chain on 3.6+
knobs.runtime.launch_enter_hook = lambda md: seen.append((md.get()["name"], md.get()["stream"]))
try:
    with torch.cuda.stream(s):
        o.zero_()
        tuned[grid](x, y, o, n)
    s.synchronize()
finally:
    knobs.runtime.launch_enter_hook = previous_hook
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

# The launch guard (launch_guard): once the binder has confirmed a shape of call, the guard tells the
# kernel from the arguments alone. Every specialisation Triton makes, each launched four times (through
# JITFunction.run, the binder, the guard's first sight, the guard): always JITFunction.run's kernel.
import triton.language as tl  # noqa: E402

seen_meta: list = []


def _feature_meta(grid, metadata, args):
    seen_meta.append(type(args["x"]).__name__)
    return {}


@triton.jit(do_not_specialize=["seed"], launch_metadata=_feature_meta)
def feature_kernel(x, y, out, bias, size, n, stride, seed, alpha, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
                   SCALE: tl.constexpr = 2):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    v = tl.load(x + offs, mask=mask).to(tl.float32) + alpha * tl.load(y + offs * stride, mask=mask).to(tl.float32)
    if HAS_BIAS:
        v += tl.load(bias + offs, mask=mask).to(tl.float32)
    v = v * SCALE + (n % 7) + 0 * seed
    tl.store(out + offs, v.to(out.dtype.element_ty), mask=mask)


tuned_f = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=4) for b in (128, 256)],
                          key=["size"])(feature_kernel)
m = 1000
fgrid = lambda meta: (triton.cdiv(m, meta["BLOCK"]),)  # noqa: E731


def feature_args(dtype=torch.float32, misaligned=False, bias=True, n=64, stride=1, seed=3, alpha=0.5):
    base = torch.randn(2 * m + 8, device="cuda", dtype=dtype)
    xx = base[1:m + 1] if misaligned else base[:m]
    yy = torch.randn(m * stride, device="cuda", dtype=dtype)
    bb = torch.randn(m, device="cuda", dtype=dtype) if bias else None
    return (xx, yy, torch.empty(m, device="cuda", dtype=dtype), bb, m, n, stride, seed, alpha, bias)


def feature_ref(args):
    xx, yy, _, bb, _, n, stride, _, alpha, _ = args
    v = xx.float() + alpha * yy[::stride].float() + (0 if bb is None else bb.float())
    return (v * 2 + n % 7).to(xx.dtype)


cases = {
    "aligned, bias": feature_args(), "bias None": feature_args(bias=False), "n == 1 (a constexpr)": feature_args(n=1),
    "n a multiple of 16": feature_args(n=32), "n an i64": feature_args(n=2**31 + 16),
    "misaligned x": feature_args(misaligned=True), "stride 2 (not the constant 1)": feature_args(stride=2),
    "another seed (do_not_specialize)": feature_args(seed=2**40 + 1), "another alpha": feature_args(alpha=-1.5),
    "fp16": feature_args(dtype=torch.float16),
}
for name, args in cases.items():
    got = []
    # The first launch of a new autotune key (None bias, fp16) tunes it; the next three confirm the
    # kernel through the binder, learn a plan, and give it its entry: the compiled guard serves the fifth.
    for _ in range(6):
        args[2].zero_()
        python_launches.clear()
        got.append(tuned_f[fgrid](*args))
    by_c = not python_launches  # the last launch never reached the Python launcher
    torch.cuda.synchronize()
    ok = torch.allclose(args[2].float(), feature_ref(args).float(), atol=1e-2, rtol=1e-2)  # before the reference
    f_state = kernel_state.state_of(tuned_f)
    _, f_meta, f_launcher, _ = f_state.fast[f_state.key_get(args)]  # this key's pick and its launcher
    want = feature_kernel.run(*args, grid=fgrid, warmup=False, **f_meta)
    entries = [(key, entry) for plan in f_launcher.plans for key, entry in plan.entries.items()]
    check(f"guard: {name}: JITFunction.run's kernel on every launch, right result, served by the compiled guard",
          all(k is want for k in got[1:]) and ok and any(entry[3] is want for _, entry in entries) and by_c)

# Kernel arguments by keyword, in two orders (as libraries pass them), and triton.heuristics
# around the tuner (which passes its values by keyword): the guard serves them too.
names = ["x", "y", "out", "bias", "size", "n", "stride", "seed", "alpha", "HAS_BIAS"]
for label, order in (("by keyword", names), ("by keyword, reversed", names[::-1])):
    args = feature_args()
    named = dict(zip(names, args))
    got = []
    for _ in range(4):
        args[2].zero_()
        got.append(tuned_f[fgrid](**{k: named[k] for k in order}))
    torch.cuda.synchronize()
    ok = torch.allclose(args[2].float(), feature_ref(args).float(), atol=1e-2, rtol=1e-2)  # before the reference
    f_meta = tuned_f.best_config.all_kwargs()
    want = feature_kernel.run(*args, grid=fgrid, warmup=False, **f_meta)
    f_launcher = next(h[2] for h in f_state.fast.values() if h[0] is tuned_f.best_config)
    served = any(e[3] is want for plan in f_launcher.plans if plan.names for e in plan.entries.values())
    check(f"guard: {label}: JITFunction.run's kernel, right result, served by a keyword plan",
          all(k is want for k in got[1:]) and ok and served)
with_heuristics = triton.heuristics({"HAS_BIAS": lambda a: a["bias"] is not None})(tuned_f)
args = feature_args()
for _ in range(4):
    args[2].zero_()
    with_heuristics[fgrid](*args[:-1])
torch.cuda.synchronize()
h_launcher = next(h[2] for h in f_state.fast.values() if h[0] is tuned_f.best_config)
check("heuristics around the tuner: right result, served by a plan with the heuristic's keyword",
      torch.allclose(args[2].float(), feature_ref(args).float(), atol=1e-2, rtol=1e-2)
      and any(plan.entries for plan in h_launcher.plans if plan.names == ("HAS_BIAS",)))

# A listener (an exit hook added to Triton's chain) gets Triton's metadata, built from the tensors.
heard: list = []
seen_meta.clear()


def listener(metadata):
    heard.append(None if metadata is None else metadata.get()["name"])


if hasattr(knobs.runtime.launch_exit_hook, "add"):  # 3.6+: Triton's hook chain
    knobs.runtime.launch_exit_hook.add(listener)
    try:
        tuned_f[fgrid](*cases["aligned, bias"])
    finally:
        knobs.runtime.launch_exit_hook.remove(listener)
    torch.cuda.synchronize()
    check("an exit hook in Triton's chain hears the guarded kernel's launch, with Triton's metadata",
          heard == ["feature_kernel"] and seen_meta == ["Tensor"])

# A CPU tensor: the launcher refuses it as upstream does (the guard never passes it as a pointer).
try:
    cpu_args = list(cases["aligned, bias"])
    cpu_args[0] = cpu_args[0].cpu()
    tuned_f[fgrid](*cpu_args)
    torch.cuda.synchronize()
    check("a CPU tensor is refused as upstream refuses it", False)
except (ValueError, RuntimeError) as exc:
    check(f"a CPU tensor is refused as upstream refuses it ({type(exc).__name__})", True)

# Another device, where there is one: its own kernel, its own result.
if torch.cuda.device_count() > 1:
    with torch.cuda.device(1):
        args1 = tuple(a.to("cuda:1") if isinstance(a, torch.Tensor) else a for a in cases["aligned, bias"])
        kernels1 = [tuned_f[fgrid](*args1) for _ in range(4)]
        f_meta1 = f_state.fast[f_state.key_get(args1)][1]
        want1 = feature_kernel.run(*args1, grid=fgrid, warmup=False, **f_meta1)
        torch.cuda.synchronize()
    check("device 1: JITFunction.run's kernel, right result",
          all(k is want1 for k in kernels1) and torch.allclose(args1[2].cpu(), feature_ref(args1).cpu(), atol=1e-2))

# Turned off by the environment: every launch goes through JITFunction.run.
import os  # noqa: E402

os.environ[direct.DIRECT_ENV] = "0"
check("TRITON_DIST_DIRECT_LAUNCH=0 turns it off", not direct.usable(add_kernel))
del os.environ[direct.DIRECT_ENV]

save_results("direct_launch_check_h200.json", {"triton": triton.__version__, "checks": results,
                                               "refusals": direct.refusals, "guard_refusals": direct.guard_refusals,
                                               "gpus": torch.cuda.device_count()})
failed = [k for k, v in results.items() if not v]
print(f"{len(results) - len(failed)}/{len(results)} checks passed")
sys.exit(1 if failed else 0)
