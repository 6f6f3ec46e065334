"""The search tests' kernel and space, shared with the multi-rank worker."""

import math

import triton
import triton.language as tl

from triton_dist_plugin import hookimpl
from triton_dist_plugin.search import strategy as search


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


def bowl(features: dict, best: dict = BEST) -> float:
    """1 ms at ``best``, growing with every doubling away from it."""
    return 1.0 + sum(abs(math.log2(features[k]) - math.log2(v)) for k, v in best.items())


class Bowl:
    """Times each candidate by ``bowl`` after running it once for real; records what it timed."""

    def __init__(self):
        self.timed = []
        self.features = search.features_of  # a function-level space's candidates are positions
        self.best = BEST

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        self.timed.append(request.config)
        return bowl(self.features(request.config), self.best)

    def screened(self) -> list:
        return list(dict.fromkeys(str(c) for c in self.timed))


def forked_prepare(marks):
    """A ``prepare`` for ``engine.run_candidates`` that compiles nothing real but goes through the
    real forked stage: workers "compile" each candidate of a step (write a mark named for it in
    ``marks``, then sleep), largest first, and the parent hands each to the stream as it arrives."""
    import time

    from triton_dist_plugin.compiling import forked_compile
    from triton_dist_plugin.compiling.stream import SKIPPED

    def warm(BLOCK, UNROLL, num_warps):
        (marks / name(BLOCK, UNROLL, num_warps)).touch()
        time.sleep(0.05)  # slower than screening one, as a real compile is

    def prepare(subset, stream):
        if stream is None:  # the finalists: ready since their step
            return {}
        done = forked_compile.in_processes(
            warm, (), {}, [{**c.kwargs, "num_warps": c.num_warps} for c in subset], list(range(len(subset))), None,
            on_compiled=lambda j: stream.ready(subset[j]), wanted=lambda j: stream.wanted(subset[j]))
        assert done is not None, "the forked stage did not finish"
        return {subset[j]: reason for j, reason in done.items() if reason == SKIPPED}

    return prepare


def name(block, unroll, warps) -> str:
    return f"{block}-{unroll}-{warps}"
