"""The fp16 add of ``bench_tiling_gpu.py`` at 1M and 16M elements: every ``BLOCK`` (512-8192) with
every ``num_warps`` (1-16), measured round-robin (do_bench median, 5 rounds, median of those),
beside what ``configs=[]`` generated and picked; to see whether a ``configs=[]`` gap on a
few-microsecond kernel is a missing candidate or measurement spread.

    python benchmarks/diagnostics/diag_add_warps.py        (GPU; results/add_warps_h200.json)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
from _common import do_bench_rounds, save_results  # noqa: E402

import triton_dist_plugin  # noqa: E402, F401  (configs=[] needs the plugin)
from kernels import add  # noqa: E402


def main() -> None:
    out = {}
    for n in (1 << 20, 1 << 24):
        x, y = (torch.randn(n, device="cuda", dtype=torch.float16) for _ in range(2))
        gen = triton.autotune(configs=[], key=["n"])(add.add_kernel)
        add.add(gen, x, y)
        torch.cuda.synchronize()
        generated = {f"{c.kwargs['BLOCK']}x{c.num_warps}": t[0] for c, t in gen.configs_timings.items()}
        grid = {(b, w) for b in (512, 1024, 2048, 4096, 8192) for w in (1, 2, 4, 8, 16)}
        calls = {f"{b}x{w}": (lambda b=b, w=w, x=x, y=y: add.add(add.add_kernel, x, y, BLOCK=b, num_warps=w))
                 for b, w in sorted(grid)}
        rounds = do_bench_rounds(calls)  # 5 rounds of do_bench(warmup=25, rep=100) medians
        careful = {k: statistics.median(v) for k, v in rounds.items()}
        best = min(careful, key=careful.get)
        pick = f"{gen.best_config.kwargs['BLOCK']}x{gen.best_config.num_warps}"
        out[n] = {"careful_ms": careful, "generated_screen_ms": generated, "pick": pick, "best": best,
                  "pick_gap_pct": (careful[pick] / careful[best] - 1) * 100}
        print(f"n={n}: pick {pick} {careful[pick] * 1e3:.2f} us, best {best} {careful[best] * 1e3:.2f} us "
              f"({out[n]['pick_gap_pct']:+.1f}%); generated {sorted(generated)}")
        for k in sorted(careful, key=careful.get)[:8]:
            print(f"   {k:>8} {careful[k] * 1e3:6.2f} us  rounds {[round(v * 1e3, 2) for v in rounds[k]]}")
    save_results("add_warps_h200.json", out)


if __name__ == "__main__":
    main()
