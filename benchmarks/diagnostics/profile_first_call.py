"""Where the plugin's first call of the 48-config matmul spends its host time (GPU, empty cache)."""

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and its kin
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TRITON_DIST_AUTOTUNE_DIR"] = tempfile.mkdtemp()  # picks persist: start from none
import torch  # noqa: E402
import triton  # noqa: E402

sys.path.insert(0, ".")
import triton_dist_plugin  # noqa: E402,F401
from kernels import KERNELS  # noqa: E402

mm = KERNELS["matmul"]
a, b = mm.make_inputs("gpu", "cuda")
tuned = triton.autotune(configs=mm.configs("cuda"), key=mm.key)(mm.jit)
torch.cuda.synchronize()
profile = cProfile.Profile()
t0 = time.perf_counter()
profile.enable()
mm.launch(tuned, a, b)
torch.cuda.synchronize()
profile.disable()
print(f"first call {time.perf_counter() - t0:.2f}s (under cProfile)")
stats = pstats.Stats(profile)
stats.sort_stats("cumtime").print_stats(45)
