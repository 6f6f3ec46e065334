"""Host cost of a tuned launch against a direct one and upstream's, on one GPU.

    python benchmarks/bench_launch_gpu.py [--procs 3] [--out launch_h200.json]
    python benchmarks/bench_launch_gpu.py --smoke     # the plugin's side on the CPU interpreter, a few calls:
                                                      # checks the script only (upstream cannot time on a CPU)

Fresh processes, interleaved (upstream, plugin, upstream, plugin, ...), each with empty caches of its own.
In each, every kernel is tuned by its first call, then these are timed in alternating short rounds
(host microseconds per call, the device synchronised at both ends of a round; median over rounds):

- ``tuned``: ``kernel[grid](...)`` on the autotuned kernel, as users launch it (a grid lambda);
- ``binder`` (plugin): the same through the plugin's previous cache-hit path, Triton's binder on
  every call (the launch guard's plans turned off on that launcher);
- ``direct``: the picked config's compiled kernel launched directly, ``jit[grid](..., **config)``
  with a tuple grid, as ANCHORS measures it;
- ``direct_lambda``: the same with the tuned launch's grid lambda.

Kernels: ``add`` (three pointers and a length), ``args20`` (20 arguments: pointers, strides, a
length, floats, a flag, a constexpr), and, where they import, real-library ops at decode sizes
(fla's ``l2norm`` and ``rms_norm`` on one token), whose whole call is timed. ``decode`` is one step of
a batch-1 decoder's small kernels (add, layernorm, scale, softmax, add on one 4096-wide row),
outputs allocated as a model would. Each tuned launch is checked against the direct launch's output.
The plugin side also reports whether the guard served the launches, and why any launcher refused.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _procs import PLUGIN_ENV, run_fresh, serve  # noqa: E402


@triton.jit
def args20_kernel(a, b, c, d, e, out, n, sa, sb, sc, sd, se, so, k0, k1, k2, alpha, beta, flag,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(a + offs * sa, mask=mask) + tl.load(b + offs * sb, mask=mask) + tl.load(c + offs * sc, mask=mask)
    v += tl.load(d + offs * sd, mask=mask) + tl.load(e + offs * se, mask=mask)
    v = v * alpha + beta + (k0 + k1 + k2)
    if flag:
        v = -v
    tl.store(out + offs * so, v, mask=mask)


def _sync(device: str):
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _per_call(f, iters: int, sync) -> float:
    for _ in range(min(iters, 200)):
        f()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def _cases(torch, device: str) -> dict:
    """name -> {row: zero-argument launch}, each tuned by a first call; outputs checked here."""
    from kernels import KERNELS

    cases: dict = {}
    cpu = device == "cpu"
    add = KERNELS["add"]
    n = 1000 if cpu else 4096
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    o, ref = torch.empty_like(x), x + y
    tuned = triton.autotune(configs=add.configs(device), key=["n"])(add.jit)
    grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
    cases["add"] = _rows(tuned, add.jit, (x, y, o, n), grid, lambda m: (triton.cdiv(n, m["BLOCK"]),), o, ref)
    k = [torch.randn(n, device=device) for _ in range(5)]
    o20 = torch.empty_like(x)
    ref20 = -((k[0] + k[1] + k[2] + k[3] + k[4]) * 0.5 + 0.25 + 6)
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in ((128, 256) if cpu else (256, 512, 1024)) for w in
               ((1,) if cpu else (2, 4))]
    tuned20 = triton.autotune(configs=configs, key=["n"])(args20_kernel)
    args20 = (*k, o20, n, 1, 1, 1, 1, 1, 1, 1, 2, 3, 0.5, 0.25, True)
    cases["args20"] = _rows(tuned20, args20_kernel, args20, grid, lambda m: (triton.cdiv(n, m["BLOCK"]),), o20, ref20)
    cases["decode"] = _decode(torch, device, KERNELS)
    cases.update(_library_ops(torch, device))
    return cases


def _rows(tuned, jit, args: tuple, grid, direct_grid, out, ref) -> dict:
    import torch

    out.zero_()
    tuned[grid](*args)
    assert torch.allclose(out, ref, atol=1e-4), "tuned launch: wrong result"
    meta = tuned.best_config.all_kwargs()
    tuple_grid = direct_grid(meta)
    out.zero_()
    tuned[grid](*args)
    assert torch.allclose(out, ref, atol=1e-4), "tuned launch (cache hit): wrong result"
    rows = {"tuned": lambda: tuned[grid](*args), "direct": lambda: jit[tuple_grid](*args, **meta),
            "direct_lambda": lambda: jit[grid](*args, **meta)}
    if os.environ.get(PLUGIN_ENV) == "1":
        rows["binder"] = _binder_path(tuned, jit, args, grid)
    return rows


def _binder_path(tuned, jit, args: tuple, grid):
    """The plugin's previous cache-hit path: a second tuner of the same kernel whose direct
    launchers never learn a launch guard, so Triton's binder runs on every call."""
    from triton_dist_plugin.patched import direct, kernel_state
    from triton_dist_plugin.patched.launch_guard import MOST_PLANS

    other = triton.autotune(configs=[tuned.best_config], key=[])(jit)
    other.configs = [tuned.best_config, tuned.best_config]  # two configs: tuned once, then a cache hit
    other[grid](*args)
    for launcher in kernel_state.state_of(other).launchers.values():
        if launcher is not None:
            launcher.plans = (direct._NO_PLAN,) * MOST_PLANS
    return lambda: other[grid](*args)


def _decode(torch, device: str, kernels: dict) -> dict:
    """One decode step's small kernels on one row: tuned, and the same picks launched directly."""
    width = 100 if device == "cpu" else 4096
    x, r = (torch.randn(1, width, device=device, dtype=torch.float16) for _ in range(2))
    w, b = torch.ones(width, device=device, dtype=torch.float16), torch.zeros(width, device=device, dtype=torch.float16)
    names = ("add", "layernorm", "scale", "softmax")
    tuned = {name: triton.autotune(configs=kernels[name].configs(device), key=kernels[name].key)(kernels[name].jit)
             for name in names}

    def step(kernel, meta):
        h = kernels["add"].launch(kernel("add"), x, r, **meta("add"))
        h = kernels["layernorm"].launch(kernel("layernorm"), h, w, b, **meta("layernorm"))
        h = kernels["scale"].launch(kernel("scale"), h, 0.5, **meta("scale"))
        h = kernels["softmax"].launch(kernel("softmax"), h, **meta("softmax"))
        return kernels["add"].launch(kernel("add"), h, x, **meta("add"))

    first = step(tuned.get, lambda name: {})
    picks = {name: tuned[name].best_config.all_kwargs() for name in names}
    again = step(lambda name: kernels[name].jit, picks.get)
    assert torch.equal(first, again), "decode step: tuned and direct launches differ"
    return {"tuned": lambda: step(tuned.get, lambda name: {}),
            "direct_lambda": lambda: step(lambda name: kernels[name].jit, picks.get)}


def _library_ops(torch, device: str) -> dict:
    """fla's l2norm and rms_norm on one decode token, where fla imports (a GPU only)."""
    if device == "cpu":
        return {}
    try:
        from fla.modules.norm.l2norm import l2norm
        from fla.modules.norm.layernorm import rms_norm
    except ImportError:
        return {}
    x = torch.randn(1, 1, 16, 128, device=device, dtype=torch.bfloat16)
    h, w = torch.randn(1, 1, 4096, device=device, dtype=torch.bfloat16), torch.ones(4096, device=device,
                                                                                   dtype=torch.bfloat16)
    with torch.no_grad():
        l2norm(x), rms_norm(h, w, None)
    return {"fla_l2norm": {"tuned": lambda: l2norm(x)}, "fla_rms_norm": {"tuned": lambda: rms_norm(h, w, None)}}


def child_launch() -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rounds, iters = (1, 3) if device == "cpu" else (15, 2000)
    with torch.no_grad():
        cases = _cases(torch, device)
        sync = _sync(device)
        times: dict = {case: {row: [] for row in rows} for case, rows in cases.items()}
        for _ in range(rounds):
            for case, rows in cases.items():
                for row, f in rows.items():
                    times[case][row].append(_per_call(f, iters, sync))
    out = {"triton": triton.__version__, "torch": torch.__version__, "device": device,
           "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
           "median_us": {case: {row: statistics.median(v) for row, v in rows.items()} for case, rows in times.items()}}
    if os.environ.get(PLUGIN_ENV) == "1":
        from triton_dist_plugin.patched import direct

        out["refusals"] = dict(direct.refusals)
    return out


ROWS = ("tuned", "binder", "direct", "direct_lambda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=3, help="fresh processes per side")
    parser.add_argument("--out", default="launch_h200.json", help="file name under benchmarks/results/")
    parser.add_argument("--smoke", action="store_true", help="the CPU interpreter, a few calls, nothing saved")
    args = parser.parse_args()
    extra = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""} if args.smoke else {}
    runs: dict = {"plugin": []} if args.smoke else {"upstream": [], "plugin": []}
    for _ in range(1 if args.smoke else args.procs):
        for side in runs:
            runs[side].append(run_fresh(__file__, "launch", plugin=side == "plugin", extra=extra, timeout=550))
    errors = [r["error"] for rs in runs.values() for r in rs if "error" in r]
    if errors:
        print("errors:", *errors, sep="\n  ")
    summary = _summary(runs)
    if not args.smoke:
        from _common import save_results

        save_results(Path(args.out).name, {"runs": runs, "summary": summary})
    _print(summary)
    sys.exit(1 if errors else 0)


def _summary(runs: dict) -> dict:
    """Per case and row: the median over processes of each process's median, and the ratios."""
    table: dict = {}
    for side, results in runs.items():
        for result in results:
            for case, rows in result.get("median_us", {}).items():
                for row, us in rows.items():
                    table.setdefault(case, {}).setdefault(f"{side}_{row}", []).append(us)
    summary = {case: {k: statistics.median(v) for k, v in cols.items()} for case, cols in table.items()}
    for cols in summary.values():
        if "plugin_direct" in cols:
            cols["plugin_tuned/direct"] = cols["plugin_tuned"] / cols["plugin_direct"]
        if "upstream_tuned" in cols:
            cols["plugin_tuned/upstream_tuned"] = cols["plugin_tuned"] / cols["upstream_tuned"]
    return summary


def _print(summary: dict) -> None:
    columns = ["upstream_tuned", "upstream_direct", "plugin_tuned", "plugin_binder", "plugin_direct",
               "plugin_direct_lambda", "plugin_tuned/direct", "plugin_tuned/upstream_tuned"]
    print(f"{'case (host us per call)':24s}" + "".join(f"{c.replace('plugin_', 'p_').replace('upstream_', 'u_'):>16s}"
                                                    for c in columns))
    for case, cols in summary.items():
        print(f"{case:24s}" + "".join(f"{cols[c]:16.2f}" if c in cols else f"{'-':>16s}" for c in columns))


if __name__ == "__main__":
    if not serve(globals()):
        main()
