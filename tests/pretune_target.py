"""A module-level op for ``triton-dist-tune pretune`` to import: it launches the add kernel."""

import torch
import triton

from kernels import KERNELS

ADD = KERNELS["add"]
add = triton.autotune(configs=ADD.configs("cpu"), key=ADD.key)(ADD.jit)


def step(n, dtype="float32"):
    x = torch.randn(n, dtype=getattr(torch, dtype))
    return ADD.launch(add, x, x)


def sizes():
    return [{"n": n} for n in (300, 500)]
