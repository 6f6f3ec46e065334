"""What the benchmarks share in-process: timing (host loops, synchronised calls, ``do_bench`` rounds),
configs as results name them, the plugin's tuning notes, and saving results.

Importing it gives this process (and the children it starts) a plugin cache of its own; ``_procs``
starts children with empty caches."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]


# Picks persist on disk by default: a benchmark starts from an empty plugin cache of its own
# (scripts that compare first calls give each child process its own, too), removed when the
# process that made it ends (its child processes inherit the setting, and make none).
if "TRITON_DIST_AUTOTUNE_DIR" not in os.environ:
    import atexit
    import shutil

    _PICKS = os.environ["TRITON_DIST_AUTOTUNE_DIR"] = tempfile.mkdtemp(prefix="tdp-bench-")
    _MAKER = os.getpid()
    atexit.register(lambda: os.getpid() == _MAKER and shutil.rmtree(_PICKS, ignore_errors=True))


def save_host_us(name: str, field: str, us: dict) -> None:
    """Write a host-timing diagnostic's microseconds per row under ``results/<name>`` with the
    versions they were taken on, and print them, a row a line."""
    import sys

    import torch
    import triton

    save_results(Path(name).name, {"triton": triton.__version__, "torch": torch.__version__,
                                   "python": sys.version.split()[0], field: us})
    width = max(map(len, us), default=0) + 1
    for row, value in us.items():
        print(f"{row:{width}s} {value:6.2f} us")


def host_loop(f: Callable[[], Any], iters: int = 20000, device: bool = True, warmup: int = 500) -> float:
    """Host microseconds per call of ``f`` (after ``warmup`` calls; with ``device``, the device
    synchronised at both ends)."""
    sync = __import__("torch").cuda.synchronize if device else (lambda: None)
    for _ in range(warmup):
        f()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int = 31, iters: int = 2000) -> list[dict]:
    """Host microseconds per call of each of ``fns``, measured in short alternating rounds.

    Host timings drift by tens of percent over seconds on a shared machine; ratios taken within
    one short round, then the median over rounds, are what stays comparable.
    """
    return [{name: host_loop(f, iters) for name, f in fns.items()} for _ in range(rounds)]


def gpu_model() -> str:
    """``h100``, ``h200``, ...: the first GPU's model, for a results file's name (asked of
    ``nvidia-smi``, so this process does not use the GPU)."""
    import re
    import subprocess

    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True, timeout=30).stdout.splitlines()[:1]
    found = re.search(r"\b([A-Z]\d{2,3})\b", name[0]) if name else None
    return found.group(1).lower() if found else "gpu"


def save_results(name: str, data: Any) -> Path:
    """Write ``benchmarks/results/<name>`` (and a copy under ``$OUT`` when a device run sets it)."""
    text = json.dumps(data, indent=2, default=str)
    out = ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], name).write_text(text)
    return out


def timed_call(f: Callable[[], Any]) -> tuple[Any, float]:
    """``f()`` between two device synchronisations: ``(its result, seconds)``."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = f()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def careful_ms(f: Callable[[], Any], rounds: int = 3) -> float:
    """Milliseconds of ``f``: the median of ``rounds`` ``do_bench`` medians (warm-up 50 ms, 200 ms each)."""
    import statistics

    import triton

    return statistics.median(triton.testing.do_bench(f, warmup=50, rep=200, return_mode="median")
                             for _ in range(rounds))


def do_bench_rounds(fns: dict, rounds: int = 5, warmup: int = 25, rep: int = 100) -> dict:
    """``{name: [ms per round]}``: each of ``fns`` by ``do_bench`` (median), round-robin, so that drifting
    clocks hit them alike."""
    import triton

    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            times[name].append(triton.testing.do_bench(f, warmup=warmup, rep=rep, return_mode="median"))
    return times


def cupti_rounds(fns: dict, name: str, rounds: int = 5) -> dict:
    """``{key: [ms per round]}``: each of ``fns`` by its kernels' CUPTI time (``cupti_ms``, an L2 flush
    before each call; about 2 ms of calls, 10 to 100), round-robin, so that drifting clocks hit them alike."""
    import time

    import torch
    from triton.runtime.driver import driver

    flush = driver.active.get_empty_cache_for_benchmark().zero_
    counts = {}
    for key, f in fns.items():
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            f()
        torch.cuda.synchronize()
        counts[key] = max(10, min(100, int(2.0 / max((time.perf_counter() - t0) / 5 * 1e3, 1e-3))))
    times: dict = {key: [] for key in fns}
    for _ in range(rounds):
        for key, f in fns.items():
            times[key].append(cupti_ms(f, name, counts[key], flush))
    return times


def config_dict(config: Any) -> dict:
    """A ``triton.Config`` as the results record a pick: ``{"kwargs", "num_warps", "num_stages"}``."""
    return {"kwargs": config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def launch_meta(config: Any) -> dict:
    """The launch keywords of a ``triton.Config`` or of a ``config_dict``: its kwargs, warps and stages."""
    if isinstance(config, dict):
        return {**config["kwargs"], "num_warps": config["num_warps"], "num_stages": config["num_stages"]}
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def collect_notes(notes: Optional[list] = None, keep: Optional[Callable[[str], bool]] = None) -> list:
    """``notes`` (a new list by default), filled from now on with the plugin's notes of each tuning (those
    ``keep`` accepts). Imports the plugin."""
    import triton_dist_plugin as tdp

    notes = [] if notes is None else notes

    class Notes:
        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            notes.extend(n for n in record.notes if keep is None or keep(n))

    tdp.register(Notes())
    return notes


def first_call_matmul() -> tuple[float, Any]:
    """Seconds of the first call of the 48-config fp16 matmul at 4096^3 (compile and time every
    config), and its tuner; run in a fresh process with an empty Triton cache."""
    import triton

    from kernels import KERNELS

    mm = KERNELS["matmul"]
    a, b = mm.make_inputs("gpu", "cuda")
    tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    _, seconds = timed_call(lambda: mm.launch(tuned, a, b))
    return seconds, tuned


def cupti_ms(call, name: str, n: int, flush) -> float:
    """The median CUPTI kernel time (ms) of ``n`` calls of ``call`` (each after ``flush()``, an L2 flush),
    the kernels whose name holds ``name``: the time of the kernel alone, as the judge of a pick."""
    import statistics

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            flush()
            call()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if e.device_type == DeviceType.CUDA and name in e.name]
    if len(times) < n:
        raise RuntimeError(f"the CUDA profiler recorded {len(times)} of {n} launches of {name!r} (is CUPTI there?)")
    return statistics.median(times) / 1e3


def cupti_batch_ms(calls: list, name: str, n: int, flush) -> list:
    """The median CUPTI kernel time (ms) of each of ``calls``, ``n`` calls each (each after ``flush()``),
    all in one profiler session: the kernels named ``name`` are attributed to the calls in launch
    order (one kernel per call, as a Triton kernel's launch is)."""
    import statistics

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in calls:
            for _ in range(n):
                flush()
                call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    # By the kernel's own name; a part of it only where none has it whole (never the flush's kernel).
    found = [e for e in kernels if e.name == name] or [e for e in kernels if name in e.name and "Fill" not in e.name]
    found.sort(key=lambda e: e.time_range.start)
    if len(found) != n * len(calls):
        raise RuntimeError(f"the CUDA profiler recorded {len(found)} of {n * len(calls)} launches of {name!r}")
    return [statistics.median(e.device_time for e in found[i * n:(i + 1) * n]) / 1e3 for i in range(len(calls))]
