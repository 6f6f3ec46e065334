"""Node scale on 2 GPUs over NCCL: first-call cost as ranks grow, the leader strategy, a dead rank.

    python benchmarks/bench_node_scale.py            # on a host with 2 GPUs

Each run is a fresh set of processes with empty Triton and plugin caches (the ranks of one run
share one Triton cache directory, as ranks of one host do by default):

1. ``first_call``: the first call of the 48-config fp16 matmul at 4096^3, tuned with a tuning
   group, on 1 rank and on 2 ranks (interleaved, twice each): the 2-rank time against the 1-rank
   time, the pick on each rank, and how the compile work was split.
2. the same on 2 ranks whose Triton caches are separate (every rank compiles every candidate,
   as without the split), and on 2 ranks with the ``leader`` strategy (tuning time and pick).
3. ``dead``: rank 1 exits during tuning (after its 5th timed candidate); rank 0 must raise
   within ``TRITON_DIST_AUTOTUNE_TIMEOUT`` (20 s here) with a message that says what happened.
   Measured: time from rank 1's exit to rank 0's error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
from _procs import emit, free_port, fresh_env, rank_env, result_of  # noqa: E402

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
DEAD_TIMEOUT = 20


def _init():
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=timedelta(seconds=300), device_id=torch.device("cuda", local))
    return dist


def child_first_call() -> None:
    dist = _init()
    import torch
    import triton

    import triton_dist_plugin as tdp
    from kernels import KERNELS
    from triton_dist_plugin.compiling import precompile

    mm = KERNELS["matmul"]
    a, b = mm.make_inputs("gpu", "cuda")
    tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    with tdp.tuning_group("world", strategy=os.environ.get("TDP_STRATEGY") or None):
        out = mm.launch(tuned, a, b)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    ok = bool(torch.allclose(out.float(), (a.float() @ b.float()), atol=1e-1, rtol=1e-2))
    mine = {"rank": dist.get_rank(), "seconds": seconds, "pick": str(tuned.best_config), "correct": ok,
            "bench_time": tuned.bench_time, "compile": precompile.summary()}
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, mine)
    if dist.get_rank() == 0:
        emit(rows)
    dist.destroy_process_group()


def child_dead() -> None:
    dist = _init()
    import torch
    import triton

    import triton_dist_plugin as tdp
    from kernels import KERNELS

    rank = dist.get_rank()

    class Die:
        count = 0

        @tdp.hookimpl
        def tdp_time_candidate(self, request):
            self.count += 1
            if rank == 1 and self.count == 5:
                Path(os.environ["TDP_DEATH_FILE"]).write_text(repr(time.time()))
                os._exit(3)

    tdp.register(Die())
    mm = KERNELS["matmul"]
    a, b = mm.make_inputs("gpu", "cuda")
    tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
    try:
        with tdp.tuning_group("world"):
            mm.launch(tuned, a, b)
        torch.cuda.synchronize()
        result = {"error": None}
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[:600], "error_at": time.time()}
    emit(result)
    os._exit(0)  # the communicator is broken: leave without tearing it down


def _fresh_env(extra: dict) -> tuple[dict, list[str]]:
    base = tempfile.mkdtemp(prefix="tdp-scale-")
    return fresh_env(base, extra=extra), [base]


def torchrun(nproc: int, env: dict, timeout: int = 300) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-port",
           str(free_port()), __file__, "--child", "first_call"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    ranks = result_of(proc.stdout)
    if ranks is not None:
        return {"ranks": ranks, "process_wall_s": wall}
    return {"error": (proc.stdout + proc.stderr)[-3000:]}


def separate_caches(env: dict, timeout: int = 300) -> dict:
    """2 ranks, each with its own Triton cache directory (started by hand: torchrun gives every
    rank the same environment)."""
    port = free_port()
    procs = []
    for rank in range(2):
        own = {**rank_env(env, rank, 2, port), "TRITON_CACHE_DIR": env["TRITON_CACHE_DIR"] + str(rank)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", "first_call"], cwd=ROOT, env=own,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for out, _ in outs:
        ranks = result_of(out)
        if ranks is not None:
            return {"ranks": ranks}
    return {"error": "".join(o + e for o, e in outs)[-3000:]}


def dead_rank() -> dict:
    env, _ = _fresh_env({"TRITON_DIST_AUTOTUNE_TIMEOUT": str(DEAD_TIMEOUT)})
    death = tempfile.mktemp(prefix="tdp-death-")
    port = free_port()
    procs = []
    for rank in range(2):
        own = {**rank_env(env, rank, 2, port), "TDP_DEATH_FILE": death}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", "dead"], cwd=ROOT, env=own,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        out, err = procs[0].communicate(timeout=DEAD_TIMEOUT + 150)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        return {"hang": f"rank 0 did not finish within {DEAD_TIMEOUT + 150}s"}
    procs[1].wait(timeout=30)
    result: dict = {"rank1_exit": procs[1].returncode, "rank0_exit": procs[0].returncode}
    result.update(result_of(out) or {})
    if os.path.exists(death) and result.get("error_at"):
        result["seconds_from_death_to_error"] = result["error_at"] - float(Path(death).read_text())
    if "error" not in result:
        result["stderr"] = err[-2000:]
    return result


def main() -> None:
    if "--child" in sys.argv:
        {"first_call": child_first_call, "dead": child_dead}[sys.argv[sys.argv.index("--child") + 1]]()
        return
    from _common import save_results

    runs: dict = {}
    for _ in range(2):
        for name, nproc, extra in (("1 rank", 1, {}), ("2 ranks", 2, {})):
            env, dirs = _fresh_env(extra)
            runs.setdefault(name, []).append(torchrun(nproc, env))
            [shutil.rmtree(d, ignore_errors=True) for d in dirs]
    env, dirs = _fresh_env({"TDP_STRATEGY": "leader"})
    runs["2 ranks, leader"] = [torchrun(2, env)]
    env, dirs = _fresh_env({})
    runs["2 ranks, separate Triton caches"] = [separate_caches(env)]
    runs["dead rank"] = dead_rank()
    save_results("node_scale_h200x2.json", runs)
    print(json.dumps(runs, indent=1, default=str)[-6000:])
    print(f"\n{'run':34} {'first call s (per rank)':32} picks equal  pick")
    for name, items in runs.items():
        if name == "dead rank":
            continue
        for item in items:
            if "error" in item:
                print(f"{name:34} ERROR {item['error'][-300:]}")
                continue
            ranks = item["ranks"]
            secs = ", ".join(f"{r['seconds']:.2f}" for r in ranks)
            print(f"{name:34} {secs:32} {len({r['pick'] for r in ranks}) == 1!s:11}  {ranks[0]['pick'][:60]}")
    one = [max(r["seconds"] for r in i["ranks"]) for i in runs["1 rank"] if "ranks" in i]
    two = [max(r["seconds"] for r in i["ranks"]) for i in runs["2 ranks"] if "ranks" in i]
    if one and two:
        print(f"2 ranks / 1 rank (slowest rank, min over runs): {min(two) / min(one):.3f}; "
              f"medians {sorted(two)[len(two) // 2] / sorted(one)[len(one) // 2]:.3f}")
    dead = runs["dead rank"]
    print(f"dead rank: error after {dead.get('seconds_from_death_to_error', float('nan')):.1f}s "
          f"(timeout {DEAD_TIMEOUT}s): {str(dead.get('error') or dead.get('hang'))[:300]}")


if __name__ == "__main__":
    main()
