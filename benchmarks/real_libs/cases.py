"""What an op is: the ``Op`` a library function makes, the ``Case`` built on its inputs, and the
seeded input generators and autograd wrapper the op definitions share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass
class Case:
    """One op built on its inputs: ``fwd()`` returns what ``bwd`` and ``outputs`` take."""

    fwd: Callable[[], Any]
    outputs: Callable[[Any], dict]  # fwd's result -> named tensors (outputs and state updated in place)
    bwd: Optional[Callable[[Any], dict]] = None  # fwd's result -> named gradients
    step: Optional[Callable[[], Any]] = None  # one steady-state iteration; fwd (+ bwd) when None


@dataclass
class Op:
    name: str
    lib: str
    call: str
    shapes: str
    kernels: str  # the tuned kernels: tuner class, number of configs, hooks
    backward: bool  # whether the backward launches tuned kernels
    modules: tuple  # imported (in the mode's order) before any op runs
    build: Callable[[Any], Case]
    heavy: bool = False  # only in the groups heavy and all: too many configs to tune nine times in one run


# Inputs come from a generator of their own, seeded from the op's name: the default CUDA generator
# is left to the libraries (and is not disturbed by a CUDA graph capture that fails).
GEN: dict = {}


def randn(torch, *shape, dtype=None, scale=1.0, shift=0.0, grad=False):
    t = torch.randn(*shape, device="cuda", dtype=torch.float32, generator=GEN["cuda"]) * scale + shift
    t = t.to(dtype or torch.bfloat16)
    return t.requires_grad_(grad)


def rand(torch, *shape, low=0.0, high=1.0):
    return torch.rand(*shape, device="cuda", generator=GEN["cuda"]) * (high - low) + low


def randint(torch, low, high, shape, dtype):
    return torch.randint(low, high, shape, device="cuda", dtype=dtype, generator=GEN["cuda"])


def autograd_case(torch, fn: Callable, inputs: dict, dy) -> Case:
    """A Case for ``fn(*inputs)`` -> one tensor, with the gradients of ``inputs`` against ``dy``."""
    names, tensors = list(inputs), list(inputs.values())

    def bwd(y):
        return {f"d{n}": g for n, g in zip(names, torch.autograd.grad(y, tensors, dy))}

    def step():
        torch.autograd.grad(fn(*tensors), tensors, dy)

    return Case(fwd=lambda: fn(*tensors), outputs=lambda y: {"y": y}, bwd=bwd, step=step)
