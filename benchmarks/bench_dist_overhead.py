"""Tuning overhead of the distributed path against one process (gloo on 127.0.0.1).

    python benchmarks/bench_dist_overhead.py [--ranks 1 2 4] [--candidates 12] [--ms 1.0]

Every rank tunes the same host function (a fixed ``time.sleep`` per call, so the work is the
same everywhere and costs no CPU), with the function-level autotuner: 5 warm-up and 10 timed
calls per candidate, then the agreement and MAX reduction over the group. The overhead is the
tuning wall time minus what the calls themselves take.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from _procs import ROOT, emit, free_port, result_of


def rank_main(rank: int, world: int, port: str, n: int, ms: float) -> None:
    import torch.distributed as dist

    from triton_dist_plugin.tune import autotune

    group = None
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))
        group = dist.group.WORLD

    @autotune(config_space=[{"i": i} for i in range(n)], key_fn=lambda key: key)
    def op(key, i):
        time.sleep(ms / 1e3)

    times = []
    for key in range(3):  # three keys: three full tunings
        t0 = time.perf_counter()
        op(key, autotune_pg=group)
        times.append(time.perf_counter() - t0)
    emit({"rank": rank, "tuning_s": times})
    os._exit(0)


def measure(world: int, n: int, ms: float) -> dict:
    port = str(free_port())
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "PYTHONPATH": str(ROOT)}
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(world), "--port", port,
                                   "--candidates", str(n), "--ms", str(ms)], env=env, stdout=subprocess.PIPE, text=True)
                 for r in range(world)]
        outs = [result_of(p.communicate(timeout=600)[0]) for p in procs]
    per_tuning = [max(o["tuning_s"][k] for o in outs) for k in range(3)]
    ideal = (n * 15 + 1) * ms / 1e3  # 5 warm-up + 10 timed calls per candidate, then the final call
    med = statistics.median(per_tuning)
    return {"ranks": world, "tuning_s_median": med, "calls_s": ideal, "overhead_ms": (med - ideal) * 1e3,
            "per_tuning_s": per_tuning}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--ms", type=float, default=1.0)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world", type=int)
    parser.add_argument("--port")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dist_overhead_cpu.json"))
    args = parser.parse_args()
    if args.rank is not None:
        return rank_main(args.rank, args.world, args.port, args.candidates, args.ms)
    rows = [measure(w, args.candidates, args.ms) for w in args.ranks]
    from _common import save_results

    save_results(Path(args.out).name, rows)
    base = rows[0]["tuning_s_median"]
    print(f"{args.candidates} candidates x (5 warm-up + 10 timed) calls of {args.ms} ms each\n")
    print(f"{'ranks':>5} {'tuning (s)':>11} {'calls (s)':>10} {'overhead (ms)':>14} {'vs 1 rank':>10}")
    for r in rows:
        print(f"{r['ranks']:>5} {r['tuning_s_median']:>11.3f} {r['calls_s']:>10.3f} {r['overhead_ms']:>14.1f} "
              f"{(r['tuning_s_median'] - base) * 1e3:>+9.1f}ms")


if __name__ == "__main__":
    main()
