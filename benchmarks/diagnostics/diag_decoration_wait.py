"""How long does decorating a ``configs=[]`` kernel take right after the plugin's import, with
isolation at its default (the worker is forked then) and off? The fork first waits for the
plugin's own start-up threads (Triton's source hash, its driver module's build), which a program
without isolation overlaps with its own work (issue 36). Each side in a fresh process with empty
caches, interleaved; not under the interpreter (nothing would be compiled, so nothing started).

    python benchmarks/diagnostics/diag_decoration_wait.py [--reps 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import json, time, torch, triton, triton.language as tl
import triton_dist_plugin
from triton_dist_plugin.isolation import isolate

@triton.jit
def kernel(x, n, BLOCK: tl.constexpr):
    pass

began = time.perf_counter()
triton.autotune(configs=[], key=["n"])(kernel)
print(json.dumps({"decorate_s": time.perf_counter() - began,
                  "worker": isolate._shared.began if isolate._shared is not None else None}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="also write what was found here, as JSON")
    options = parser.parse_args()
    reps = options.reps
    sides = {"isolated": {}, "unisolated": {"TRITON_DIST_AUTOTUNE_ISOLATE": "0"}}
    found: dict = {side: [] for side in sides}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for _ in range(reps):
        for side, extra in sides.items():
            with tempfile.TemporaryDirectory() as tmp:
                env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
                env.update(extra, TRITON_CACHE_DIR=os.path.join(tmp, "triton"), HOME=tmp,
                           TRITON_DIST_AUTOTUNE_DIR=os.path.join(tmp, "tune"),
                           PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]))
                script = os.path.join(tmp, "decorate.py")  # (Triton reads a kernel's source from its file)
                with open(script, "w") as fh:
                    fh.write(CHILD)
                out = subprocess.run([sys.executable, script], env=env, cwd=tmp, capture_output=True,
                                     text=True, timeout=300)
                found[side].append(json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0
                                   else {"error": out.stderr[-300:]})
    if options.out:
        with open(options.out, "w") as fh:
            json.dump({"reps": reps, "sides": found}, fh, indent=1)
    for side, runs in found.items():
        times = ", ".join(f"{r['decorate_s']:.3f} s" if "decorate_s" in r else r["error"] for r in runs)
        print(f"{side:10s} decoration: {times}; worker: {sorted({str(r.get('worker')) for r in runs})}")


if __name__ == "__main__":
    main()
