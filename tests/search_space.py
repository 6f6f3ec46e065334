"""The search tests' kernel and space, shared with the multi-rank worker."""

import triton
import triton.language as tl


@triton.jit
def copy(x, out, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


# 6 x 5 x 4 = 120 candidates; the tests' timing makes BEST the fastest
SPACE = [triton.Config({"BLOCK": b, "UNROLL": u}, num_warps=w)
         for b in (16, 32, 64, 128, 256, 512) for u in (1, 2, 4, 8, 16) for w in (1, 2, 4, 8)]
BEST = {"BLOCK": 64, "UNROLL": 4, "num_warps": 2}
# x 4 stage counts = 480 candidates, larger than a search's first sample; LARGE_BEST the fastest
LARGE = [triton.Config(c.kwargs, num_warps=c.num_warps, num_stages=s) for c in SPACE for s in (1, 2, 3, 4)]
LARGE_BEST = {**BEST, "num_stages": 2}
