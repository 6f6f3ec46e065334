"""How much of the machine a config's programs keep busy at a tuned key: what frozen mode's
predictor (``store/predict.filled``) carries a neighbour's time by.

A config that starts 140 programs on 132 cores runs two waves, the second nearly idle; at a key
where it starts 264 the same two waves are full. The programs a config starts at a key are
counted from the kernel's source (``tiling.analysis``: each block placed per program, over the
argument it tiles, whose value the key holds: upstream's key is the key arguments' values in
``key``'s order, then the tensors' dtypes). Only where every such argument is a key argument and
every such block a config's own, so that the count depends on nothing but the key and the config
(every process reading the same entries picks alike), and only where it is what this launch's
own grid starts for that config here: a grid of another shape (a persistent kernel, a split over
K) gets no correction, never a wrong one.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from ..search import model


def for_launch(tuner: Any, key_names: list, named: dict, grid: Any) -> Optional[Callable[[Any, Any], Optional[float]]]:
    """``fill(key, config)``: the share in (0, 1] of the machine ``config``'s programs keep busy at
    ``key`` (None where unknown); None where this launch cannot say (no grid, no source, a tile over
    an argument the key does not hold, no machine model)."""
    present = [name for name in key_names if name in named]  # as upstream's key holds them
    tiles = program_tiles(tuner)
    if grid is None or not tiles or any(extent not in present for extent in tiles.values()):
        return None
    try:
        from ..tiling import hardware

        cores = hardware.current().cores
    except Exception:  # noqa: BLE001 - an unknown device: no correction
        return None
    where = {extent: present.index(extent) for extent in tiles.values()}
    here = tuple(named[name] for name in present)  # this launch's key values
    known: dict = {}
    trusted: dict = {}  # id(config) -> whether the source's count is what this launch's grid starts

    def programs(key: Any, config: Any) -> Optional[int]:
        blocks = config.all_kwargs()
        count = 1
        for block, extent in tiles.items():
            if not isinstance(key, tuple) or where[extent] >= len(key):
                return None
            size, step = key[where[extent]], blocks.get(block)
            if type(size) is not int or type(step) is not int or size <= 0 or step <= 0:
                return None
            count *= math.ceil(size / step)
        return count

    def fill(key: Any, config: Any) -> Optional[float]:
        memo = (repr(key), id(config))  # a stored key may hold a list: its text, as the store keys it
        if memo not in known:
            try:
                if id(config) not in trusted:
                    counted = programs(here, config)
                    trusted[id(config)] = counted is not None and _launched(grid, named, config) == counted
                count = programs(key, config) if trusted[id(config)] else None
                known[memo] = model.wave_fill(count, cores, 1) if count else None
            except Exception:  # noqa: BLE001 - a config or key this cannot read: unknown, never a failed launch
                known[memo] = None
        return known[memo]

    return fill


def program_tiles(tuner: Any) -> dict:
    """``{block: argument}``: the blocks ``tuner``'s kernel places per program and the arguments
    they tile, read from its source once per tuner; empty where it has none or cannot be read."""
    held = tuner.__dict__.get("_tdp_program_tiles")
    if held is None:
        try:
            from ..tiling import analysis

            held = {name: tile.extent for name, tile in analysis.analyse(tuner.fn).tiles.items()
                    if tile.role == "program" and tile.extent}
        except Exception:  # noqa: BLE001 - no source (a built kernel): nothing to count
            held = {}
        tuner.__dict__["_tdp_program_tiles"] = held
    return held


def _launched(grid: Any, named: dict, config: Any) -> Optional[int]:
    """The programs this launch's grid starts for ``config``."""
    try:
        dims = grid({**named, **config.all_kwargs()}) if callable(grid) else grid
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        return math.prod(int(d) for d in dims)
    except Exception:  # noqa: BLE001 - a grid that cannot answer: unknown
        return None
