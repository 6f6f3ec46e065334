"""Every op (each library's, in one list), the groups ``--ops`` names, and ``--list``."""

from __future__ import annotations

from typing import Optional

from .ops_fla import FLA, FLA_OPS
from .ops_gems import GEMS, GEMS_OPS
from .ops_liger import LIGER, LIGER_OPS

OPS = LIGER_OPS + GEMS_OPS + FLA_OPS
OPS_BY_NAME = {op.name: op for op in OPS}


# The default set: every kind of tuner and hook the libraries use (TMA pre_hooks, reset_to_zero,
# restore_value, LibTuner, CachedAutotuner, failing configs, exact low-bit GEMMs), sized from a one-rep
# run to take about 9 minutes at 3 reps on an H200. The other ops run by name or group (one library per
# run fits too), then --merge.
CORE = ("liger_swiglu_mlp", "liger_dyt", "liger_mm_int8int2", "gems_addmm", "gems_group_mm", "gems_scaled_mm_int8",
        "fla_conv1d_update", "fla_cumsum")
GROUPS = {"core": lambda op: op.name in CORE, "all": lambda op: True, "heavy": lambda op: op.heavy,
          "light": lambda op: not op.heavy, "liger": lambda op: op.lib == LIGER and not op.heavy,
          "gems": lambda op: op.lib == GEMS and not op.heavy, "fla": lambda op: op.lib == FLA and not op.heavy}


def select_ops(spec: Optional[str]) -> list:
    """Op names and groups: core (the default), liger, gems, fla (a library's ops that are not heavy),
    light (every op that is not heavy), heavy, all."""
    chosen: list = []
    spec = spec or "core"
    for name in (n.strip() for n in spec.split(",")):
        if name in GROUPS:
            chosen += [op for op in OPS if GROUPS[name](op)]
        elif name in OPS_BY_NAME:
            chosen.append(OPS_BY_NAME[name])
        elif name:
            raise SystemExit(f"unknown op or group {name!r}; --list shows the ops, groups are {', '.join(GROUPS)}")
    return list({op.name: op for op in chosen}.values())


def list_ops() -> None:
    for op in OPS:
        groups = [g for g, member in GROUPS.items() if member(op) and g not in ("all", "light")]
        print(f"{op.name}  [{', '.join(groups)}]\n"
              f"    library:  {op.lib}\n    call:     {op.call}\n    inputs:   {op.shapes}\n"
              f"    kernels:  {op.kernels}\n    backward tuned: {'yes' if op.backward else 'no'}")
