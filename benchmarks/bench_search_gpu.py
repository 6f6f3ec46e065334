"""Search on a GPU: the first call against upstream, a 1,152-config space, and warm starts.

    python benchmarks/bench_search_gpu.py [first] [warm] [large] [optuna]   (default: all four)

Every step is a fresh process with empty Triton and plugin caches unless it says otherwise;
results go to ``results/search_h200.json`` (each step saved as soon as it ends), and a table is
printed last, against the ground truth of ``search_truth_gpu.py`` where it has run.

- ``first``: the first call of the 48-config fp16 matmul at 4096^3: plugin (default search),
  upstream, plugin again; each pick's time by ``do_bench(rep=200)``.
- ``warm``: a second shape (8192 x 2048 x 4096) of the 48-config matmul, cold (empty caches)
  and warm (the plugin cache of a process that tuned 4096^3; Triton's cache empty, then also
  that process's Triton cache, against a cold run given the same Triton cache), with each
  pick's time against the 48 configs' best at that shape (rep 200 ms, measured in the cold
  process).
  Then a program's second shape: one process tunes 4096^3 and then the second shape (its first
  call timed), with the warm start on and off.
- ``large``: the first call over the large space (block sizes 32-256, ``BLOCK_K`` 32-128,
  ``GROUP_M`` 1/8, 2-8 warps, 2-5 stages: 1,152 configs) with ``halving``: seconds, how many
  candidates were compiled and screened, and the pick's time (rep 200 ms). Then the second
  shape over the large space, cold and warm-started from that run's plugin cache (Triton's cache
  empty in both), both picks measured in the warm run.
- ``optuna``: the same with ``TRITON_DIST_AUTOTUNE_SEARCH=optuna``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile

from _common import ROOT, collect_notes, config_dict, save_results, timed_call
from _procs import run_fresh, serve
from _search import SECOND, SHAPE, TRUTH, careful, inputs, large_space

RESULTS = ROOT / "benchmarks" / "results" / "search_h200.json"


def tuned_call(configs, shape, notes: list):
    """Decorate, make inputs, time the first call; ``(seconds, tuner, a, b)``."""
    import triton

    from kernels import KERNELS

    if os.environ.get("TDP_PLUGIN") == "1":
        collect_notes(notes)
    mm = KERNELS["matmul"]
    tuned = triton.autotune(configs=configs, key=mm.key)(mm.jit)
    seconds, a, b = timed_first_call(tuned, shape)
    return seconds, tuned, a, b


def timed_first_call(tuned, shape) -> tuple:
    """Make inputs of ``shape`` and time ``tuned``'s (synchronised) call on them; ``(seconds, a, b)``."""
    from kernels import KERNELS

    a, b = inputs(shape)
    _, seconds = timed_call(lambda: KERNELS["matmul"].launch(tuned, a, b))
    return seconds, a, b


def counts(notes: list) -> dict:
    compiled = sum(int(n) for note in notes for n in re.findall(r"compiled (\d+) candidates", note))
    screened = [int(n) for note in notes for n in re.findall(r"screened (\d+) of", note)]
    return {"compiled": compiled, "screened": screened[-1] if screened else None}


def child_first() -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(mm.configs("cuda"), SHAPE, notes)
    return {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_ms": careful(mm, tuned.best_config, a, b),
            "notes": notes, **counts(notes)}


def child_large() -> dict:
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(large_space(), SHAPE, notes)
    import triton

    known = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4)
    return {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_ms": careful(mm, tuned.best_config, a, b),
            "best_of_48_ms": careful(mm, known, a, b),  # the 48-config space's pick at 4096^3 (a subset)
            "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}


def child_warm() -> dict:
    """Tune ``SECOND`` (cold or warm, by the caches given); then the pick's time and, when cold,
    every candidate's (rep 200 ms), for the best of the 48 at that shape."""
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(mm.configs("cuda"), SECOND, notes)
    out = {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_ms": careful(mm, tuned.best_config, a, b),
           "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}
    if os.environ.get("TDP_ALL") == "1":
        every = {str(c): careful(mm, c, a, b) for c in mm.configs("cuda")}
        out["best_of_48"] = min(every, key=every.get)
        out["best_of_48_ms"] = min(every.values())
    return out


def child_tune_first_shape() -> dict:
    from kernels import KERNELS

    seconds, tuned, _, _ = tuned_call(KERNELS["matmul"].configs("cuda"), SHAPE, [])
    return {"first_call_s": seconds, "pick": str(tuned.best_config)}


def child_second_in_process() -> dict:
    """One process tunes ``SHAPE``, then ``SECOND`` (the same decorated kernel, as a program meets
    a new shape): the second call's seconds, counts and pick. With
    ``TRITON_DIST_AUTOTUNE_WARM_START=0`` the second shape starts cold, with the first shape's
    kernels in memory all the same."""
    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    first, tuned, _, _ = tuned_call(mm.configs("cuda"), SHAPE, notes)
    notes.clear()
    seconds, a, b = timed_first_call(tuned, SECOND)
    return {"first_shape_s": first, "first_call_s": seconds, "pick": str(tuned.best_config),
            "pick_ms": careful(mm, tuned.best_config, a, b),
            "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}


def child_large_second() -> dict:
    """``SECOND`` over the large space (cold, or warm from the plugin cache given); with
    ``TDP_OTHER_PICK`` (another run's pick), both picks measured here, alternating, 3 rounds."""
    import statistics

    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    notes: list = []
    seconds, tuned, a, b = tuned_call(large_space(), SECOND, notes)
    out = {"first_call_s": seconds, "pick": str(tuned.best_config), "pick_config": config_dict(tuned.best_config),
           "notes": [n for n in notes if "search" in n or "screened" in n], **counts(notes)}
    picks = {"pick_ms": tuned.best_config}
    if os.environ.get("TDP_OTHER_PICK"):
        other = json.loads(os.environ["TDP_OTHER_PICK"])
        picks["other_pick_ms"] = triton.Config(other["kwargs"], num_warps=other["num_warps"],
                                               num_stages=other["num_stages"])
    rounds: dict = {name: [] for name in picks}
    for _ in range(3):
        for name, config in picks.items():
            rounds[name].append(careful(mm, config, a, b))
    out.update({name: statistics.median(times) for name, times in rounds.items()})
    return out


def run_child(name: str, env: dict | None = None, plugin: bool = True, plugin_dir: str | None = None,
              triton_dir: str | None = None) -> dict:
    return run_fresh(__file__, name, plugin, env, triton_dir=triton_dir, plugin_dir=plugin_dir)


def main() -> None:
    if serve(globals()):
        return
    parts = sys.argv[1:] or ["first", "warm", "large", "optuna"]
    saved = RESULTS
    results: dict = json.loads(saved.read_text()) if saved.exists() else {}

    def step(name: str, *args, **kwargs) -> dict:
        """One child; printed and saved at once, so a run cut short keeps what it measured."""
        results[name] = run_child(*args, **kwargs)
        print(name, json.dumps(results[name])[:600], flush=True)
        save_results(saved.name, results)
        return results[name]

    if "first" in parts:  # plugin, upstream, plugin: each side in a fresh process, alternating
        step("first_plugin", "first")
        step("first_upstream", "first", plugin=False)
        step("first_plugin_again", "first")
    if "warm" in parts:
        step("warm_cold", "warm", {"TDP_ALL": "1"})
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tuned_dir, \
                tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as triton_dir:
            # Plugin cache from a process that tuned the first shape; Triton's cache empty, then kept.
            step("warm_first_shape", "tune_first_shape", plugin_dir=tuned_dir, triton_dir=triton_dir)
            kept = tempfile.mkdtemp()
            shutil.copytree(tuned_dir, kept, dirs_exist_ok=True)
            step("warm_warm", "warm", plugin_dir=tuned_dir)
            # Both with that process's Triton cache (the first shape's kernels: the same binaries
            # serve this shape), cold with an empty plugin cache, warm with the first shape's picks.
            cold_dir = tempfile.mkdtemp()
            shutil.copytree(triton_dir, cold_dir, dirs_exist_ok=True)
            step("warm_cold_triton_cache", "warm", triton_dir=cold_dir)
            step("warm_warm_triton_cache", "warm", plugin_dir=kept, triton_dir=triton_dir)
    if "warm" in parts:  # a program that meets a second shape after the first, in one process
        step("second_in_process", "second_in_process")
        step("second_in_process_no_warm", "second_in_process", {"TRITON_DIST_AUTOTUNE_WARM_START": "0"})
    if "large" in parts:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tuned_dir:
            step("large_halving", "large", plugin_dir=tuned_dir)
            # The second shape over the large space: cold, then warm from the plugin cache of the
            # run above (Triton's cache empty in both), the cold run's pick measured beside its own.
            cold = step("large_second_cold", "large_second")
            if "pick_config" in cold:
                step("large_second_warm", "large_second", {"TDP_OTHER_PICK": json.dumps(cold["pick_config"])},
                     plugin_dir=tuned_dir)
    if "optuna" in parts:
        step("large_optuna", "large", {"TRITON_DIST_AUTOTUNE_SEARCH": "optuna"})
    table(results)


def table(results: dict) -> None:
    truth = json.loads(TRUTH.read_text()) if TRUTH.exists() else {}
    rows = []
    plugin = [results[k] for k in ("first_plugin", "first_plugin_again") if "first_call_s" in results.get(k, {})]
    upstream = results.get("first_upstream", {})
    if plugin and "first_call_s" in upstream:
        fastest = min(r["first_call_s"] for r in plugin)
        rows.append(("48-config first call", f"plugin {[round(r['first_call_s'], 2) for r in plugin]} s, upstream "
                     f"{upstream['first_call_s']:.2f} s: {upstream['first_call_s'] / fastest:.1f}x (best plugin run); "
                     f"picks {[r.get('pick_ms') for r in plugin]} ms vs upstream's {upstream.get('pick_ms')} ms; "
                     f"best of the 48: {truth.get('best_of_48_ms')} ms"))
    for name in ("large_halving", "large_optuna"):
        r = results.get(name, {})
        if "pick_ms" in r and truth:
            rows.append((name, f"{r['first_call_s']:.1f}s, compiled {r['compiled']}, screened {r['screened']} of "
                         f"{truth.get('configs')}; pick {r['pick_ms']:.4f} ms vs truth {truth['best_ms']:.4f} ms "
                         f"({r['pick_ms'] / truth['best_ms'] - 1:+.1%})"))
        elif r:
            rows.append((name, str(r)[:300]))
    for label, cold_name, warm_name in (("warm start", "warm_cold", "warm_warm"),
                                        ("warm, Triton cached", "warm_cold_triton_cache", "warm_warm_triton_cache")):
        cold, warm = results.get(cold_name, {}), results.get(warm_name, {})
        if "first_call_s" in cold and "first_call_s" in warm:
            rows.append((label, f"cold {cold['first_call_s']:.2f}s (compiled {cold['compiled']}, screened "
                         f"{cold['screened']}), warm {warm['first_call_s']:.2f}s (compiled {warm['compiled']}, "
                         f"screened {warm['screened']}): {cold['first_call_s'] / warm['first_call_s']:.1f}x; picks "
                         f"{cold['pick_ms']:.4f} / {warm['pick_ms']:.4f} ms vs best of 48 "
                         f"{results.get('warm_cold', {}).get('best_of_48_ms', float('nan')):.4f} ms"))
    same, alone = results.get("second_in_process", {}), results.get("second_in_process_no_warm", {})
    cold = results.get("warm_cold", {})
    if "first_call_s" in same and "first_call_s" in cold:
        rows.append(("second shape, in one", f"after the first shape in the same process {same['first_call_s']:.2f}s "
                     f"(compiled {same['compiled']}, screened {same['screened']}) vs cold {cold['first_call_s']:.2f}s: "
                     f"{cold['first_call_s'] / same['first_call_s']:.1f}x; warm start off there: "
                     f"{alone.get('first_call_s', float('nan')):.2f}s (screened {alone.get('screened')}); picks "
                     f"{same['pick_ms']:.4f} / {alone.get('pick_ms', float('nan')):.4f} ms"))
    cold, warm = results.get("large_second_cold", {}), results.get("large_second_warm", {})
    if "first_call_s" in cold and "first_call_s" in warm:
        rows.append(("large, second shape", f"cold {cold['first_call_s']:.1f}s (compiled {cold['compiled']}, screened "
                     f"{cold['screened']}), warm {warm['first_call_s']:.1f}s (compiled {warm['compiled']}, screened "
                     f"{warm['screened']}): {cold['first_call_s'] / warm['first_call_s']:.1f}x; warm pick "
                     f"{warm['pick_ms']:.4f} ms vs cold pick {warm.get('other_pick_ms', float('nan')):.4f} ms "
                     "(both measured in the warm run)"))
    if truth:
        print(f"truth: {truth.get('valid')} of {truth.get('configs')} configs run; best {truth.get('best')} "
              f"{truth.get('best_ms', float('nan')):.4f} ms")
    for name, text in rows:
        print(f"{name:22} {text}")


if __name__ == "__main__":
    main()
