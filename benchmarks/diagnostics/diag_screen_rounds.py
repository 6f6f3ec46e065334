"""How a screening round's times compare with the full measurement's, for the same candidates.

Tunes a copy kernel at a tiny and a large size with the plugin and prints every candidate's time
in each round (5 runs, 25 runs, full ``do_bench``), then times every candidate fully afterwards.
Shows whether screening times are biased against the full ones (they are compared when a dropped
candidate is re-measured, and upstream's pick is the minimum of ``configs_timings``).

    python benchmarks/diagnostics/diag_screen_rounds.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _common import save_results  # noqa: E402

import triton_dist_plugin  # noqa: E402, F401
from triton_dist_plugin import engine  # noqa: E402

BLOCKS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


@triton.jit
def copy(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


def main() -> None:
    rounds: list = []
    original = engine.time_one

    def logged(cand, do_bench=None):
        value, reason = original(cand, do_bench)
        rounds.append((cand.n_repeat, cand.config.kwargs["BLOCK"], value[0]))
        return value, reason

    engine.time_one = logged
    results = {}
    for n in (300, 1 << 24):
        rounds.clear()
        kernel = triton.autotune([triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"])(copy)
        x = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        kernel[lambda m, n=n: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
        afterwards = {b: triton.testing.do_bench(
            lambda b=b, n=n, x=x, out=out: copy[(triton.cdiv(n, b),)](x, out, n, BLOCK=b), return_mode="median")
            for b in BLOCKS}
        table = {b: {f"r{r}": t for r, bb, t in rounds if bb == b} for b in BLOCKS}
        for b in BLOCKS:
            table[b]["after"] = afterwards[b]
        results[n] = {"pick": kernel.best_config.kwargs["BLOCK"], "table": table}
        print(f"n={n} pick BLOCK={results[n]['pick']}")
        print(f"{'BLOCK':>6} {'5 runs':>9} {'25 runs':>9} {'full':>9} {'after':>9}   (ms)")
        for b in BLOCKS:
            row = table[b]
            cells = [row.get(k) for k in ("r5", "r25", "rNone", "after")]
            print(f"{b:>6} " + " ".join(f"{c:9.5f}" if c is not None else f"{'':>9}" for c in cells))
    save_results("screen_rounds_h200.json", results)


if __name__ == "__main__":
    main()
