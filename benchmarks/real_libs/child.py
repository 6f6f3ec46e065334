"""The child process: one mode, one rep. Imports the plugin and the libraries in the mode's order,
runs each op's first call under the probe, keeps its outputs, then times its steady state."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
import zlib
from pathlib import Path
from typing import Callable, Optional

from .cases import GEN, Op
from .ops import select_ops
from .probe import Probe
from .report import fmt
from .runner import last_line


def warm_up(torch) -> float:
    """One plain kernel and one matmul: CUDA context, Triton's driver and compiler, cuBLAS."""
    import triton
    import triton.language as tl

    @triton.jit
    def _fill(out, value, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, value, mask=offs < n)

    start = time.perf_counter()
    out = torch.empty(1000, device="cuda")
    _fill[(1,)](out, 1.0, 1000, BLOCK=1024)
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def graph_ms(torch, step: Callable) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    n = max(5, min(200, int(20.0 / max(start.elapsed_time(end), 1e-3))))
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / n)
    del graph
    return statistics.median(samples)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _steady(torch, step: Callable) -> dict:
    """CUDA graph replay where the op captures, else do_bench. An op that synchronises with the host
    cannot be captured: one step under sync-debug "error" finds that without starting a capture."""
    import triton

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        note = None
    except Exception as exc:
        note = "host sync: " + _first_line(exc)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    if note is None:
        try:
            return {"ms": graph_ms(torch, step), "method": "cuda_graph"}
        except Exception as exc:  # does not capture for another reason
            note = _first_line(exc)
            torch.cuda.synchronize()
    return {"ms": triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median"), "method": "do_bench",
            "graph_error": note}



def run_op(torch, probe: Probe, op: Op, keep: Optional[dict]) -> dict:
    seed = zlib.crc32(op.name.encode())
    torch.manual_seed(seed)
    GEN["cuda"] = torch.Generator(device="cuda").manual_seed(seed)
    row: dict = {"ok": False}
    case = result = grads = None
    probe.records = []
    try:
        case = op.build(torch)
        torch.cuda.synchronize()
        before = {id(t): Probe.state(t) for t in probe.known.values()}
        probe.armed, probe.phase = True, "fwd"
        start = time.perf_counter()
        result = case.fwd()
        torch.cuda.synchronize()
        row["fwd_s"] = time.perf_counter() - start
        if case.bwd is not None:
            probe.phase = "bwd"
            start = time.perf_counter()
            grads = case.bwd(result)
            torch.cuda.synchronize()
            row["bwd_s"] = time.perf_counter() - start
        probe.armed = False
        row["first_call_s"] = row["fwd_s"] + row.get("bwd_s", 0.0)
        tensors = {**case.outputs(result), **(grads or {})}
        if keep is not None:
            keep[op.name] = {k: v.detach().to("cpu", copy=True) for k, v in tensors.items() if v is not None}
        seen = {(r["kernel"], r["pick"]) for r in probe.records}
        probe.phase = "unknown"
        unprobed = [probe.describe(t, None, "unprobed") for i, t in list(probe.known.items())
                    if i in before and probe.tuned(t, before[i])]
        row["tuned"] = probe.records + [r for r in unprobed if (r["kernel"], r["pick"]) not in seen]
        del tensors, result, grads
        fwd, bwd = case.fwd, case.bwd
        step = case.step or ((lambda: bwd(fwd())) if bwd else fwd)
        row["steady"] = _steady(torch, step)
        row["ok"] = True
    except Exception as exc:
        probe.armed = False
        row["error"] = last_line(exc)
        row["traceback"] = traceback.format_exc()[-3000:]
        row.setdefault("tuned", probe.records)
        try:
            torch.cuda.synchronize()
        except Exception as sync_exc:  # a sticky CUDA error: later ops will fail too
            row["sync_error"] = last_line(sync_exc)
    finally:
        probe.armed = False
        del case
        torch.cuda.empty_cache()
    return row


def child(args: argparse.Namespace) -> None:
    ops = select_ops(args.ops)
    out: dict = {"mode": args.child, "rep": args.rep, "pid": os.getpid(), "ops": {}}
    started = time.perf_counter()
    import torch
    import triton

    probe = Probe(torch)
    probe.install()  # before the plugin and the libraries, in every mode
    out["warm_up_s"] = warm_up(torch)
    modules = list(dict.fromkeys(m for op in ops for m in op.modules))
    import importlib
    import importlib.metadata

    def import_libs() -> None:
        t0 = time.perf_counter()
        for name in modules:
            t1 = time.perf_counter()
            try:
                importlib.import_module(name)
            except Exception as exc:
                out.setdefault("import_errors", {})[name] = last_line(exc)
            out.setdefault("import_s", {})[name] = time.perf_counter() - t1
        out["import_libs_s"] = time.perf_counter() - t0

    def import_plugin() -> None:
        t0 = time.perf_counter()
        import triton_dist_plugin

        out["import_plugin_s"] = time.perf_counter() - t0
        out["plugin_active"] = triton_dist_plugin.is_active()
        if out["plugin_active"]:
            notes = out.setdefault("tuning_notes", [])

            class Notes:  # where each tuning's time went, as the plugin reports it
                @triton_dist_plugin.hookimpl
                def tdp_on_tuned(self, record):
                    notes.append({"kernel": record.kernel_name, "bench_s": record.bench_time,
                                  "n": len(record.timings), "failed": len(record.failures), "notes": record.notes,
                                  "pick": str(record.best_config),
                                  "timings": {str(c): list(t) for c, t in record.timings.items()}})

            triton_dist_plugin.register(Notes())

    if args.child == "after":
        import_libs()
        import_plugin()
    else:
        import_plugin()
        import_libs()
    probe.scan()
    out["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
                       "gpu": torch.cuda.get_device_name(), "tuners_at_start": len(probe.known)}
    for dist in ("flag_gems", "liger_kernel", "fla-core"):
        try:
            out["versions"][dist] = importlib.metadata.version(dist)
        except Exception:
            pass
    keep: Optional[dict] = {} if args.tensors else None
    for op in ops:
        failed_imports = [out["import_errors"][m] for m in op.modules if m in out.get("import_errors", {})]
        if failed_imports:
            out["ops"][op.name] = {"ok": False, "error": "import failed: " + "; ".join(failed_imports)}
            continue
        row = run_op(torch, probe, op, keep)
        out["ops"][op.name] = row
        status = "ok" if row["ok"] else f"FAILED: {row['error']}"
        tuned, steady = row.get("tuned", []), row.get("steady", {})
        print(f"  [{args.child} r{args.rep}] {op.name:26s} first {fmt(row.get('first_call_s'), '.2f', 7)}s "
              f"tuned {len(tuned):2d}x ({sum(r['n_configs'] for r in tuned):3d} configs) "
              f"steady {fmt(steady.get('ms'), '.3f', 8)}ms {steady.get('method', '-'):10s} {status}", flush=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # partial results survive a kill
    out["child_s"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    if keep is not None:
        torch.save(keep, args.tensors)
