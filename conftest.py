"""Test set-up shared by every test: the CPU interpreter unless a GPU is present.

This file sits at the repository root so that ``kernels`` (the real kernels the tests tune) is
importable without being installed.
"""

import os


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if "TRITON_INTERPRET" not in os.environ and not _has_gpu():
    os.environ["TRITON_INTERPRET"] = "1"
# Tests decide timing methods and printing themselves.
for var in ("TRITON_BENCH_METHOD", "TRITON_PRINT_AUTOTUNING", "TRITON_DIST_PLUGIN_DISABLE"):
    os.environ.pop(var, None)
