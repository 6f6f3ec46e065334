"""Candidates for ``configs=[]``: few, legal, correct, sized for the machine.

Every tiling parameter the launch leaves open gets powers of two: a ``whole`` block exactly the
next power of two of its extent (so it covers the row), ``program`` and ``loop`` blocks a range
capped by the extent. The cross product is then pruned hard: on-chip memory (registers, shared
memory, unified buffer), alignment, padding waste, and enough programs to fill the cores; the
best-scored few survive. Each dropped or kept candidate carries its reason, logged at DEBUG on
``triton_dist_plugin.tiling`` and printed with ``TRITON_PRINT_AUTOTUNING=1``.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import _compat
from ..hookspecs import hookimpl
from . import analysis as _analysis
from . import hardware as _hardware
from .hints import cross

log = logging.getLogger("triton_dist_plugin.tiling")


class GenerationError(ValueError):
    """``configs=[]`` cannot be honoured for this kernel; the message says what to do instead."""


@dataclass
class Plan:
    configs: list
    notes: list = field(default_factory=list)  # "kept ..."/"dropped ...: why" lines


def _pow2_range(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out or [lo]


def _np2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _elem_size(nargs: dict) -> int:
    sizes = [a.element_size() for a in nargs.values() if hasattr(a, "element_size") and hasattr(a, "dtype")]
    return max(sizes) if sizes else 4


def open_parameters(an: _analysis.Analysis, nargs: dict, kwargs: dict, hints: dict) -> list[str]:
    """Tiling parameters to generate; raises naming any other constexpr left without a value."""
    given = set(nargs) | set(kwargs) | set(hints)
    missing = [c for c, has_default in an.constexprs.items() if not has_default and c not in given]
    stray = [c for c in missing if c not in an.tiles]
    if stray:
        raise GenerationError(
            f"{', '.join(stray)} {'is a' if len(stray) == 1 else 'are'} tl.constexpr without a value and not a "
            "tiling parameter, so configs=[] cannot choose it: pass it at launch, give it a default, or list its "
            f"values in hints= (e.g. hints={{{stray[0]!r}: [...]}})")
    return [c for c in missing if c in an.tiles]


def _values(tile: _analysis.Tile, extent: Optional[int], hw: _hardware.Hardware, dot: bool) -> list[int]:
    if extent is None:
        raise GenerationError(f"cannot tell which argument {tile.name} tiles (no mask such as `offs < n`, loop bound "
                              "or tl.cdiv names one); write triton.Config candidates for this kernel")
    np2 = max(_np2(extent), 1)
    if tile.role == "whole":
        return [max(np2, hw.min_block if hw.backend != "cpu" else 1)]
    lo = 16 if dot else hw.min_block
    if dot:
        hi = 64 if tile.role == "loop" else 256  # K steps past 64 rarely pay for their shared memory
        lo = max(lo, 32) if hw.backend == "cuda" and np2 >= 64 else lo
    else:
        hi = hw.max_tile_elems
    return _pow2_range(lo, max(lo, min(hi, np2)))


def plan(tuner: Any, an: _analysis.Analysis, nargs: dict, kwargs: dict, hints: dict,
         hw: Optional[_hardware.Hardware] = None) -> Plan:
    hw = hw or _hardware.current()
    names = open_parameters(an, nargs, kwargs, hints)
    if not names:
        return Plan(cross([_compat.Config({})], hints))
    grid = kwargs.get("grid")
    moving = [n for n in names if an.tiles[n].role == "program"]
    if moving and grid is not None and not callable(grid):
        raise GenerationError(
            f"grid is fixed at {grid!r}, but configs=[] generates {', '.join(moving)}, which sets how many programs "
            f"are needed; pass grid=lambda meta: (triton.cdiv(n, meta[{moving[0]!r}]), ...)")
    extents = {n: nargs.get(an.tiles[n].extent) if an.tiles[n].extent else None for n in names}
    for n, x in extents.items():
        if an.tiles[n].extent and not isinstance(x, int):
            raise GenerationError(f"{n} tiles argument {an.tiles[n].extent!r}, which is not an int at launch "
                                  f"({type(x).__name__}); write triton.Config candidates for this kernel")
    dot, elem = an.uses_dot, _elem_size(nargs)
    choices = {n: _values(an.tiles[n], extents[n], hw, dot) for n in names}
    notes: list[str] = []
    scored = []
    for combo in itertools.product(*choices.values()):
        blocks = dict(zip(names, combo))
        reason, score = _judge(blocks, an, extents, hw, dot, elem)
        desc = ", ".join(f"{k}={v}" for k, v in blocks.items())
        if reason:
            notes.append(f"dropped {desc}: {reason}")
        else:
            scored.append((score, blocks, desc))
    if not scored:
        raise GenerationError("configs=[] found no candidate that fits this machine "
                              f"({hw.backend}: {hw.onchip_bytes // 1024} KB on chip, up to {hw.max_tile_elems} "
                              "elements per program); write triton.Config candidates for this kernel")
    best_fill = max(s[0][0] for s in scored)
    kept = []
    for score, blocks, desc in sorted(scored, key=lambda s: s[0], reverse=True):
        if score[0] < 0.5 * best_fill:
            notes.append(f"dropped {desc}: {score[0]:.0%} of the cores busy, others reach {best_fill:.0%}")
        else:
            kept.append((blocks, desc))
    # Elementwise and reduction kernels need fewer candidates than matmul-like ones.
    configs, limit = [], hw.max_candidates if dot or not hw.warps else hw.max_candidates // 2
    for blocks, desc in kept:
        variants = _variants(blocks, an, hw, dot, elem, hints)
        if len(configs) + len(variants) > limit and configs:
            notes.append(f"dropped {desc}: beyond the {limit} best-scored candidates")
            continue
        configs.extend(variants)
        notes.append(f"kept {desc}" + (f" x {len(variants)} variants" if len(variants) > 1 else ""))
    return Plan(cross(configs, hints), notes)


def _judge(blocks: dict, an, extents: dict, hw, dot: bool, elem: int):
    """None and a score (fill, -waste, size) for a legal candidate, or the reason it is not."""
    if hw.align_bytes > 1:
        bad = [n for n, v in blocks.items() if (v * elem) % hw.align_bytes]
        if bad:
            return f"{bad[0]}*{elem} bytes is not a multiple of {hw.align_bytes}", None
    if dot:
        progs = [v for n, v in blocks.items() if an.tiles[n].role == "program"] + [1, 1]
        bm, bn = progs[0], progs[1]
        bk = next((v for n, v in blocks.items() if an.tiles[n].role == "loop"), 1)
        if bm * bn > 256 * 128:
            return f"accumulator of {bm}x{bn} exceeds the registers", None
        smem = min(hw.stages or (1,)) * (bm * bk + bk * bn) * elem
        if smem > hw.onchip_bytes:
            return f"needs {smem // 1024} KB of shared memory, {hw.onchip_bytes // 1024} KB available", None
        size = bm * bn * (1 + 0.01 * min(bk, 64))
    else:
        size = math.prod(blocks.values())
        limit = hw.max_tile_elems
        if size > limit:
            return f"{size} elements per program, the budget is {limit}", None
        if size * elem * 3 > hw.onchip_bytes and hw.backend == "npu":
            need = size * elem * 3 // 1024
            return f"{need} KB of buffers exceed the {hw.onchip_bytes // 1024} KB unified buffer", None
    programs, padded, real = 1, 1, 1
    for n, v in blocks.items():
        x = extents[n]
        if an.tiles[n].role == "program":
            programs *= math.ceil(x / v)
        if an.tiles[n].role != "whole":
            padded *= math.ceil(x / v) * v
            real *= x
    waste = padded / real - 1 if real else 0.0
    if waste > 0.5 and min(blocks.values()) > hw.min_block:
        return f"{waste:.0%} of each block is padding", None
    fill = min(1.0, programs / hw.cores) if any(an.tiles[n].role == "program" for n in blocks) else 1.0
    if dot and fill >= 0.5:
        # A tile that fills the machine in one wave (128 programs on 132 cores) ranks with the smaller
        # ones filling it in more, and the larger tile then ranks first: fill is told to a tenth.
        fill = round(fill, 1)
    return None, (round(fill, 2), -int(waste > 0.25), size)


def _variants(blocks: dict, an, hw, dot: bool, elem: int, hints: dict) -> list:
    """Compile-option variants of one tiling (num_warps, num_stages) unless hints choose them."""
    Config = _compat.Config
    warps: tuple = () if "num_warps" in hints else hw.warps
    stages: tuple = () if "num_stages" in hints or not dot else hw.stages
    if warps and not dot:
        # About eight elements per thread: enough work per thread, enough threads per row.
        per_thread = math.prod(blocks.values()) / 32
        ideal = max(1, min(max(hw.warps), _np2(int(per_thread // 8) or 1)))
        warps = tuple(sorted({ideal, max(1, ideal // 2)} if ideal > 1 else {1, 2}))
    elif warps and dot:
        bm_bn = math.prod(v for n, v in blocks.items() if an.tiles[n].role == "program")
        warps = (8,) if bm_bn >= 128 * 128 else (4,) if bm_bn <= 64 * 64 else (4, 8)
    if stages:  # deeper pipelines hold more K-slices in shared memory: keep those that fit
        progs = [v for n, v in blocks.items() if an.tiles[n].role == "program"] + [1, 1]
        bk = next((v for n, v in blocks.items() if an.tiles[n].role == "loop"), 1)
        per_stage = (progs[0] * bk + bk * progs[1]) * elem
        stages = tuple(s for s in stages if s * per_stage <= hw.onchip_bytes) or stages[:1]
    out = []
    for w in warps or (None,):
        for s in stages or (None,):
            opts = {k: v for k, v in (("num_warps", w), ("num_stages", s)) if v is not None}
            out.append(Config(dict(blocks), **opts))
    return out


def conservative(configs: list) -> Any:
    """The candidate trusted most to compute the right result, the accuracy check's reference:
    the smallest tiles (the shortest reductions per step, the least padding), then the fewest
    pipeline stages and warps. Correct kernels agree on every candidate; where one does not,
    this is the one least likely to hit a compiler's or a tile size's corner case."""
    def size(config: Any) -> tuple:
        values = [v for v in config.kwargs.values() if isinstance(v, int) and not isinstance(v, bool)]
        return (math.prod(values) if values else 0, getattr(config, "num_stages", 0) or 0,
                getattr(config, "num_warps", 0) or 0)

    return min(configs, key=size) if configs else None


class BuiltinGenerator:
    """The built-in ``tdp_generate_configs``: source analysis + the hardware model above."""

    @hookimpl(trylast=True)
    def tdp_generate_configs(self, request):
        tuner = request.autotuner
        an = _analysis.analyse(tuner.fn)
        result = plan(tuner, an, request.nargs, {**request.kwargs, "grid": request.grid},
                      getattr(tuner, "tdp_hints", None) or {})
        request.found.notes = result.notes
        request.found.reference = conservative(result.configs)
        for line in result.notes:
            log.debug("%s key=%s: %s", request.kernel_name, request.key, line)
        return result.configs
