"""Real Triton kernels for the tests, the benchmarks and the autotuning-plugin demo.

Each kernel lives in its own module (``kernels.scale``, ``kernels.add``,
``kernels.softmax``, ``kernels.layernorm``, ``kernels.matmul``) and provides:

* ``<name>_kernel`` -- a plain ``@triton.jit`` kernel (not autotuned) whose
  tiling parameters are ``tl.constexpr`` without defaults, so whoever launches
  it (a test, a benchmark, an autotuner) must choose them;
* ``<name>_configs(device)`` -- candidate ``triton.Config`` s: a few small ones
  for ``"cpu"`` (the Triton interpreter), a realistic sweep for a GPU;
* ``<name>(kernel, *inputs, **meta)`` -- a launcher taking the kernel object to
  run (plain jit, or any autotuned wrapper of it), with a grid computed from
  ``meta`` so it works in both cases;
* ``reference_<name>(*inputs)`` -- a torch reference in float32 math;
* ``make_inputs(size, device, dtype=None)`` -- deterministic inputs, ``size`` is
  ``"tiny"`` (interpreter-sized, deliberately not block multiples) or ``"gpu"``.

``KERNELS`` gathers them as :class:`KernelSpec` records so callers can loop over
every kernel generically::

    spec = KERNELS["matmul"]
    args = spec.make_inputs("tiny", "cpu")
    for cfg in spec.configs("cpu"):
        out = spec.launch(spec.jit, *args, **cfg.all_kwargs())
        torch.testing.assert_close(out, spec.reference(*args))
    tuned = triton.autotune(configs=spec.configs("cuda"), key=spec.key)(spec.jit)

The package deliberately re-exports modules, not functions: ``from .add import
add`` would shadow the ``kernels.add`` submodule with the launcher.
"""

from __future__ import annotations

import os as _os

import torch as _torch

# Without a GPU these kernels run on Triton's CPU interpreter; it must be chosen before any
# kernel is decorated, which happens as the submodules below are imported.
if "TRITON_INTERPRET" not in _os.environ and not _torch.cuda.is_available():
    _os.environ["TRITON_INTERPRET"] = "1"



from collections.abc import Callable
from dataclasses import dataclass

import triton

from . import add, layernorm, matmul, scale, softmax

__all__ = ["KERNELS", "KernelSpec", "add", "layernorm", "matmul", "scale", "softmax"]


@dataclass(frozen=True)
class KernelSpec:
    """Everything needed to launch, tune and check one kernel generically.

    ``launch(kernel, *make_inputs(...), **meta)`` runs it and
    ``reference(*make_inputs(...))`` gives the expected output; ``key`` names
    arguments of ``jit`` and is meant for ``triton.autotune(key=...)``.
    """

    name: str
    jit: triton.KernelInterface  # a JITFunction, or an InterpretedFunction under TRITON_INTERPRET=1
    configs: Callable[[str], list[triton.Config]]
    key: list[str]
    launch: Callable
    reference: Callable
    make_inputs: Callable[..., tuple]


KERNELS: dict[str, KernelSpec] = {
    "scale": KernelSpec("scale", scale.scale_kernel, scale.scale_configs, ["n"],
                        scale.scale, scale.reference_scale, scale.make_inputs),
    "add": KernelSpec("add", add.add_kernel, add.add_configs, ["n"],
                      add.add, add.reference_add, add.make_inputs),
    "softmax": KernelSpec("softmax", softmax.softmax_kernel, softmax.softmax_configs, ["n_cols"],
                          softmax.softmax, softmax.reference_softmax, softmax.make_inputs),
    "layernorm": KernelSpec("layernorm", layernorm.layernorm_kernel, layernorm.layernorm_configs, ["N"],
                            layernorm.layernorm, layernorm.reference_layernorm, layernorm.make_inputs),
    "matmul": KernelSpec("matmul", matmul.matmul_kernel, matmul.matmul_configs, ["M", "N", "K"],
                         matmul.matmul, matmul.reference_matmul, matmul.make_inputs),
}
