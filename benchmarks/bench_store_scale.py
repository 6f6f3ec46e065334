"""How does a large store of picks scale: with 10^3, 10^4 and 10^5 valid entries of one kernel in
the cache (a production table), what do a new key's launch (its warm-start lookup), a frozen-mode
miss and ``triton-dist-tune list`` cost, against an empty cache?

The entries are the plugin's own: one real tuning of the add kernel writes an entry, which is
copied for every other key (its key, id and time changed, as a tuning of that key would write
it), and the directory's index is then built as the first reader after a change builds it
(``index.update``). Each measurement runs in a fresh process, ``--repeats`` times (median):

- ``launch``: the first launch of a key never tuned (a real interpreted kernel, tuned now, its
  tuning warm-started from the nearest stored key); ``lookup``: the part of it that looks the
  nearest stored key up (``KernelStore.nearest_ranking``);
- ``frozen``: the same with ``TRITON_DIST_AUTOTUNE_FROZEN=nearest`` (nothing timed: the nearest
  stored key's pick launches); ``lookup``: ``KernelStore.nearest_pick``;
- ``list``: ``triton-dist-tune list`` to /dev/null, its wall time and peak memory (max RSS).

With ``--big``, the largest store also holds one 200 MB entry file, copied in behind the index's
back, and the launch is measured again: it is refused unread (the file size cap), never read.
With ``--unindexed``, the entries are copied in behind the index's back (by hand, or by an older
release) and nothing indexes them first: each new key's lookup then indexes some of them (for at
most ``index.CATCH_UP_S``) and looks among those indexed so far; the runs show each one's cost.
``--checkout DIR`` runs the measuring processes on another checkout of the plugin (the stores are
filled the same way), for a before-and-after: an older release times its scan of every entry
(``KernelStore.rankings``/``picks``) as the lookup.

    python benchmarks/bench_store_scale.py [--sizes 0,1000,10000,100000] [--repeats 3] [--big]
        [--checkout DIR] [--out store_scale_cpu.json]

CPU only (Triton's interpreter); writes ``results/store_scale_cpu.json``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import save_results
from _procs import call_child, fresh_env, serve

HERE = Path(__file__).resolve()
SEED_N = 1000  # the key the real tuning stores
NEW_N = 3001  # keys never stored: odd (the stored ones are even), near the stored ones


def _launch(n: int) -> tuple:
    """Launch the autotuned add kernel on ``n`` elements (a fresh tuner: nothing in memory):
    ``(the tuner, seconds the launch took)``, imports and inputs made before the clock starts."""
    import torch
    import triton

    from kernels import KERNELS

    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)
    x = torch.randn(n)
    started = time.perf_counter()
    out = add.launch(kernel, x, x)
    took = time.perf_counter() - started
    assert torch.equal(out, x + x)
    return kernel, took


def child_seed() -> dict:
    """One real tuning: the entry the plugin writes for the add kernel's key ``SEED_N``."""
    from triton_dist_plugin.store import cache, persist

    _launch(SEED_N)
    (path,) = (cache.kernel_base() / persist.DIRECTORY).glob("*/*.json")
    return {"path": str(path)}


def _timed_lookups(*methods: str) -> list:
    """Wrap the first of ``KernelStore.<methods>`` it has to record how long each call takes
    (this process only)."""
    from triton_dist_plugin.store import persist

    spent: list = []
    method = next(m for m in methods if hasattr(persist.KernelStore, m))
    original = getattr(persist.KernelStore, method)

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    setattr(persist.KernelStore, method, timed)
    return spent


def child_launch() -> dict:
    import warnings

    frozen = bool(os.environ.get("TRITON_DIST_AUTOTUNE_FROZEN"))
    spent = _timed_lookups(*(("nearest_pick", "picks") if frozen else ("nearest_ranking", "rankings")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frozen mode warns of the miss
        kernel, took = _launch(int(os.environ["TDP_BENCH_N"]))
    return {"launch_s": took, "lookup_s": sum(spent), "pick": str(kernel.best_config)}


def fill(cache: Path, count: int, seed: dict, indexed: bool = True) -> float:
    """``count`` entries of the seed's kernel, for even keys from 2000 up, and (``indexed``) their
    index: seconds."""
    from triton_dist_plugin.store import describe, index

    started = time.perf_counter()
    record = json.loads(Path(seed["path"]).read_text())
    folder = Path(seed["path"]).parent
    key = ast.literal_eval(record["key"])
    for i in range(count):
        stored = (2000 + 2 * i, *key[1:])
        text = repr(stored)
        name = describe.entry_digest(record["source"], record["hardware"], text, record["context"])
        entry = {**record, "key": text}
        (folder / f"{name}.json").write_text(json.dumps(entry, indent=2))
        (folder / f"{name}.json.lock").touch()  # as every write leaves one
    if indexed:
        index.update(folder, cache)
    return time.perf_counter() - started


def measure_list(env: dict) -> dict:
    """``triton-dist-tune list`` to /dev/null: wall seconds and peak memory (MB)."""
    script = Path(sys.executable).parent / "triton-dist-tune"
    started = time.perf_counter()
    proc = subprocess.Popen([str(script), "list"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    assert proc.returncode == 0, err[-2000:]
    return {"wall_s": wall, "max_rss_mb": usage.ru_maxrss / 1024}


def _median(runs: list, field: str) -> float:
    return statistics.median(r[field] for r in runs)


def run_size(count: int, repeats: int, big: bool, checkout: str = "", indexed: bool = True) -> dict:
    base = Path(tempfile.mkdtemp(prefix="tdp-scale-"))
    try:
        env = fresh_env(str(base), plugin=True, extra={"TRITON_INTERPRET": "1"})
        if checkout:
            env["PYTHONPATH"] = os.pathsep.join([checkout, env["PYTHONPATH"]])
        seed, proc = call_child(str(HERE), "seed", env, timeout=600)
        assert seed is not None, proc.stderr[-3000:]
        filled = fill(Path(env["TRITON_DIST_AUTOTUNE_DIR"]), count, seed, indexed) if count else 0.0
        if not count:  # the empty cache: no entry at all
            Path(seed["path"]).unlink()
        out: dict = {"entries": count, "fill_s": filled}
        for mode, extra in (("launch", {}), ("frozen", {"TRITON_DIST_AUTOTUNE_FROZEN": "nearest"})):
            runs = []
            for r in range(repeats):  # a key of its own each time: a launch stores its key
                child_env = {**env, **extra, "TDP_BENCH_N": str(NEW_N + 2 * r + (100 if mode == "frozen" else 0))}
                data, proc = call_child(str(HERE), "launch", child_env, timeout=600)
                assert data is not None, proc.stderr[-3000:]
                runs.append(data)
            out[mode] = {"launch_s": _median(runs, "launch_s"), "lookup_s": _median(runs, "lookup_s"), "runs": runs}
        lists = [measure_list(env) for _ in range(repeats)]
        out["list"] = {"wall_s": _median(lists, "wall_s"), "max_rss_mb": _median(lists, "max_rss_mb"), "runs": lists}
        if big and count:
            folder = Path(seed["path"]).parent
            with open(folder / ("f" * 32 + ".json"), "wb") as f:  # valid JSON, 200 MB of notes
                f.write(b'{"notes": "' + b"x" * (200 << 20) + b'"}')
            runs = []
            for r in range(repeats):
                data, proc = call_child(str(HERE), "launch", {**env, "TDP_BENCH_N": str(NEW_N + 200 + 2 * r)},
                                        timeout=600)
                assert data is not None, proc.stderr[-3000:]
                runs.append(data)
            out["launch_beside_200mb"] = {"launch_s": _median(runs, "launch_s"), "lookup_s": _median(runs, "lookup_s"),
                                          "runs": runs}
        return out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        return platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0,1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big", action="store_true", help="also a 200 MB entry beside the largest store")
    parser.add_argument("--checkout", default="", help="measure another checkout of the plugin (before and after)")
    parser.add_argument("--unindexed", action="store_true", help="entries copied in with no index built first")
    parser.add_argument("--out", default="store_scale_cpu.json", help="results file, under benchmarks/results/")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {_cpu()}",
               "python": platform.python_version(), "repeats": args.repeats, "checkout": args.checkout or "this one",
               "indexed": not args.unindexed, "sizes": []}
    for count in sizes:
        print(f"{count} entries ...", flush=True)
        results["sizes"].append(run_size(count, args.repeats, args.big and count == max(sizes), args.checkout,
                                         not args.unindexed))
    save_results(args.out, results)
    empty = next((s for s in results["sizes"] if s["entries"] == 0), None)
    print(f"\n{'entries':>8}  {'launch s':>9}  {'lookup ms':>9}  {'frozen s':>9}  {'lookup ms':>9}  "
          f"{'list s':>7}  {'list MB':>7}")
    for s in results["sizes"]:
        print(f"{s['entries']:>8}  {s['launch']['launch_s']:>9.3f}  {s['launch']['lookup_s'] * 1e3:>9.1f}  "
              f"{s['frozen']['launch_s']:>9.3f}  {s['frozen']['lookup_s'] * 1e3:>9.1f}  "
              f"{s['list']['wall_s']:>7.2f}  {s['list']['max_rss_mb']:>7.0f}")
        if "launch_beside_200mb" in s:
            b = s["launch_beside_200mb"]
            print(f"{'+200 MB':>8}  {b['launch_s']:>9.3f}  {b['lookup_s'] * 1e3:>9.1f}")
    if empty is not None:
        print("(empty cache: launch and frozen are the baseline; lookup ms is the nearest-key lookup alone)")
    if args.unindexed:
        print("(unindexed: medians over the first lookups, each indexing what it can in its time; per run:)")
        for s in results["sizes"]:
            print(f"{s['entries']:>8}  lookups ms: " + ", ".join(f"{r['lookup_s'] * 1e3:.0f}" for mode in
                                                               ("launch", "frozen") for r in s[mode]["runs"]))


if __name__ == "__main__":
    if not serve(globals()):
        main()
