"""What the active backend offers a tile: cores to fill, on-chip memory, alignment, options."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import _compat


@dataclass(frozen=True)
class Hardware:
    backend: str  # "cuda", "npu" or "cpu" (the interpreter)
    cores: int  # programs needed to fill the machine (SMs, vector cores)
    onchip_bytes: int  # shared memory per block (CUDA), unified buffer (Ascend)
    max_tile_elems: int  # elements one program may hold at once (register/UB budget proxy)
    min_block: int
    align_bytes: int  # a block's bytes must be a multiple of this (Ascend: 32)
    warps: tuple  # num_warps to try (empty where the backend has no warps)
    stages: tuple  # num_stages to try for kernels with tl.dot
    max_candidates: int


@functools.cache
def _cuda(device: int) -> Hardware:
    import torch

    props = torch.cuda.get_device_properties(device)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024
    # 8192 elements per program and at most 8 warps: past that, memory-bound kernels lose on H100/H200.
    return Hardware("cuda", props.multi_processor_count, smem, 8192, 16, 16, (4, 8), (3, 4), 12)


def ub_kbytes(arch: str) -> int:
    """Unified buffer per vector core, in KB, by chip name.

    From Triton-Ascend's ``third_party/ascend/backend/utils.py`` (``ub_size_in_kbytes_for_arch``)
    and ``backend/runtime/utils.py`` (``_init_npu_params``): Ascend910_95 and Ascend950 have
    256 KB (and a 128 KB register file); Ascend910A/B/D, 910_93 and 310B have 192 KB. Unknown
    names get the 192 KB of the common parts.
    """
    if arch.startswith(("Ascend910_95", "Ascend950")):
        return 256
    return 192


@functools.cache
def _npu(device: int) -> Hardware:
    from triton.runtime.driver import driver

    props = driver.active.utils.get_device_properties(device)
    arch = str(getattr(driver.active.get_current_target(), "arch", ""))
    cores = props.get("num_vectorcore") or props.get("num_aicore") or 20
    # Blocks must be 32-byte aligned on every Ascend chip.
    return Hardware("npu", int(cores), ub_kbytes(arch) * 1024, 16384, 8, 32, (), (), 12)


_CPU = Hardware("cpu", 4, 64 * 1024, 1024, 16, 1, (), (), 4)


def current() -> Hardware:
    """The model of the machine kernels run on now (small under the interpreter: quick tuning)."""
    device = _compat.active_device()
    if device == "cpu":
        return _CPU
    if device == "npu":
        import torch

        return _npu(torch.npu.current_device())
    import torch

    return _cuda(torch.cuda.current_device())


def compile_options() -> set:
    """Options a ``triton.Config``/launch accepts on this backend besides kernel parameters."""
    import inspect

    names = {p for p in inspect.signature(_compat.Config.__init__).parameters
             if p not in ("self", "kwargs", "pre_hook", "ir_override")}
    if _compat.interpret():
        return names - {"bishengir_options"}
    try:
        import dataclasses

        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver

        options = make_backend(driver.active.get_current_target()).parse_options({})
        names |= {f.name for f in dataclasses.fields(options)}
    except Exception:  # an older Triton without these hooks: the Config fields are what we know
        pass
    return names - {"bishengir_options"}
