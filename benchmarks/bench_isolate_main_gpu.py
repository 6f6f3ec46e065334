"""A kernel defined in the main script, with a candidate that writes out of bounds, tuned on a GPU.

    python benchmarks/bench_isolate_main_gpu.py [--out benchmarks/results/isolate_main_h200.json] [--n N]

Most users' first kernels live in their main script. With ``TRITON_DIST_AUTOTUNE_ISOLATE=1`` the
isolation worker cannot import such a kernel (that would run the script again): it rebuilds it
from its source. This script's own kernel has one candidate that stores ``1 << 40`` elements past
its output (an illegal address) among good ones. It checks that tuning finishes with a good pick
and the right output, the bad candidate failing in the isolation worker (on a GPU the worker
reports the illegal address, then exits; under the interpreter it dies of it: "crashed the
isolation worker"); then that this process's CUDA context still works: another key of the
kernel, and a plain torch op. It prints a JSON result (and writes it to ``--out``); the exit
status is 0 only if every check held. Fresh Triton and plugin caches in a temporary directory.
Under ``TRITON_INTERPRET=1`` it runs on the CPU (use a small ``--n``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path(tempfile.mkdtemp(prefix="tdp-isolate-main-"))
os.environ.update({"TRITON_DIST_AUTOTUNE_ISOLATE": "1", "TRITON_CACHE_DIR": str(SCRATCH / "triton"),
                   "TRITON_DIST_AUTOTUNE_DIR": str(SCRATCH / "tune")})
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the settings above, which Triton and the plugin read at import)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
FAR = tl.constexpr(1 << 40)  # elements past the output: no allocation reaches that far
SCALE = 2.0

records: list = []


class Records:
    @tdp.hookimpl
    def tdp_on_tuned(self, record):
        records.append(record)


@triton.jit
def load_block(x, offs, n):
    return tl.load(x + offs, mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 256, "FAULT": 0}), triton.Config({"BLOCK": 1024, "FAULT": 1}),
           triton.Config({"BLOCK": 1024, "FAULT": 0}), triton.Config({"BLOCK": 2048, "FAULT": 0})]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scaled_copy(x, out, n, scale, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if FAULT == 1:
        tl.store(out + offs + FAR, load_block(x, offs, n), mask=offs < n)
    tl.store(out + offs, load_block(x, offs, n) * scale, mask=offs < n)


def launch(n: int) -> tuple[bool, float]:
    """Tune and run the kernel at size ``n``: (output correct, seconds)."""
    x = torch.randn(n, device=DEVICE)
    out = torch.zeros_like(x)
    started = time.perf_counter()
    scaled_copy[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n, SCALE)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return bool(torch.equal(out, x * SCALE)), time.perf_counter() - started


def describe(config: triton.Config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.kwargs.items())


def torch_works() -> bool:
    """A plain torch op, checked: fails if this process's CUDA context was lost."""
    a = torch.randn(256, 256, device=DEVICE)
    return bool(torch.allclose(a @ torch.eye(256, device=DEVICE), a))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--n", type=int, default=1 << 22 if DEVICE == "cuda" else 3000, help="elements (first key)")
    args = parser.parse_args()
    tdp.register(Records())
    started = time.perf_counter()
    correct, tune_s = launch(args.n)
    record = records[-1]
    failures = {describe(c): reason for c, reason in record.failures.items()}
    crash = failures.get(describe(CONFIGS[1]), "")
    correct_again, again_s = launch(args.n // 2 + 1)  # another key: tunes again, in this same process
    result = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)",
        "versions": {"triton": triton.__version__, "torch": torch.__version__, "python": sys.version.split()[0]},
        "n": args.n, "pick": record.best_config.kwargs, "correct": correct, "failures": failures,
        "crash_reason": crash, "isolation_notes": [n for n in record.notes if "isolat" in n],
        "tune_s": round(tune_s, 3), "another_key_correct": correct_again, "another_key_s": round(again_s, 3),
        "torch_op_after": torch_works(), "wall_s": round(time.perf_counter() - started, 3),
    }
    result["ok"] = bool(correct and result["pick"]["FAULT"] == 0 and "isolation worker" in crash
                        and len(failures) == 1 and correct_again and result["torch_op_after"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
