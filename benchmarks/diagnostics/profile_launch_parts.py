"""Host cost of each piece of a Triton launch, against the plugin's cache-hit path (GPU only).

Prints microseconds per call for: the ANCHORS-style direct launch, the plugin's tuned launch, and
the parts of ``JITFunction.run`` (knob reads, device and stream, binder, cache key, grid, launch).
"""

import os
import sys
from pathlib import Path

import torch
import triton

import triton_dist_plugin  # noqa: F401
from kernels import KERNELS
from triton_dist_plugin.patched import direct, kernel_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
from _common import host_loop, save_results  # noqa: E402

add_kernel = KERNELS["add"].jit  # the same kernel every benchmark here launches

tuned = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024) for w in (2, 4)],
                        key=["n"])(add_kernel)
n = 1 << 12
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
o = torch.empty_like(x)
g = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
tuned[g](x, y, o, n)
# The same kernel tuned with the direct launch turned off: every hit goes through JITFunction.run.
os.environ[direct.DIRECT_ENV] = "0"
tuned_off = triton.autotune(configs=tuned.configs, key=["n"])(add_kernel)
tuned_off[g](x, y, o, n)
tuned_off[g](x, y, o, n)
del os.environ[direct.DIRECT_ENV]
torch.cuda.synchronize()
best = tuned.best_config
BL, NW = best.kwargs["BLOCK"], best.num_warps
st = kernel_state.state_of(tuned)
meta = st.launch_kwargs(best)
add_kernel[(triton.cdiv(n, BL),)](x, y, o, n, BLOCK=BL, num_warps=NW)
add_kernel[(triton.cdiv(n, BL),)](x, y, o, n, **meta)
torch.cuda.synchronize()

from triton import knobs  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402
from triton.runtime.jit import compute_cache_key  # noqa: E402

dev = driver.active.get_current_device()
stream = driver.active.get_current_stream(dev)
kc, kkc, target, backend, binder = add_kernel.device_caches[dev]
opts = dict(meta, debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
ba, spec, op = binder(x, y, o, n, **opts)
ck = compute_cache_key(kkc, spec, op)
kernel = kc[ck]
grid = g(ba)
vals = tuple(ba.values())
args = (x, y, o, n)
dgrid = (triton.cdiv(n, BL),)

rows = {
    "direct (ANCHORS: tuple grid, BLOCK+num_warps)":
        lambda: add_kernel[(triton.cdiv(n, BL),)](x, y, o, n, BLOCK=BL, num_warps=NW),
    "direct, all config kwargs": lambda: add_kernel[(triton.cdiv(n, BL),)](x, y, o, n, **meta),
    "direct, lambda grid, all kwargs": lambda: add_kernel[g](x, y, o, n, **meta),
    "plugin tuned[grid]": lambda: tuned[g](x, y, o, n),
    "plugin tuned[grid], direct launch off": lambda: tuned_off[g](x, y, o, n),
    "fn.run(grid=tuple) all kwargs": lambda: add_kernel.run(x, y, o, n, grid=dgrid, warmup=False, **meta),
    "part: knobs.runtime.debug": lambda: knobs.runtime.debug,
    "part: knobs instrumentation_mode": lambda: knobs.compilation.instrumentation_mode,
    "part: knobs launch hooks x2": lambda: (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook),
    "part: get_current_device": lambda: driver.active.get_current_device(),
    "part: get_current_stream": lambda: driver.active.get_current_stream(dev),
    "part: binder": lambda: binder(x, y, o, n, **opts),
    "part: compute_cache_key": lambda: compute_cache_key(kkc, spec, op),
    "part: tuple(spec) hash lookup": lambda: {}.get(tuple(spec)),
    "part: grid lambda": lambda: g(ba),
    "part: launch_metadata": lambda: kernel.launch_metadata(grid, stream, *vals),
    "part: kernel.run":
        lambda: kernel.run(grid[0], 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None, *vals),
    "part: plugin key": lambda: st.key_get(args),
    "empty lambda": lambda: None,
}
res = {k: [] for k in rows}
for _ in range(5):
    for name, f in rows.items():
        res[name].append(host_loop(f))
out = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
base = out["direct (ANCHORS: tuple grid, BLOCK+num_warps)"]
save_results("launch_parts_h200.json", dict(triton=triton.__version__, torch=torch.__version__, median_us=out))
print(f"triton {triton.__version__}")
for k, v in out.items():
    print(f"{k:48s} {v:7.2f} us  {v / base:5.2f}x")
