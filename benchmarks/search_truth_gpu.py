"""The exhaustive ground truth of the large matmul space (``_search.large_space``) at 4096^3.

    python benchmarks/search_truth_gpu.py

No plugin: every config is compiled in a forked child of its own (16 at a time, each given at
most ``LIMIT`` seconds; one still compiling then is killed and recorded as such: a config that
takes that long to compile spills and is never the fastest, and it is named in the results),
loaded here, screened with ``do_bench(warmup=5, rep=20)``, and the best 25 measured again with
``do_bench(rep=200)``. Kept in ``results/search_truth_h200.json``; printed as it goes.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())
import torch  # noqa: E402
import triton  # noqa: E402
from _common import launch_meta, save_results  # noqa: E402
from _search import SHAPE, careful, inputs, large_space  # noqa: E402

sys.path.insert(0, ".")
from kernels import KERNELS  # noqa: E402

LIMIT = 20.0
PARALLEL = os.cpu_count() or 16


def main() -> None:
    mm = KERNELS["matmul"]
    a, b = inputs(SHAPE)
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device="cuda", dtype=a.dtype)
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    space = large_space()
    from triton.runtime.driver import driver

    device = driver.active.get_current_device()
    mm.jit.warmup(*args, **launch_meta(space[0]), grid=(1,))  # the per-process caches, before any fork
    started = time.perf_counter()
    running: dict = {}  # pid -> (index, start)
    status: dict = {}
    todo = list(range(len(space)))
    shown = 0
    while todo or running:
        if len(status) >= shown + 128:
            shown = len(status)
            print(f"{shown} compiled or failed after {time.perf_counter() - started:.0f}s", flush=True)
        while todo and len(running) < PARALLEL:
            i = todo.pop(0)
            pid = os.fork()
            if pid == 0:  # the child: compile into the disk cache, never touching the GPU
                code = 0
                try:
                    driver.active.get_current_device = lambda: device
                    driver.active.get_current_stream = lambda *_: 0
                    mm.jit.warmup(*args, **launch_meta(space[i]), grid=(1,))
                except BaseException:
                    code = 1
                os._exit(code)
            running[pid] = (i, time.perf_counter())
        pid, code = os.waitpid(-1, os.WNOHANG)
        if pid:
            i, _ = running.pop(pid)
            status[i] = "compiled" if os.waitstatus_to_exitcode(code) == 0 else "compile failed"
            continue
        for pid, (i, begun) in list(running.items()):
            if time.perf_counter() - begun > LIMIT:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                running.pop(pid)
                status[i] = f"compile over {LIMIT:.0f}s"
        time.sleep(0.01)
    compile_s = time.perf_counter() - started
    print(f"compiled {sum(s == 'compiled' for s in status.values())} of {len(space)} in {compile_s:.0f}s; "
          f"over the limit: {sum(s.startswith('compile over') for s in status.values())}", flush=True)
    quick: dict = {}
    for i, config in enumerate(space):
        if status[i] != "compiled":
            quick[str(config)] = None
            continue
        try:
            quick[str(config)] = triton.testing.do_bench(lambda c=config: mm.launch(mm.jit, a, b, **launch_meta(c)),
                                                         warmup=5, rep=20)
        except Exception as exc:  # out of resources, most often
            quick[str(config)] = None
            status[i] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    by_name = {str(c): c for c in space}
    valid = sorted((t, name) for name, t in quick.items() if t is not None)
    final = {name: careful(mm, by_name[name], a, b) for _, name in valid[:25]}
    best = min(final, key=final.get)
    small = {str(c) for c in mm.configs("cuda")}
    in_48 = {name: t for name, t in quick.items() if name in small and t is not None}
    best_48 = min(in_48, key=in_48.get)
    result = {"shape": SHAPE, "configs": len(space), "valid": len(valid), "compile_s": compile_s,
              "limit_s": LIMIT, "status": {str(space[i]): s for i, s in status.items() if s != "compiled"},
              "quick_ms": quick, "final_ms": final, "best": best, "best_ms": final[best],
              "best_of_48": best_48, "best_of_48_ms": careful(mm, by_name[best_48], a, b),
              "total_s": time.perf_counter() - started}
    save_results("search_truth_h200.json", result)
    print(f"truth: {len(valid)} of {len(space)} valid; best {best} {final[best]:.4f} ms; best of the 48 "
          f"{best_48} {result['best_of_48_ms']:.4f} ms; total {result['total_s']:.0f}s")


if __name__ == "__main__":
    main()
