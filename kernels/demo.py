"""Demo: tune the kernels in ``kernels/`` through the plugin and show what was tried and picked.

    python -m kernels.demo [--out results.json] [kernel ...]

A kernel is named on the command line by its short name (``add``, ``softmax``, ...) or by its Triton
function's name (``add_kernel``, ``softmax_kernel``, ...). The output names each kernel as
``triton-dist-tune`` and the tuning records do, by the function's name, with the short name after
it: ``add_kernel (demo: add)``.

Runs on a GPU when one is present, else on the CPU under ``TRITON_INTERPRET=1`` (set here
before Triton is imported). Every ``@triton.autotune`` kernel is plain upstream code; the plugin
times candidates (wall clock on the CPU), and an observer registered on the hook bus collects
every tuning record, which this demo prints and writes to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile

import torch
import triton

import triton_dist_plugin as tdp
from kernels import KERNELS  # chooses the CPU interpreter when there is no GPU
from triton_dist_plugin.reporting import pick_reason


class Collector:
    """An observer plugin: keeps every ``tdp_on_tuned`` record."""

    def __init__(self):
        self.records = []

    @tdp.hookimpl
    def tdp_on_tuned(self, record):
        self.records.append(record)


def _write_json(path: str, data) -> None:
    """Atomically: a temporary file in the same folder, then ``os.replace``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tdp-demo-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _short(config) -> str:
    parts = [f"{k}={v}" for k, v in config.kwargs.items()] + [f"warps={config.num_warps}"]
    if getattr(config, "num_stages", None) is not None:
        parts.append(f"stages={config.num_stages}")
    return " ".join(parts)


def kernel_name(short: str) -> str:
    """The name ``triton-dist-tune`` and the tuning records give the demo's kernel ``short``: its
    Triton function's (``add`` -> ``add_kernel``)."""
    return KERNELS[short].jit.fn.__name__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.demo", description=__doc__.splitlines()[0])
    names = ", ".join(sorted(KERNELS))
    parser.add_argument("kernels", nargs="*", metavar="kernel",
                        help=f"any of {names}, or its Triton function's name (add_kernel, ...); default: all")
    parser.add_argument("--out", default="tdp-demo-results.json", help="where to write the tuning records")
    args = parser.parse_args(argv)
    by_name = {**{kernel_name(short): short for short in KERNELS}, **{short: short for short in KERNELS}}
    unknown = sorted(set(args.kernels) - set(by_name))
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; choose from {names} "
                     f"(or {', '.join(sorted(kernel_name(s) for s in KERNELS))})")
    args.kernels = list(dict.fromkeys(by_name[k] for k in args.kernels)) or sorted(KERNELS)

    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    size = "tiny" if device == "cpu" else "gpu"
    collector = Collector()
    tdp.register(collector, name="demo-collector")
    mode = "CPU interpreter, wall-clock timing" if device == "cpu" else torch.cuda.get_device_name(0)
    print(f"triton {triton.__version__} | triton-dist-plugin {tdp.__version__} | {mode}\n")

    report = []
    for name in args.kernels:
        spec = KERNELS[name]
        kernel = triton.autotune(configs=spec.configs(device), key=spec.key)(spec.jit)
        inputs = spec.make_inputs(size, device)
        out = spec.launch(kernel, *inputs)
        ref = spec.reference(*inputs)
        tol = 1e-4 if size == "tiny" else 2e-2
        ok = torch.allclose(out.float(), ref.float(), rtol=tol, atol=tol)
        record = collector.records[-1]
        verdict = "ok" if ok else "WRONG"
        timer = f"timed by {record.timer}" if record.timer else f"{record.method} timing"
        how = ("the pick stored on disk by an earlier run; timings from that run" if record.cache_hit else
               f"{timer}, {record.bench_time:.2f}s")
        print(f"{record.kernel_name} (demo: {name})  key={record.key}  ({how}, output {verdict})")
        # A screened-out candidate's short round is not comparable with a full measurement: each
        # group is listed on its own (no record of which were measured: none was screened).
        full = set(map(id, record.measured)) if record.measured else set(map(id, record.timings))
        for title, group in (("measured fully", True), ("screened out (a short round each)", False)):
            rows = sorted(((c, t) for c, t in record.timings.items() if (id(c) in full) is group),
                          key=lambda kv: kv[1][0])
            if rows and not group:
                print(f"   {title}:")
            for config, timing in rows:
                pick = "<- pick" if config is record.best_config else ""
                shown = f"{timing[0]:10.4f} ms" if math.isfinite(timing[0]) else \
                    f"failed: {record.failures.get(config)}"
                print(f"   {_short(config):<52} {shown} {pick}")
            why = pick_reason.line(record.timings[record.best_config][0],
                                   [t[0] for c, t in rows if c is not record.best_config], record.decision) \
                if group else None
            if why:  # a faster time shown beside the pick: why it is still the pick, where the times are
                print(f"   {why}")
        print()
        report.append({
            "kernel": record.kernel_name, "demo": name, "key": [str(k) for k in record.key], "method": record.method,
            "device": record.device, "correct": bool(ok), "bench_time_s": record.bench_time,
            "pick": _short(record.best_config),
            "candidates": [{"config": _short(c), "ms": t[0] if math.isfinite(t[0]) else None,
                            "round": "full" if id(c) in full else "screening",
                            "failure": record.failures.get(c)} for c, t in record.timings.items()],
        })
    _write_json(args.out, report)
    from triton_dist_plugin.store import cache, persist

    print(f"picks are kept in each kernel's `cache` and on disk under {cache.kernel_base() / persist.DIRECTORY} "
          f"(a second run times nothing; docs/picks.md says where picks live, and why); records written to "
          f"{os.path.abspath(args.out)}")
    tdp.unregister(collector)
    return 0 if all(r["correct"] for r in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
