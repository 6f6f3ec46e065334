"""Does the plugin time every candidate upstream's pruning keeps, and pick as well?

    python benchmarks/bench_pruned_matmul_gpu.py [--reps 2]

The kernel is written the way kernel libraries wrote Triton's old ``ops.matmul``: an fp16
matmul that accumulates into ``C`` (``C += A @ B``, so ``restore_value=["C"]``), with split-K,
stacked under ``triton.heuristics`` (``EVEN_K``), over about a hundred configs pruned by an
``early_config_prune`` (shared memory, and the two pipeline depths nearest an estimate for each
tile) and then a ``perf_model`` with ``top_k=10``. Each side runs in fresh processes with empty
caches, interleaved: ``upstream`` (no plugin), ``before`` (the plugin imported before the kernel
is decorated) and ``after`` (imported after). Each reports the configs in ``configs_timings``, how
many were timed and the reason for each that was not, the pick, the first call's time and a digest
of the output; a judge process then times every distinct pick by CUPTI (L2 flushed), round-robin.
Results: ``results/pruned_matmul_h200.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

from _common import cupti_ms, save_results
from _procs import run_fresh, serve

M = N = K = 4096
SIDES = ("upstream", "before", "after")


def _configs(triton) -> list:
    """Large tiles deep pipelines (compute-bound) and small tiles with split-K (memory-bound)."""
    out = []
    for bm, bn in ((128, 256), (256, 128), (128, 128), (64, 256), (256, 64), (128, 64), (64, 128), (64, 64)):
        for bk in (32, 64):
            for stages in (2, 3, 4, 5):
                warps = 8 if bm * bn >= 128 * 128 else 4
                out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "GROUP_M": 8},
                                         num_stages=stages, num_warps=warps))
    for bm, bn in ((16, 64), (32, 64), (64, 32), (32, 128), (16, 128)):
        for bk in (64, 128):
            for split in (1, 2, 4):
                for stages in (2, 3):
                    if len(out) < 103:
                        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split,
                                                  "GROUP_M": 8}, num_stages=stages, num_warps=2 if bm < 32 else 4))
    return out


def _early_prune(configs, named_args, **kwargs):
    """Drop what does not fit in shared memory; of the pipeline depths of each tile, keep the two
    nearest an estimate (deeper for larger K steps' latency to hide)."""
    smem, elem = 227 * 1024, 2
    groups: dict = {}
    for c in configs:
        kw = c.kwargs
        if c.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * elem > smem:
            continue
        if kw["SPLIT_K"] > 1 and named_args["K"] // kw["SPLIT_K"] < kw["BLOCK_K"]:
            continue
        groups.setdefault((kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["SPLIT_K"], c.num_warps), []).append(c)
    kept = []
    for (bm, bn, bk, _, _), members in groups.items():
        ideal = 2 + bm * bn / (4 * 64 * 64) + bk / 64
        kept += sorted(members, key=lambda c: abs(c.num_stages - ideal))[:2]
    return kept


def _perf_model(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_stages, num_warps, **kwargs):
    """A roofline of one launch: waves of tiles over 132 SMs, each tile's math against its loads."""
    import math

    tiles = math.ceil(M / BLOCK_M) * math.ceil(N / BLOCK_N) * SPLIT_K
    waves = math.ceil(tiles / 132)
    math_s = 2 * BLOCK_M * BLOCK_N * (K / SPLIT_K) / (990e12 / 132) / min(1.0, num_warps / 8 + 0.25)
    load_s = (BLOCK_M + BLOCK_N) * (K / SPLIT_K) * 2 / (4.8e12 / 132) / min(1.0, num_stages / 4)
    atomics = 0 if SPLIT_K == 1 else M * N * 4 * SPLIT_K / 4.8e12
    return (waves * max(math_s, load_s) + atomics) * 1e3


def _kernel(triton, tl):
    @triton.jit
    def matmul_acc(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
        pid, pid_k = tl.program_id(0), tl.program_id(1)
        grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
        group = pid // (GROUP_M * grid_n)
        first_m = group * GROUP_M
        size_m = min(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % size_m)
        pid_n = (pid % (GROUP_M * grid_n)) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        a = A + rm[:, None] * sam + rk[None, :] * sak
        b = B + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K * SPLIT_K)):
            if EVEN_K:
                x, y = tl.load(a), tl.load(b)
            else:
                left = K - k * BLOCK_K * SPLIT_K
                x = tl.load(a, mask=rk[None, :] < left, other=0.0)
                y = tl.load(b, mask=rk[:, None] < left, other=0.0)
            acc += tl.dot(x, y)
            a += BLOCK_K * SPLIT_K * sak
            b += BLOCK_K * SPLIT_K * sbk
        c = C + rm[:, None] * scm + rn[None, :] * scn
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        if SPLIT_K == 1:
            tl.store(c, (tl.load(c, mask=mask) + acc).to(C.dtype.element_ty), mask=mask)
        else:
            tl.atomic_add(c, acc.to(C.dtype.element_ty), mask=mask)

    return matmul_acc


def _tuned(triton, tl):
    heuristic = triton.heuristics({"EVEN_K": lambda a: a["K"] % (a["BLOCK_K"] * a["SPLIT_K"]) == 0})
    return triton.autotune(configs=_configs(triton), key=["M", "N", "K"], restore_value=["C"],
                           prune_configs_by={"early_config_prune": _early_prune, "perf_model": _perf_model,
                                             "top_k": 10})(heuristic(_kernel(triton, tl)))


def _inputs(torch):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=g)
    c = torch.randn(M, N, device="cuda", dtype=torch.float16, generator=g)
    return a, b, c


def _launch(kernel, a, b, c, **meta):
    import triton

    grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]), m["SPLIT_K"])  # noqa: E731
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 **meta)


def child_side() -> dict:
    side = os.environ["TDP_SIDE"]
    import torch
    import triton
    import triton.language as tl

    if side == "before":
        import triton_dist_plugin  # noqa: F401
    kernel = _tuned(triton, tl)
    if side == "after":
        import triton_dist_plugin  # noqa: F401
    records = []
    if side != "upstream":
        import triton_dist_plugin as tdp

        class Keep:
            @tdp.hookimpl
            def tdp_on_tuned(self, record):
                records.append(record)

        tdp.register(Keep())
    a, b, c = _inputs(torch)
    c0 = c.clone()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    _launch(kernel, a, b, c)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ref = (c0.float() + a.float() @ b.float())
    err = float((c.float() - ref).norm() / ref.norm())
    timings = {str(cfg): [float(v) for v in t] if isinstance(t, (list, tuple)) else [float(t)]
               for cfg, t in kernel.configs_timings.items()}
    failures = {str(cfg): str(r) for cfg, r in records[-1].failures.items()} if records else {}
    best = kernel.best_config
    return {"side": side, "first_call_s": first, "n_timings": len(timings),
            "n_timed": sum(1 for t in timings.values() if t[0] < float("inf")), "timings": timings,
            "not_timed": {k: failures.get(k, "?") for k, t in timings.items() if not t[0] < float("inf")},
            "pick": str(best), "pick_meta": {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages},
            "rel_err": err, "digest": hashlib.sha256(c.cpu().numpy().tobytes()).hexdigest()[:16]}


def child_judge() -> dict:
    """Every distinct pick (``TDP_PICKS``: JSON list of metas), CUPTI-timed round-robin, 5 rounds."""
    import json

    import torch
    import triton
    import triton.language as tl

    kernel = triton.heuristics({"EVEN_K": lambda a: a["K"] % (a["BLOCK_K"] * a["SPLIT_K"]) == 0})(_kernel(triton, tl))
    a, b, c = _inputs(torch)
    flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    picks = json.loads(os.environ["TDP_PICKS"])
    times: dict = {json.dumps(p, sort_keys=True): [] for p in picks}
    for _ in range(5):
        for p in picks:
            call = lambda p=p: _launch(kernel, a, b, c, **p)  # noqa: E731
            call()
            times[json.dumps(p, sort_keys=True)].append(cupti_ms(call, "matmul_acc", 20, flush_buf.zero_))
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def main() -> None:
    import json

    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    runs = []
    for rep in range(args.reps):
        for side in SIDES:  # interleaved: upstream, before, after, upstream, ...
            r = run_fresh(__file__, "side", plugin=None, extra={"TDP_SIDE": side}, timeout=500)
            r.setdefault("side", side)
            r["rep"] = rep
            runs.append(r)
            print(f"rep {rep} {side}: {r.get('n_timings')} in configs_timings, {r.get('n_timed')} timed, "
                  f"first call {r.get('first_call_s', float('nan')):.2f}s, pick {r.get('pick_meta')}, "
                  f"err {r.get('rel_err', float('nan')):.1e} {r.get('error', '')}", flush=True)
    metas = {json.dumps(r["pick_meta"], sort_keys=True): r["pick_meta"] for r in runs if "pick_meta" in r}
    judged = run_fresh(__file__, "judge", extra={"TDP_PICKS": json.dumps(list(metas.values()))}, timeout=300)
    best = min((v for v in judged.values() if isinstance(v, float)), default=None)
    upstream_sets = [set(r["timings"]) for r in runs if r["side"] == "upstream" and "timings" in r]
    rows = []
    for r in runs:
        if "timings" not in r:
            rows.append((r["side"], r["rep"], "error", r.get("error", "")))
            continue
        same = all(set(r["timings"]) == s for s in upstream_sets)
        ms = judged.get(json.dumps(r["pick_meta"], sort_keys=True))
        rows.append((r["side"], r["rep"], f"{r['n_timings']}/{r['n_timed']}", "same set" if same else "DIFFERENT SET",
                     f"{r['first_call_s']:.2f}s", f"{ms:.4f} ms" if isinstance(ms, float) else "-",
                     f"+{(ms / best - 1) * 100:.1f}%" if isinstance(ms, float) and best else "-", r["digest"]))
    save_results("pruned_matmul_h200.json", {"what": __doc__.splitlines()[0], "runs": runs, "judge_cupti_ms": judged})
    print("side      rep  listed/timed  configs vs upstream  first call  pick (CUPTI)  vs best  output digest")
    for row in rows:
        print("  ".join(str(x) for x in row))


if __name__ == "__main__" and not serve(globals()):
    sys.exit(main())
