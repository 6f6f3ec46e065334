"""Host cost of a tuned launch against a direct one and upstream's, on one GPU.

    python benchmarks/bench_launch_gpu.py [--procs 3] [--previous DIR] [--budget 540] [--out launch_h200.json]
    python benchmarks/bench_launch_gpu.py --smoke     # the plugin's side on the CPU interpreter, a few calls:
                                                      # checks the script only (upstream cannot time on a CPU)

Fresh processes, interleaved (upstream, plugin, previous, upstream, ...), each with empty caches of its own;
``previous`` is an earlier version of the package, extracted to ``DIR`` (e.g. ``git archive c0946d6
triton_dist_plugin | tar -x -C DIR``), imported in place of this one.
In each, every kernel is tuned by its first call, then these are timed in alternating short rounds
(host microseconds per call, the device synchronised at both ends of a round; median over rounds,
15 of them or ``TDP_LAUNCH_ROUNDS``):

- ``tuned``: ``kernel[grid](...)`` on the autotuned kernel, as users launch it (a grid lambda);
- ``binder`` (plugin): the same through the binder's path of this version (no launch guard plans:
  Triton's binder on every call); the ``previous`` side's ``tuned`` is the earlier version's path;
- ``direct``: the picked config's compiled kernel launched directly, ``jit[grid](..., **config)``
  with a tuple grid, as ANCHORS measures it;
- ``direct_lambda``: the same with the tuned launch's grid lambda;
- ``python_path`` (plugin): the same tuned kernel through the plugin's cache-hit path in Python (the
  compiled one off), and ``launcher_alone``: Triton's C launcher called with the grid, stream and
  values worked out once, the floor of any tuned launch (add and args20).

Kernels: ``add`` (three pointers and a length), ``args20`` (20 arguments: pointers, strides, a
length, floats, a flag, a constexpr), and, where they import, real-library ops at decode sizes
(fla's ``l2norm`` and ``rms_norm`` on one token), whose whole call is timed. ``decode`` is one step of
a batch-1 decoder's small kernels (add, layernorm, scale, softmax, add on one 4096-wide row),
outputs allocated as a model would. Each tuned launch is checked against the direct launch's output.
fla launches its kernels with every argument by keyword. The plugin side reports, per case, whether a launch
guard served its launches (``served``), why any launcher or guard refused, and each case's GPU time
per launch (``device_us``, CUPTI): a host time close to it means the queue, not the host, set the pace.
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
from _common import host_loop  # noqa: E402
from _procs import PLUGIN_ENV, child_pythonpath, run_fresh, serve  # noqa: E402

ROUNDS_ENV = "TDP_LAUNCH_ROUNDS"  # alternating rounds per child on a GPU (default 15)
PREVIOUS_ENV = "TDP_PREVIOUS"  # "1": this child imports an earlier version of the package (--previous)


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
    TUNERS["add"] = [tuned]
    cases["add"] = _rows(tuned, add.jit, (x, y, o, n), grid, lambda m: (triton.cdiv(n, m["BLOCK"]),), o, ref)
    k = [torch.randn(n, device=device) for _ in range(5)]
    o20 = torch.empty_like(x)
    ref20 = -((k[0] + k[1] + k[2] + k[3] + k[4]) * 0.5 + 0.25 + 6)
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in ((128, 256) if cpu else (256, 512, 1024)) for w in
               ((1,) if cpu else (2, 4))]
    tuned20 = triton.autotune(configs=configs, key=["n"])(args20_kernel)
    args20 = (*k, o20, n, 1, 1, 1, 1, 1, 1, 1, 2, 3, 0.5, 0.25, True)
    TUNERS["args20"] = [tuned20]
    cases["args20"] = _rows(tuned20, args20_kernel, args20, grid, lambda m: (triton.cdiv(n, m["BLOCK"]),), o20, ref20)
    cases["decode"] = _decode(torch, device, KERNELS)
    cases.update(_library_ops(torch, device))
    return cases


TUNERS: dict = {}  # case -> its autotuned kernels, for the report of what served them
SKIPPED: dict = {}  # library -> why its cases did not run


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
    if os.environ.get(PLUGIN_ENV) == "1" and not os.environ.get(PREVIOUS_ENV):
        rows["binder"] = _binder_path(tuned, jit, args, grid)
        rows["python_path"] = _python_path(tuned, jit, args, grid)
        alone = _launcher_alone(tuned, args, grid)
        rows.update({"launcher_alone": alone} if alone is not None else {})  # none under the interpreter
    return rows


def _other(tuned, jit, args: tuple, grid):
    """A second tuner of the same kernel whose launches are all cache hits of the same pick."""
    other = triton.autotune(configs=[tuned.best_config], key=[])(jit)
    other.configs = [tuned.best_config, tuned.best_config]  # two configs: tuned once, then a cache hit
    for _ in range(4):
        other[grid](*args)
    return other


def _python_path(tuned, jit, args: tuple, grid):
    """The plugin's cache-hit path in Python (as before the compiled one): the same kernel through a
    tuner whose ``run`` is the Python closure the compiled ``Hit`` hands its other calls to."""
    other = _other(tuned, jit, args, grid)
    run = other.__dict__.get("run")
    other.__dict__["run"] = getattr(run, "slow", run)
    return lambda: other[grid](*args)


def _launcher_alone(tuned, jit_args: tuple, grid):
    """The floor: Triton's C launcher called as the guard's entry calls it, with the grid, stream and
    values worked out once (what no tuned path can go below)."""
    import torch

    from triton_dist_plugin.patched import kernel_state

    for _ in range(4):  # the binder confirms the kernel, the guard learns the call and its entry
        tuned[grid](*jit_args)
    state = kernel_state.state_of(tuned)
    launcher = state.fast[state.key_get(jit_args)][2]
    plan = next((p for p in getattr(launcher, "plans", ()) if p.entries), None)
    if plan is None:
        return None
    entry = next(iter(plan.entries.values()))
    values = plan.guard(jit_args, {"grid": grid, "warmup": False})[1]
    shape = grid(plan.bound(jit_args, {}))
    g = (*shape, 1, 1)[:3]
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: entry[1](g[0], g[1], g[2], stream, values)


def _binder_path(tuned, jit, args: tuple, grid):
    """The plugin's previous cache-hit path: a second tuner of the same kernel whose direct
    launchers never learn a launch guard, so Triton's binder runs on every call."""
    from triton_dist_plugin.patched import direct, kernel_state

    other = triton.autotune(configs=[tuned.best_config], key=[])(jit)
    other.configs = [tuned.best_config, tuned.best_config]  # two configs: tuned once, then a cache hit
    other[grid](*args)
    for launcher in kernel_state.state_of(other).launchers.values():
        if launcher is not None:
            launcher.attempts = direct._MOST_ATTEMPTS  # never learns a plan
    return lambda: other[grid](*args)


def _decode(torch, device: str, kernels: dict) -> dict:
    """One decode step's small kernels on one row: tuned, and the same picks launched directly."""
    width = 100 if device == "cpu" else 4096
    x, r = (torch.randn(1, width, device=device, dtype=torch.float16) for _ in range(2))
    w, b = torch.ones(width, device=device, dtype=torch.float16), torch.zeros(width, device=device, dtype=torch.float16)
    names = ("add", "layernorm", "scale", "softmax")
    tuned = {name: triton.autotune(configs=kernels[name].configs(device), key=kernels[name].key)(kernels[name].jit)
             for name in names}
    TUNERS["decode"] = list(tuned.values())

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
    except Exception as exc:  # noqa: BLE001 - not installed, or fails to import here: said in the results
        SKIPPED["fla"] = f"{type(exc).__name__}: {exc}"[:300]
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
    rounds, iters = (1, 3) if device == "cpu" else (int(os.environ.get(ROUNDS_ENV, "15")), 2000)
    with torch.no_grad():
        cases = _cases(torch, device)
        times: dict = {case: {row: [] for row in rows} for case, rows in cases.items()}
        for _ in range(rounds):
            for case, rows in cases.items():
                for row, f in rows.items():
                    times[case][row].append(host_loop(f, iters, device == "cuda", min(iters, 200)))
        device_us = {case: _device_us(torch, rows["tuned"]) for case, rows in cases.items()} if device == "cuda" else {}
    out = {"triton": triton.__version__, "torch": torch.__version__, "device": device,
           "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "device_us": device_us,
           "skipped": SKIPPED,
           "median_us": {case: {row: statistics.median(v) for row, v in rows.items()} for case, rows in times.items()}}
    if os.environ.get(PLUGIN_ENV) == "1":
        import triton_dist_plugin
        from triton_dist_plugin.patched import direct, kernel_state

        out["package"] = triton_dist_plugin.__file__
        out["refusals"] = dict(direct.refusals)
        out["guard_refusals"] = dict(getattr(direct, "guard_refusals", {}))
        out["served"] = {case: any(plan.entries for tuner in tuners for launcher in
                                   kernel_state.state_of(tuner).launchers.values() if launcher is not None
                                   for plan in getattr(launcher, "plans", ()))
                         for case, tuners in TUNERS.items()}
    return out


def _device_us(torch, f, launches: int = 200) -> float:
    """GPU microseconds per call of ``f`` (its kernels' CUPTI time, summed)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(launches):
            f()
        torch.cuda.synchronize()
    return sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA") / launches


ROWS = ("tuned", "binder", "direct", "direct_lambda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=3, help="fresh processes per side")
    parser.add_argument("--out", default="launch_h200.json", help="file name under benchmarks/results/")
    parser.add_argument("--previous", help="a folder holding an earlier triton_dist_plugin, timed as a third side")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all children (default 540)")
    parser.add_argument("--smoke", action="store_true",
                        help="the plugin's side on the CPU interpreter, a few calls, nothing saved")
    args = parser.parse_args()
    extra = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""} if args.smoke else {}
    runs: dict = {"plugin": []} if args.smoke else {"upstream": [], "plugin": []}
    if args.previous:
        runs["previous"] = []
        previous = {"PYTHONPATH": os.pathsep.join([str(Path(args.previous).resolve()), child_pythonpath()]),
                    PREVIOUS_ENV: "1"}
    start, longest = time.monotonic(), 0.0
    for rep in range(1 if args.smoke else args.procs):
        for side in runs:
            if time.monotonic() - start + longest > args.budget:  # another child would not fit: say so, keep the rest
                print(f"{side} {rep + 1}: skipped, {args.budget:.0f}s budget", flush=True)
                continue
            env = {**extra, **(previous if side == "previous" else {})}
            began = time.monotonic()
            runs[side].append(run_fresh(__file__, "launch", plugin=side != "upstream", extra=env, timeout=550))
            longest = max(longest, time.monotonic() - began)
            print(f"{side} {rep + 1}: {time.monotonic() - began:.0f}s", flush=True)
            if not args.smoke:  # what ran so far survives a run cut short
                from _common import save_results

                save_results(Path(args.out).name, {"runs": runs, "summary": _summary(runs)})
    errors = [r["error"] for rs in runs.values() for r in rs if "error" in r]
    if errors:
        print("errors:", *errors, sep="\n  ")
    skipped = {k: v for rs in runs.values() for r in rs for k, v in r.get("skipped", {}).items()}
    if skipped:
        print("not run:", *(f"{k}: {v}" for k, v in skipped.items()), sep="\n  ")
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
            for case, us in result.get("device_us", {}).items():
                table.setdefault(case, {}).setdefault(f"{side}_device", []).append(us)
    summary = {case: {k: statistics.median(v) for k, v in cols.items()} for case, cols in table.items()}
    for cols in summary.values():
        for name, over in (("plugin_tuned/direct", "plugin_direct"), ("plugin_tuned/upstream_tuned", "upstream_tuned"),
                           ("plugin_tuned/previous_tuned", "previous_tuned"),
                           ("plugin_tuned/upstream_direct", "upstream_direct")):
            if "plugin_tuned" in cols and over in cols:
                cols[name] = cols["plugin_tuned"] / cols[over]
        if "upstream_tuned" in cols and "upstream_direct" in cols:
            cols["upstream_tuned/upstream_direct"] = cols["upstream_tuned"] / cols["upstream_direct"]
    return summary


def _print(summary: dict) -> None:
    columns = ["upstream_tuned", "upstream_direct", "previous_tuned", "plugin_tuned", "plugin_python_path",
               "plugin_launcher_alone", "plugin_direct", "plugin_device", "plugin_tuned/direct",
               "plugin_tuned/upstream_direct", "upstream_tuned/upstream_direct", "plugin_tuned/upstream_tuned"]
    short = {"upstream_": "u_", "previous_": "prev_", "plugin_": "p_"}

    def label(column: str) -> str:
        for long, brief in short.items():
            column = column.replace(long, brief)
        return column

    print(f"{'host us per call':18s}" + "".join(f"{label(c):>17s}" for c in columns))
    for case, cols in summary.items():
        print(f"{case:18s}" + "".join(f"{cols[c]:17.2f}" if c in cols else f"{'-':>17s}" for c in columns))


if __name__ == "__main__":
    if not serve(globals()):
        main()
