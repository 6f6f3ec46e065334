"""Do the plugin's timers rank a key's configs as the steady benchmark's judge does (CUPTI kernel
time, an L2 flush before each call), how noisy is each, and what does a profiler session cost?

    python benchmarks/diagnostics/diag_timers_gpu.py [--rounds 3] [--cases add/2^20,rowsum/16384x4096]

For each case every config is launched directly (the plain kernel) and timed, round-robin over
``--rounds`` rounds with the order rotated, by:

- ``screen``: the plugin's screening count, device events, 1 warm-up and 5 timed calls (L2 flushed);
- ``event``: device events with the count the plugin's full measurement takes (about 25 ms of calls,
  10 to 1,000, a quarter as many untimed; L2 flushed);
- ``profiler``: the plugin's ``profiler`` method (CUPTI through ``torch.profiler``, 5 + 30 calls);
- ``judge``: CUPTI with an L2 flush before each call, as ``bench_steady_gpu.py`` judges picks.

Per case and method: the config the method ranks first (median over the rounds), its regret under
the judge, and the method's noise (the median over configs of the rounds' relative range). Then
the seconds of a profiler session around 30 short calls: the process's first, and later ones.
Results go to ``results/timers_<gpu>.json``; a table is printed last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import cupti_ms, gpu_model, save_results  # noqa: E402

CASES = "add/2^20,rowsum/16384x4096,transpose/8192x8192,transpose/16384x2048,layernorm/2048x12288,matmul/4096x4096x4096"
Q = (0.5, 0.2, 0.8)


def _profiler_cost(call, name: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    out = {"sessions_s": [], "events_s": [], "kineto_events_s": []}
    for _ in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                call()
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        prof.profiler.kineto_results.events()  # the raw records, as the plugin's profiler timer reads them
        t2 = time.perf_counter()
        prof.events()
        out["sessions_s"].append(t1 - t0)
        out["kineto_events_s"].append(t2 - t1)
        out["events_s"].append(time.perf_counter() - t2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=CASES)
    args = parser.parse_args()
    import _suite
    import torch
    from triton.runtime.driver import driver

    from triton_dist_plugin import kernel_time, timing

    flush = driver.active.get_empty_cache_for_benchmark().zero_
    results: dict = {"gpu": gpu_model(), "rounds": args.rounds, "cases": {}}
    for name in args.cases.split(","):
        built = _suite.select(name)[0].build()
        kernel = built.kernel_name
        calls = {}
        for i, config in enumerate(built.configs):
            try:
                call = built.direct(config)
                call()
                torch.cuda.synchronize()
                calls[i] = call
            except Exception:  # out of resources: no tuner times it either
                pass
        if "profiler_cost" not in results:  # the first profiler session of the process, on a short kernel
            results["profiler_cost"] = _profiler_cost(next(iter(calls.values())), kernel)
        each = {}
        for i, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            each[i] = max((time.perf_counter() - t0) / 5 * 1e3, 1e-3)
        times: dict = {m: {i: [] for i in calls} for m in ("screen", "event", "profiler", "judge")}
        order = list(calls)
        for r in range(args.rounds):
            shift = r * len(order) // args.rounds
            for i in order[shift:] + order[:shift]:
                call, n_full = calls[i], max(10, min(1000, int(25 / each[i])))
                times["screen"][i].append(timing.bench_event(call, "cuda", 1, 5, Q)[0])
                times["event"][i].append(timing.bench_event(call, "cuda", n_full // 4, n_full, Q)[0])
                times["profiler"][i].append(kernel_time.cuda_profiler(call, kernel, 5, 30, Q)[0])
                times["judge"][i].append(cupti_ms(call, kernel, max(10, min(100, int(2 / each[i]))), flush))
        judge = {i: statistics.median(v) for i, v in times["judge"].items()}
        best = min(judge.values())
        row = {"configs": len(calls), "best_ms": best, "times": times, "methods": {}}
        for method, per in times.items():
            med = {i: statistics.median(v) for i, v in per.items()}
            top = min(med, key=med.get)
            noise = statistics.median((max(v) - min(v)) / statistics.median(v) for v in per.values())
            ranked = sorted(med, key=med.get)[:3]
            row["methods"][method] = {"top": top, "regret_pct": 100 * (judge[top] / best - 1), "noise_pct": 100 * noise,
                                      "top3_regret_pct": [round(100 * (judge[i] / best - 1), 2) for i in ranked]}
        results["cases"][name] = row
        del built
        torch.cuda.empty_cache()
    save_results(f"timers_{results['gpu']}.json", results)
    cost = results["profiler_cost"]
    later = {k: statistics.median(v[1:]) for k, v in cost.items()}
    print(f"\nprofiler session, 30 calls: first {cost['sessions_s'][0]:.3f}s "
          f"(+ records {cost['kineto_events_s'][0]:.4f}s,"
          f" events() {cost['events_s'][0]:.3f}s); later {later['sessions_s']:.4f}s (+ {later['kineto_events_s']:.4f}s,"
          f" {later['events_s']:.4f}s)")
    print(f"{'case':28} {'best ms':>8} " + " ".join(f"{m + ' top/reg%/noise%':>26}" for m in times))
    for name, row in results["cases"].items():
        cells = [f"{v['top']:>4} {v['regret_pct']:6.2f} {v['noise_pct']:6.2f}" for v in row["methods"].values()]
        print(f"{name:28} {row['best_ms']:8.4f} " + " ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
