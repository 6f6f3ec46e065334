"""Tune once, serve every shape: how good are the picks for shapes nobody tuned? (issue 40)

For each kernel, over a grid of shapes and shapes held out from it (between and beside the grid's),
each step a fresh process:

1. ``pretune``: the grid tuned as a library author would before shipping a table
   (``TRITON_DIST_AUTOTUNE_SEARCH=exhaustive``: every candidate measured fully); the cover set is
   chosen from those measurements (``triton-dist-tune cover``'s ``choose``, k=4);
2. ``frozen``: the held-out shapes launched with ``TRITON_DIST_AUTOTUNE_FROZEN=nearest`` over that
   cache: the config frozen mode launches (the predictor's, which falls back to the nearest key's);
   the nearest key's own pick is computed with the plugin's distance (``store.keys.nearest``);
3. ``tuned``: the held-out shapes tuned in an empty cache (the plugin's defaults): the reference a
   run-time tuning would give;
4. ``judge``: at each held-out shape and each shape of the grid, every config of the space (or,
   where it has more than 64, every config some side chose) launched in turn by setting the tuner's
   cache, timed by CUPTI (L2 flushed), round-robin over several passes; on the CPU (``--cpu``, the
   interpreter) by the wall clock, which checks the pipeline and nothing of the numbers.

The regret of a side at a shape is its config's time over the best time judged there, less 1;
the table gives each side's geomean and worst over the held-out shapes, per kernel, and the cover
set's over the grid it was chosen from (``cover_grid``). The grid's full measurements from the
pretuning are kept too (``grid_ms``), so that ``replay_tables.py`` can try a predictor on the same
data without a GPU. Kernels: the fp16 matmul of ``kernels/`` (its 48-config hand space over
M x N x K) and, where installed, Liger-Kernel's DyT forward (18 configs, key N) and fla's l2norm
forward for long rows (6 configs, key D). Results: ``results/table_regret_<h200|cpu>.json``.

    python benchmarks/bench_table_regret.py [--cases matmul,liger_dyt,fla_l2norm] [--passes 5] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _procs import call_child, fresh_env, last_stderr_line, serve  # noqa: E402

GRIDS = {  # name: (grid, held out), GPU sizes; --cpu takes the small ones
    "matmul": ([(m, n, k) for m in (256, 1024, 4096) for n in (1024, 4096) for k in (1024, 4096)],
               [(512, 2048, 2048), (2048, 1024, 4096), (2048, 4096, 2048), (768, 3072, 3072), (8192, 4096, 4096)]),
    "liger_dyt": ([(n,) for n in (1024, 2048, 4096, 8192, 16384)], [(n,) for n in (1536, 3072, 6144, 12288, 32768)]),
    "fla_l2norm": ([(d,) for d in (1024, 2048, 4096, 8192, 16384)],
                   [(d,) for d in (768, 1536, 3072, 6144, 12288, 24576)]),
}
CPU_GRIDS = {
    "matmul": ([(m, n, 64) for m in (16, 64) for n in (16, 64)], [(32, 32, 64), (48, 16, 64), (128, 64, 64)]),
    "fla_l2norm": ([(d,) for d in (1024, 4096)], [(2048,)]),
}
COVER_K = 4
JUDGE_ALL = 64  # judge every config of a space this small


def _case(name: str, shape: tuple, gpu: bool):
    """``(call, tuner)``: one launch of the kernel at ``shape``, and its ``Autotuner``."""
    import torch
    import triton

    device = "cuda" if gpu else "cpu"
    if name == "matmul":
        from kernels import matmul

        tuner = _memo(name, lambda: triton.autotune(configs=matmul.matmul_configs(device), key=["M", "N", "K"])(
            matmul.matmul_kernel))
        m, n, k = shape
        dtype = torch.float16 if gpu else torch.float32
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        return (lambda: matmul.matmul(tuner, a, b)), tuner
    if name == "liger_dyt":
        from liger_kernel.ops import dyt

        (n,) = shape
        x = torch.randn(4096, n, device=device, dtype=torch.bfloat16)
        alpha, gamma, beta = (torch.randn(s, device=device, dtype=torch.bfloat16) for s in (1, n, n))
        return (lambda: dyt.liger_dyt_fwd(x, alpha, gamma, beta)), dyt._dyt_fwd_kernel
    if name == "fla_l2norm":  # rows longer than 512: one program per row, its warps tuned per D
        from fla.modules.norm.l2norm import l2norm_fwd, l2norm_fwd_kernel_row

        (d,) = shape
        x = torch.randn(8192 if gpu else 4, d, device=device, dtype=torch.bfloat16)
        return (lambda: l2norm_fwd(x)), l2norm_fwd_kernel_row
    raise SystemExit(f"no case {name!r}")


_TUNERS: dict = {}


def _memo(name, make):
    if name not in _TUNERS:
        _TUNERS[name] = make()
    return _TUNERS[name]


def _launch(name: str, shape: tuple, gpu: bool) -> tuple:
    """Launch once at ``shape``: ``(call, tuner, key)``, the key the launch added to the tuner's cache."""
    import torch

    call, tuner = _case(name, shape, gpu)
    before = set(tuner.cache)
    call()
    if gpu:
        torch.cuda.synchronize()
    added = [k for k in tuner.cache if k not in before]
    return call, tuner, (added[0] if added else None)


def _described(config) -> str:
    from triton_dist_plugin.store import describe

    return describe.describe(config)


def _env() -> tuple:
    return os.environ["TDP_CASE"], [tuple(s) for s in json.loads(os.environ["TDP_SHAPES"])], \
        os.environ.get("TRITON_INTERPRET") != "1"


def child_picks() -> dict:
    """Launch every shape (tuned, or frozen, as the environment says): each one's key and config."""
    name, shapes, gpu = _env()
    out = {}
    import warnings

    for shape in shapes:
        started = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, tuner, key = _launch(name, shape, gpu)
        said = [str(w.message) for w in caught if "was never tuned" in str(w.message)]  # frozen mode's source
        out[json.dumps(shape)] = {"key": list(key) if key is not None else None, "config": _described(
            tuner.cache[key]) if key is not None else None, "first_call_s": time.perf_counter() - started,
            "source": said[0].split("launching ", 1)[-1].split(" (", 1)[0] if said else None}
    if os.environ.get("TDP_COVER"):  # the cover set, from the grid's full measurements on disk
        from triton_dist_plugin.cli import cover
        from triton_dist_plugin.cli.entries import Reader
        from triton_dist_plugin.store import predict

        kernel = _TUNERS.get(name) or _case(name, shapes[0], gpu)[1]
        fn_name = getattr(getattr(kernel, "fn", None), "__name__", None)
        entries = [e for e in Reader().entries(functions=False) if e.name == fn_name]
        out["grid_ms"] = cover.grid(entries)
        # What frozen mode reads of each entry (``persist.frozen_pick``), for ``replay_tables.py``.
        out["grid_entries"] = [{"key": e.key, "pick": e.pick, "measured": predict.measured(e.record),
                                "failed": sorted(c["config"] for c in e.record["candidates"] if c.get("failure"))}
                               for e in entries]
        out["order"] = [_described(c) for c in kernel.configs]
        out["fill_model"] = _fill_model(kernel)
        out["cover"] = cover.choose(out["grid_ms"], COVER_K)
    return out


def _fill_model(kernel) -> dict:
    """What ``replay_tables.py`` counts each config's programs at a key by, as frozen mode does
    (``patched/machine_fill``): the blocks placed per program and the arguments they tile (those
    the key holds), and the machine's cores."""
    from triton_dist_plugin.patched import machine_fill
    from triton_dist_plugin.tiling import hardware

    names = list(kernel.keys.values()) if isinstance(kernel.keys, dict) else list(kernel.keys)
    return {"key_names": names, "tiles": machine_fill.program_tiles(kernel), "cores": hardware.current().cores}


def child_judge() -> dict:
    """Every config asked for, at each shape, timed in turn by setting the tuner's cache."""
    import torch

    name, shapes, gpu = _env()
    wanted = set(json.loads(os.environ["TDP_CONFIGS"]))
    passes = int(os.environ.get("TDP_PASSES", "5"))
    flush = torch.empty(256 << 20 >> 2, dtype=torch.int32, device="cuda").zero_ if gpu else (lambda: None)
    out: dict = {}
    for shape in shapes:
        call, tuner, key = _launch(name, shape, gpu)
        space = {_described(c): c for c in tuner.configs}
        judged = sorted(d for d in space if len(space) <= JUDGE_ALL or d in wanted)
        times: dict = {d: [] for d in judged}
        for _ in range(passes):  # round-robin: the device clock's drift spreads over every config
            for d in judged:
                tuner.cache[key] = space[d]
                try:
                    times[d].append(_timed(call, tuner, gpu, flush))
                except Exception as exc:  # noqa: BLE001 - a config that fails here is not a candidate
                    times[d].append(math.inf)
                    print(f"{shape} {d}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
        out[json.dumps(shape)] = {d: statistics.median(t) for d, t in times.items()}
    return out


def _timed(call, tuner, gpu: bool, flush) -> float:
    if gpu:
        from _common import cupti_ms

        return cupti_ms(call, tuner.fn.__name__, 10, flush)
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


def _run(name: str, mode: str, shapes: list, env: dict, plugin_dir: str, cpu: bool, timeout: float = 600) -> dict:
    with tempfile.TemporaryDirectory() as base:
        full = fresh_env(base, True, {"TDP_CASE": name, "TDP_SHAPES": json.dumps(shapes),
                                      "TRITON_INTERPRET": "1" if cpu else "0", **env}, plugin_dir=plugin_dir)
        data, proc = call_child(__file__, mode, full, timeout)
    if data is None:
        raise RuntimeError(f"{name} {mode}: {last_stderr_line(proc)[:400]}")
    return data


def measure(name: str, grid: list, held: list, cpu: bool, passes: int) -> dict:
    from triton_dist_plugin.store import keys

    work = Path(tempfile.mkdtemp(prefix="tdp-regret-"))
    try:
        table = str(work / "table")
        pre = _run(name, "picks", grid, {"TRITON_DIST_AUTOTUNE_SEARCH": "exhaustive", "TDP_COVER": "1"}, table, cpu)
        cover, grid_ms, grid_entries, order, fill_model = (
            pre.pop(k) for k in ("cover", "grid_ms", "grid_entries", "order", "fill_model"))
        frozen_dir = str(work / "frozen")
        shutil.copytree(table, frozen_dir)
        frozen = _run(name, "picks", held, {"TRITON_DIST_AUTOTUNE_FROZEN": "nearest"}, frozen_dir, cpu)
        tuned = _run(name, "picks", held, {}, str(work / "tuned"), cpu)
        grid_keys = {tuple(v["key"]): v["config"] for v in pre.values() if v["key"] is not None}
        sides: dict = {}
        sources: dict = {}  # what frozen mode said it launched: the nearest key's pick, or the favoured config
        for shape in map(json.dumps, held):
            key = tuple(frozen[shape]["key"])
            nearest = keys.nearest(list(grid_keys), key)
            sides[shape] = {"tuned": tuned[shape]["config"], "predicted": frozen[shape]["config"],
                            "nearest": grid_keys[nearest] if nearest is not None else None}
            sources[shape] = frozen[shape]["source"]
        wanted = sorted({c for s in sides.values() for c in s.values() if c} | set(cover))
        judge_dir = str(work / "judge")
        shutil.copytree(table, judge_dir)
        wanted += sorted({v["config"] for v in pre.values() if v["config"]} - set(wanted))
        judged = _run(name, "judge", held + grid, {"TRITON_DIST_AUTOTUNE_FROZEN": "nearest", "TDP_CONFIGS": json.dumps(
            wanted), "TDP_PASSES": str(passes)}, judge_dir, cpu, timeout=900)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    on_grid = {shape: judged.pop(shape) for shape in map(json.dumps, grid)}
    regrets: dict = {side: {} for side in ("tuned", "predicted", "nearest", "cover")}
    for shape, times in judged.items():
        best = min(times.values())
        for side in ("tuned", "predicted", "nearest"):
            regrets[side][shape] = times.get(sides[shape][side], math.inf) / best - 1
        regrets["cover"][shape] = min(times.get(c, math.inf) for c in cover) / best - 1
    # The cover over the grid it was chosen from, and the grid's own picks, judged alike.
    regrets["cover_grid"] = {shape: min(times.get(c, math.inf) for c in cover) / min(times.values()) - 1
                             for shape, times in on_grid.items()}
    regrets["grid_picks"] = {shape: times.get(pre[shape]["config"], math.inf) / min(times.values()) - 1
                             for shape, times in on_grid.items()}
    return {"grid": grid, "held_out": held, "cover": cover, "picks": sides, "frozen_source": sources,
            "judged_ms": judged, "judged_grid_ms": on_grid, "grid_ms": grid_ms, "grid_entries": grid_entries,
            "order": order, "fill_model": fill_model,
            "held_keys": {shape: frozen[shape]["key"] for shape in map(json.dumps, held)}, "regret": regrets,
            "tuned_first_call_s": {s: v["first_call_s"] for s, v in tuned.items()}}


def _geomean_regret(values: list) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return math.exp(statistics.fmean(math.log1p(v) for v in finite)) - 1 if finite else math.inf


def main() -> None:
    if serve(globals()):
        return
    from _common import save_results

    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="matmul,liger_dyt,fla_l2norm")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="small shapes under the interpreter (the pipeline only)")
    options = parser.parse_args()
    grids = CPU_GRIDS if options.cpu else GRIDS
    results = {}
    for name in [c for c in options.cases.split(",") if c in grids]:
        try:
            results[name] = measure(name, *grids[name], options.cpu, options.passes)
        except Exception as exc:  # noqa: BLE001 - one kernel (a library not installed) never stops the rest
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    save_results(f"table_regret_{'cpu' if options.cpu else 'h200'}.json", results)
    print(f"{'kernel':10s} {'side':10s} {'geomean regret':>15s} {'mean':>8s} {'worst':>8s}   (held-out shapes; "
          f"cover k={COVER_K}; cover_grid and grid_picks: over the grid)")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:10s} ERROR {r['error']}")
            continue
        for side, by_shape in r["regret"].items():
            values = list(by_shape.values())
            print(f"{name:10s} {side:10s} {_geomean_regret(values):14.1%} {statistics.fmean(values):8.1%} "
                  f"{max(values):8.1%}")


if __name__ == "__main__":
    main()
