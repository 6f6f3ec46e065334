"""A cost model that ranks a tuning's candidates before any of them is compiled.

Compiling is most of a first call's time (about a second per matmul candidate, and a config that
spills can take twenty), so the cheapest candidate is the one never compiled. The model predicts
each candidate's time from what is known before compiling: its parameters against the problem
(the block sizes against the extents they tile, how the programs fill the cores in waves, the
arithmetic intensity of a ``tl.dot`` tile, the shared memory its pipeline needs, the registers its
accumulator takes per thread) and the machine (cores, shared memory). The roles and extents of
the block sizes come from the kernel's source (``tiling/analysis.py``), as for ``configs=[]``.

It never decides alone. The search (``halving.py``) compiles the model's best few first, then
the neighbours of whatever measured best, and falls back to the whole space when the model and
the measurements disagree, so a wrong model costs compiles, not the pick. The model abstains
(``None``) where it sees nothing to tell the candidates apart, such as a space of options only,
or a kernel whose block sizes it cannot place.

A ``tdp_rank_candidates`` plugin replaces it (``hookspecs.py``); ``TRITON_DIST_AUTOTUNE_MODEL=0``
turns it off.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .. import settings
from ..hookspecs import hookimpl
from .space import features_of

MODEL_ENV = "TRITON_DIST_AUTOTUNE_MODEL"
WARPS_PER_CORE = 64  # resident warps per SM (Hopper, Ampere); a proxy for lanes per core elsewhere
REGISTERS = 65536  # 32-bit registers per SM
SPILL_REGS = 255  # accumulator registers per thread past which a tile spills: far slower, and slow to compile
VECTOR = 4  # elements per thread below which a memory-bound block leaves lanes and vector width idle
HELD = 32  # elements per thread above which a block no longer sits in registers
PROGRAM_COST = 512  # elements' worth of fixed cost per program step (index math, masks, the loop)
IN_FLIGHT = 8192  # bytes a core must have in flight to keep its share of memory bandwidth busy


@dataclass
class Problem:
    """What the model knows of one launch, as plain data (it is recorded, and replayed offline)."""

    tiles: dict  # tiling parameter -> [role, extent or None, dims] (roles as in tiling/analysis.py)
    dot: bool  # the kernel calls tl.dot
    elem: int  # bytes per element of its widest tensor argument
    cores: int  # programs that run at once, one per core
    onchip: int  # shared memory (CUDA) or unified buffer (Ascend) per program, in bytes
    warps: bool = True  # the backend schedules warps (not Ascend, not the interpreter)
    defaults: dict = field(default_factory=dict)  # num_warps, num_stages when a config leaves them out
    fixed: dict = field(default_factory=dict)  # tiling parameters the launch itself sets, with their values

    def as_json(self) -> dict:
        return asdict(self)


def enabled() -> bool:
    return bool(settings.value(MODEL_ENV))


def problem_of(request: Any) -> Optional[Problem]:
    """The problem of a ``@triton.autotune`` launch, or None where the kernel's source cannot be read."""
    tuner = getattr(request, "autotuner", None)
    fn = getattr(tuner, "fn", None)
    if fn is None:
        return None
    from ..tiling import analysis, hardware

    try:
        an = analysis.analyse(fn)
        hw = hardware.current()
    except Exception:  # no source (a built kernel), an unknown device: nothing to model
        return None
    nargs = {**(request.nargs or {}), **(request.kwargs or {})}
    tiles, fixed = {}, {}
    for name, tile in an.tiles.items():
        extent = nargs.get(tile.extent) if tile.extent else None
        tiles[name] = [tile.role, int(extent) if type(extent) is int and extent > 0 else None, tile.dims]
        if type(nargs.get(name)) is int and nargs[name] > 0:  # a block the launch sizes, not the configs
            fixed[name] = nargs[name]
    sizes = [a.element_size() for a in nargs.values() if hasattr(a, "element_size") and hasattr(a, "dtype")]
    return Problem(tiles, an.uses_dot, max(sizes) if sizes else 4, hw.cores, hw.onchip_bytes, bool(hw.warps),
                   {"num_warps": 4, "num_stages": 3 if hw.backend == "cuda" else 1}, fixed)


def cost(problem: Problem, features: dict) -> float:
    """A candidate's predicted time, in units only comparable within one problem; ``inf``: predicted
    not to run (its pipeline needs more shared memory than a program gets)."""
    blocks = {n: v for n, v in features.items() if n in problem.tiles and type(v) is int and v > 0}
    warps = features.get("num_warps") or problem.defaults.get("num_warps", 4)
    stages = features.get("num_stages") or problem.defaults.get("num_stages", 1)
    threads = 32 * warps if problem.warps else 1
    programs, padded = 1.0, 1.0
    for name, value in blocks.items():
        role, extent, _ = problem.tiles[name]
        if extent and role != "whole":
            steps = math.ceil(extent / value)
            padded *= steps * value / extent
            if role == "program":
                programs *= steps
    by_role: dict = {"program": [], "loop": [], "whole": []}
    for name, value in blocks.items():
        by_role[problem.tiles[name][0]].append(value)
    if problem.dot and by_role["program"]:
        rows, cols = (sorted(by_role["program"], reverse=True) + [1])[:2]
        depth = math.prod(by_role["loop"]) if by_role["loop"] else 32
        smem = stages * depth * (rows + cols) * problem.elem
        if smem > problem.onchip:
            return math.inf
        regs = rows * cols / threads  # fp32 accumulator registers per thread
        intensity = rows * cols / (rows + cols)  # multiply-adds per element loaded
        per_program = padded / (intensity / (intensity + 32))
        per_program *= 1 + 0.35 / max(1, stages - 1) + 8 / depth  # a shallow pipeline stalls; thin K-steps cost
        if regs > SPILL_REGS:
            per_program *= 4 * regs / SPILL_REGS
        elif regs < 16:  # too little work per thread for the MMA units
            per_program *= 1.25
        occupancy = max(1, min(problem.onchip // max(1, smem), WARPS_PER_CORE // warps,
                               REGISTERS // max(1, threads * (max(regs, 32) + 32))))
        return per_program / wave_fill(programs, problem.cores, occupancy)
    if not blocks:
        return math.nan  # nothing placed: the model has no opinion
    elems = math.prod({**problem.fixed, **blocks}.values())  # what one program holds per step
    per_thread = elems / threads
    work = padded * (1 + PROGRAM_COST / elems)
    if per_thread < VECTOR:  # short vectors, idle lanes: more instructions per byte
        work *= math.sqrt(VECTOR / per_thread)
    elif per_thread > HELD:  # more than a thread's registers comfortably hold: spills
        work *= (per_thread / HELD) ** 0.7
    occupancy = min(max(1, WARPS_PER_CORE // warps), 32) if problem.warps else 1
    resident = occupancy if programs <= 1 and not any(r == "program" for r, _, _ in problem.tiles.values()) \
        else min(occupancy, programs / problem.cores)
    waves = math.ceil(programs / (problem.cores * occupancy))
    tail = programs / (waves * problem.cores * occupancy) if waves > 1 else 1.0
    in_flight = min(1.0, resident * elems * problem.elem / IN_FLIGHT)  # bytes each core has asked for at once
    return work / (in_flight * tail)


def wave_fill(programs: float, cores: int, occupancy: int) -> float:
    """The share of the machine the programs keep busy: a last, partial wave idles the rest."""
    if programs <= 1:
        return 1.0 / max(1, cores)  # one program: a single core works
    slots = cores * occupancy
    waves = math.ceil(programs / slots)
    return max(programs / (waves * slots), 1.0 / max(1, cores))


def rank(problem: Problem, candidates: list) -> Optional[list]:
    """Each candidate's predicted cost, or None where the model cannot tell them apart."""
    scores = []
    for candidate in candidates:
        try:
            scores.append(cost(problem, features_of(candidate)))
        except Exception:
            scores.append(math.nan)
    known = {round(s, 9) for s in scores if not math.isnan(s)}
    if len(known) < 2 or sum(not math.isnan(s) for s in scores) < len(scores) / 2:
        return None
    return unknown_last(scores)


def unknown_last(scores: list) -> list:
    """``scores`` with each NaN (no opinion) made the worst finite score: last among those predicted
    to run (``inf`` where none is predicted to run)."""
    finite = [s for s in scores if math.isfinite(s)]
    worst = max(finite) if finite else math.inf
    return [worst if math.isnan(s) else float(s) for s in scores]


class BuiltinModel:
    """The built-in ``tdp_rank_candidates``: the cost model above."""

    @hookimpl(trylast=True)
    def tdp_rank_candidates(self, request, candidates):
        problem = problem_of(request)
        if problem is None:
            return None
        request.found.problem = problem
        return rank(problem, candidates)
