"""Where the host time of a cache-hit launch goes: the plugin's fast path, piece by piece."""

import cProfile
import pstats
import sys
from pathlib import Path

import torch
import triton

import triton_dist_plugin  # noqa: F401  (patches Triton)
from kernels import KERNELS
from triton_dist_plugin.patched import kernel_state

add = KERNELS["add"]
n = 1 << 12
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
o = torch.empty_like(x)
tuned = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512) for w in (2, 4)],
                        key=["n"])(add.jit)
grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
tuned[grid](x, y, o, n)
best = tuned.best_config
meta = kernel_state.state_of(tuned).launch_kwargs(best)
dgrid = (triton.cdiv(n, best.kwargs["BLOCK"]),)


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
from _common import host_loop as per_call  # noqa: E402

st = kernel_state.state_of(tuned)
args = (x, y, o, n)
print("fast run installed:", "run" in tuned.__dict__, "fast entries:", len(st.fast), len(tuned.cache))
rows = {
    "tuned[grid](...)": lambda: tuned[grid](x, y, o, n),
    "direct, BLOCK+num_warps": lambda: add.jit[dgrid](x, y, o, n, BLOCK=best.kwargs["BLOCK"], num_warps=best.num_warps),
    "direct, all config kwargs": lambda: add.jit[dgrid](x, y, o, n, **meta),
    "direct, lambda grid + all kwargs": lambda: add.jit[grid](x, y, o, n, **meta),
    "key only": lambda: st.key_get(args),
}
for _ in range(2):
    for name, f in rows.items():
        print(f"{name:36s} {per_call(f):8.2f} us")
pr = cProfile.Profile()
pr.enable()
for _ in range(20000):
    tuned[grid](x, y, o, n)
torch.cuda.synchronize()
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
