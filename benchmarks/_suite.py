"""A suite of autotuned Triton kernels, each with its config space and two or more shapes, for the
benchmarks that need many kernels tuned alike (``model_truth_gpu.py``, ``bench_steady_gpu.py``).

    from _suite import cases
    for case in cases():             # or select("matmul,add/2^20")
        built = case.build()         # the autotuned kernel (decorated once per kernel) and inputs
        built.run()                  # one call through it: tunes this shape's key
        built.check()                # its output against torch
        built.direct(built.configs[0])()   # one config launched on the plain kernel, no tuner

Kernels (each keyed on its shape arguments, so every shape is a key of its own):

- ``matmul``: the 48-config fp16 matmul of ``kernels/matmul.py``, at 4096^3, 512x4096x4096,
  8192x2048x4096 and 1024^3 (M x N x K);
- ``add``: ``x + y``, ``BLOCK`` 256-8192 x ``num_warps`` 1-16 (30 configs), fp16, 2^16, 2^20, 2^26;
- ``softmax``: a row softmax that walks the row in ``BLOCK_N`` chunks (an online max and sum, then
  a second pass), ``BLOCK_N`` 256-4096 x ``num_warps`` 1-16 (25), 8192x3000 fp32 and 4096x16384 fp16;
- ``layernorm``: LayerNorm forward walking the row in ``BLOCK_N`` chunks, 256-8192 x ``num_warps``
  1-16 (30), fp16 8192x4096 and 2048x12288;
- ``rowsum``: the sum over the last dim with a 2-D tile, ``BLOCK_M`` rows per program (1-32) x
  ``BLOCK_N`` columns per step (128-2048) x ``num_warps`` 2, 4, 8 (90), fp16 16384x4096 and 1024x65536;
- ``transpose``: ``y = x.T`` with 2-D program tiles, ``BLOCK_M`` x ``BLOCK_N`` 16-128 x ``num_warps``
  2, 4, 8 (48), fp16 8192x8192 and 16384x2048;
- ``matmul_large``: the 1,152-config space of ``_search.large_space`` at 4096^3;
- ``fla_l2norm``: fla's own autotuned L2-norm forward for rows longer than 512 (one program per
  row, ``num_warps`` 1-32: its 6 configs, key ``D``), bf16 8192x4096 and 32768x1024. A library's
  kernel: its cases are left out of ``cases()`` unless it is named, and building one needs the
  library installed (``fla-core``);
- ``liger_dyt``: Liger-Kernel's own autotuned DyT forward (``tanh(alpha x) gamma + beta``, one
  program per ``BLOCK_N`` columns of a row: its 18 configs, key ``N``), bf16 4096x4096 and 8192x8192,
  launched as ``liger_dyt_fwd`` launches it (``liger-kernel``);
- ``gems_layernorm``: FlagGems's own autotuned LayerNorm forward for rows longer than 4096
  (``layer_norm_loop_kernel``, one program per row walking it in ``TILE_N`` chunks: its 12 configs
  from FlagGems's NVIDIA tuning table, key ``M, N``), fp16 4096x8192 and 1024x16384, launched as
  ``flag_gems.layer_norm`` launches it (``flag-gems``, which imports only on a CUDA machine: GPU
  only).

The kernels below are plain functions at module level (their sources are what ``inspect.getsource``
and the plugin's source analysis read); ``triton.jit`` is applied when a kernel is first built, so
importing this module imports neither torch nor Triton. With ``TDP_SUITE_TINY=1`` (or
``cases(tiny=True)``) every case has interpreter-sized inputs and five configs of its space, for
``TRITON_INTERPRET=1`` on a CPU; otherwise a case needs a CUDA GPU and says so when built. Matmul
and LayerNorm are the kernels of ``kernels/`` (imported when first built).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

TINY_ENV = "TDP_SUITE_TINY"
TINY_CONFIGS = 5  # configs per kernel in tiny mode (enough for the plugin's screening: 4 or more)

# triton.language, bound by ``_triton()`` before any kernel below is decorated or compiled (the
# kernels read it as a global, as any kernel written with ``import triton.language as tl`` does).
tl: Any = None


# ------------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------------


def suite_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def suite_softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_N: tl.constexpr):
    # One program per row. First pass: a running max and a running sum of exponentials per lane
    # (rescaled whenever the max grows); second pass: the normalised exponentials.
    row = tl.program_id(0)
    in_row = in_ptr + row * in_stride
    out_row = out_ptr + row * out_stride
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        x = tl.load(in_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        base = tl.where(m_new == -float("inf"), 0.0, m_new)  # a lane that has seen no column yet
        s = s * tl.exp(m - base) + tl.exp(x - base)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    for off in range(0, n_cols, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(in_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def suite_rowsum_kernel(x_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # BLOCK_M rows per program, walked BLOCK_N columns at a time into a 2-D accumulator.
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :], mask=mask, other=0.0)
        acc += x.to(tl.float32)
    total = tl.sum(acc, axis=1)
    tl.store(out_ptr + rows, total, mask=rows < M)


def suite_transpose_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # y[N, M] = x[M, N].T, one BLOCK_M x BLOCK_N tile per program.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask)
    tl.store(y_ptr + cols[None, :] * stride_yn + rows[:, None], x, mask=mask)


# ------------------------------------------------------------------------------------------------
# launchers: ``launch(kernel, *inputs, **meta)`` for a tuned kernel (meta empty) or the plain one
# ------------------------------------------------------------------------------------------------


def launch_add(kernel, x, y, **meta):
    import torch
    import triton

    out = torch.empty_like(x)
    n = x.numel()
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n, **meta)
    return out


def launch_softmax(kernel, x, **meta):
    import torch

    out = torch.empty_like(x)
    n_rows, n_cols = x.shape
    kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_rows, n_cols, **meta)
    return out


def launch_layernorm(kernel, x, w, b, **meta):
    from kernels.layernorm import layernorm

    return layernorm(kernel, x, w, b, **meta)


def launch_rowsum(kernel, x, **meta):
    import torch
    import triton

    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=torch.float32)
    kernel[lambda m: (triton.cdiv(M, m["BLOCK_M"]),)](x, out, M, N, x.stride(0), **meta)
    return out


def launch_transpose(kernel, x, **meta):
    import torch
    import triton

    M, N = x.shape
    y = torch.empty((N, M), device=x.device, dtype=x.dtype)
    kernel[lambda m: (triton.cdiv(M, m["BLOCK_M"]), triton.cdiv(N, m["BLOCK_N"]))](
        x, y, M, N, x.stride(0), y.stride(0), **meta)
    return y


def launch_matmul(kernel, a, b, **meta):
    from kernels.matmul import matmul

    return matmul(kernel, a, b, **meta)


# ------------------------------------------------------------------------------------------------
# inputs and references
# ------------------------------------------------------------------------------------------------


def _dtype(name: str):
    import torch

    return {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[name]


def _randn(shape, dtype, device, gen):
    import torch

    return torch.randn(shape, device=device, dtype=torch.float32, generator=gen).to(_dtype(dtype))


def inputs_matmul(dims, dtype, device, gen):
    m, n, k = dims
    return _randn((m, k), dtype, device, gen), _randn((k, n), dtype, device, gen)


def inputs_add(dims, dtype, device, gen):
    return _randn(dims, dtype, device, gen), _randn(dims, dtype, device, gen)


def inputs_rows(dims, dtype, device, gen):
    return (_randn(dims, dtype, device, gen),)


def inputs_layernorm(dims, dtype, device, gen):
    import torch

    n = dims[1]
    w = (1 + 0.1 * torch.randn(n, device=device, generator=gen)).to(_dtype(dtype))
    b = (0.1 * torch.randn(n, device=device, generator=gen)).to(_dtype(dtype))
    return _randn(dims, dtype, device, gen), w, b


def ref_matmul(a, b):
    return (a.float() @ b.float()).to(a.dtype)


def ref_add(x, y):
    return (x.float() + y.float()).to(x.dtype)


def ref_softmax(x):
    import torch

    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def ref_layernorm(x, w, b):
    from kernels.layernorm import reference_layernorm

    return reference_layernorm(x, w, b)


def ref_rowsum(x):
    return x.float().sum(dim=-1)


def ref_transpose(x):
    return x.t().contiguous()


def launch_l2norm(kernel, x, **meta):  # as fla's ``l2norm_fwd`` launches it for rows longer than 512
    import torch

    triton = _triton()
    rows, d = x.shape
    y, rstd = torch.empty_like(x), torch.empty(rows, dtype=torch.float32, device=x.device)
    kernel[(rows,)](x=x, y=y, rstd=rstd, eps=1e-6, D=d, BD=triton.next_power_of_2(d), **meta)
    return y


def launch_dyt(kernel, x, alpha, gamma, beta, **meta):  # as Liger's ``liger_dyt_fwd`` launches it
    import torch

    triton = _triton()
    rows, n = x.shape
    y = torch.empty_like(x)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK_N"]), rows)](x, y, alpha, gamma, beta, True, n, **meta)
    return y


def inputs_dyt(dims, dtype, device, gen):
    import torch

    n = dims[1]
    alpha = (0.5 + 0.1 * torch.randn(1, device=device, generator=gen)).to(_dtype(dtype))
    gamma = (1 + 0.1 * torch.randn(n, device=device, generator=gen)).to(_dtype(dtype))
    beta = (0.1 * torch.randn(n, device=device, generator=gen)).to(_dtype(dtype))
    return _randn(dims, dtype, device, gen), alpha, gamma, beta


def ref_dyt(x, alpha, gamma, beta):
    import torch

    return (torch.tanh(alpha.float() * x.float()) * gamma.float() + beta.float()).to(x.dtype)


def launch_gems_layernorm(kernel, x, w, b, **meta):  # as ``flag_gems.layer_norm`` launches it for N > 4096
    import torch

    rows, n = x.shape
    y = torch.empty_like(x)
    mean, rstd = (torch.empty(rows, dtype=x.dtype, device=x.device) for _ in range(2))
    kernel[(rows, 1, 1)](x, y, w, b, mean, rstd, rows, n, 1e-5, **meta)
    return y


def ref_gems_layernorm(x, w, b):
    import torch

    return torch.nn.functional.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(), 1e-5).to(x.dtype)


def ref_l2norm(x):
    import torch

    xf = x.float()
    return (xf / torch.sqrt((xf * xf).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


# ------------------------------------------------------------------------------------------------
# config spaces
# ------------------------------------------------------------------------------------------------


def space_matmul() -> list:
    from kernels.matmul import matmul_configs

    return matmul_configs("cuda")  # the 48 configs the benchmarks share


def space_matmul_large() -> list:
    from _search import large_space

    return large_space()


def space_add() -> list:
    import triton

    return [triton.Config({"BLOCK": b}, num_warps=w)
            for b, w in itertools.product((256, 512, 1024, 2048, 4096, 8192), (1, 2, 4, 8, 16))]


def space_softmax() -> list:
    import triton

    return [triton.Config({"BLOCK_N": b}, num_warps=w)
            for b, w in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8, 16))]


def space_layernorm() -> list:
    import triton

    return [triton.Config({"BLOCK_N": b}, num_warps=w)
            for b, w in itertools.product((256, 512, 1024, 2048, 4096, 8192), (1, 2, 4, 8, 16))]


def space_rowsum() -> list:
    import triton

    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w)
            for m, n, w in itertools.product((1, 2, 4, 8, 16, 32), (128, 256, 512, 1024, 2048), (2, 4, 8))]


_FLA_L2NORM = "fla.modules.norm.l2norm:l2norm_fwd_kernel_row"


_LIGER_DYT = "liger_kernel.ops.dyt:_dyt_fwd_kernel"
_GEMS_LAYERNORM = "flag_gems.ops.layernorm:layer_norm_loop_kernel"


def space_fla_l2norm() -> list:
    return list(_library_tuner(_FLA_L2NORM).configs)  # the library's own configs, as it tunes them


def space_liger_dyt() -> list:
    return list(_library_tuner(_LIGER_DYT).configs)


def space_gems_layernorm() -> list:
    return list(_library_tuner(_GEMS_LAYERNORM).configs)


def _library_object(ref: str) -> Any:
    import importlib

    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def _library_tuner(ref: str) -> Any:
    """A library's autotuner of ``ref``, under a wrapper of the library's own (FlagGems's ``LibEntry``)."""
    from triton.runtime.autotuner import Autotuner

    found = _library_object(ref)
    while not isinstance(found, Autotuner) and _wrapper(found):
        found = found.fn
    return found


def _wrapper(found: Any) -> bool:
    """A tuner or heuristics layer, or FlagGems's ``LibEntry``: what a library puts over its kernel."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    return isinstance(found, (Autotuner, Heuristics)) or type(found).__name__ == "LibEntry"


def space_transpose() -> list:
    import triton

    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w)
            for m, n, w in itertools.product((16, 32, 64, 128), (16, 32, 64, 128), (2, 4, 8))]


# ------------------------------------------------------------------------------------------------
# the suite
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Any  # the plain kernel function here, or ``"module:name"`` of a jit kernel of ``kernels/``
    space: Callable[[], list]
    key: tuple  # the autotune key: the shape arguments
    launch: Callable
    inputs: Callable  # (dims, dtype, device, generator) -> inputs
    reference: Callable  # inputs -> the expected output
    shapes: tuple  # (label, dims, dtype), on a GPU
    tiny: tuple  # the same number of shapes, interpreter-sized (no dims a multiple of the blocks)
    tol: tuple = (1e-2, 1e-2)  # rtol, atol of ``check``
    library: str = ""  # the distribution a library's kernel comes from: its cases only where named

    def jit(self):
        """The plain ``@triton.jit`` kernel (decorated once per process; a library's autotuned
        kernel, the ``@triton.jit`` function under its tuner)."""
        triton = _triton()
        if isinstance(self.fn, str):
            found = _library_object(self.fn)
            while _wrapper(found):  # the library's tuner, and its own wrapper around it: the kernel under them
                found = found.fn
            return found
        if self.fn.__name__ not in _JITS:
            _JITS[self.fn.__name__] = triton.jit(self.fn)
        return _JITS[self.fn.__name__]


_MATMUL_SHAPES = (("4096x4096x4096", (4096, 4096, 4096), "fp16"), ("512x4096x4096", (512, 4096, 4096), "fp16"),
                  ("8192x2048x4096", (8192, 2048, 4096), "fp16"), ("1024x1024x1024", (1024, 1024, 1024), "fp16"))
_MATMUL_TINY = (("64x48x80", (64, 48, 80), "fp32"), ("16x72x40", (16, 72, 40), "fp32"),
                ("96x32x48", (96, 32, 48), "fp32"), ("24x24x24", (24, 24, 24), "fp16"))

_MATMUL = "kernels.matmul:matmul_kernel"

KERNELS: dict = {k.name: k for k in (
    Kernel("matmul", _MATMUL, space_matmul, ("M", "N", "K"), launch_matmul, inputs_matmul, ref_matmul,
           _MATMUL_SHAPES, _MATMUL_TINY, tol=(1e-2, 0.25)),
    Kernel("add", suite_add_kernel, space_add, ("n",), launch_add, inputs_add, ref_add,
           (("2^16", (2**16,), "fp16"), ("2^20", (2**20,), "fp16"), ("2^26", (2**26,), "fp16")),
           (("1000", (1000,), "fp16"), ("3001", (3001,), "fp16"), ("777", (777,), "fp32"))),
    Kernel("softmax", suite_softmax_kernel, space_softmax, ("n_rows", "n_cols"), launch_softmax, inputs_rows,
           ref_softmax, (("8192x3000 fp32", (8192, 3000), "fp32"), ("4096x16384 fp16", (4096, 16384), "fp16")),
           (("6x700 fp32", (6, 700), "fp32"), ("3x1300 fp16", (3, 1300), "fp16")), tol=(1e-3, 1e-4)),
    Kernel("layernorm", "kernels.layernorm:layernorm_kernel", space_layernorm, ("N",), launch_layernorm,
           inputs_layernorm,
           ref_layernorm, (("8192x4096", (8192, 4096), "fp16"), ("2048x12288", (2048, 12288), "fp16")),
           (("6x700", (6, 700), "fp16"), ("3x1300", (3, 1300), "fp16"))),
    Kernel("rowsum", suite_rowsum_kernel, space_rowsum, ("M", "N"), launch_rowsum, inputs_rows, ref_rowsum,
           (("16384x4096", (16384, 4096), "fp16"), ("1024x65536", (1024, 65536), "fp16")),
           (("37x300", (37, 300), "fp16"), ("5x2100", (5, 2100), "fp16")), tol=(1e-3, 1e-2)),
    Kernel("transpose", suite_transpose_kernel, space_transpose, ("M", "N"), launch_transpose, inputs_rows,
           ref_transpose, (("8192x8192", (8192, 8192), "fp16"), ("16384x2048", (16384, 2048), "fp16")),
           (("40x72", (40, 72), "fp16"), ("130x20", (130, 20), "fp16")), tol=(0.0, 0.0)),
    Kernel("matmul_large", _MATMUL, space_matmul_large, ("M", "N", "K"), launch_matmul, inputs_matmul, ref_matmul,
           (_MATMUL_SHAPES[0],), (("64x64x64", (64, 64, 64), "fp32"),), tol=(1e-2, 0.25)),
    Kernel("fla_l2norm", _FLA_L2NORM, space_fla_l2norm, ("D",), launch_l2norm, inputs_rows, ref_l2norm,
           (("8192x4096 bf16", (8192, 4096), "bf16"), ("32768x1024 bf16", (32768, 1024), "bf16")),
           (("6x700 fp32", (6, 700), "fp32"), ("3x1300 fp32", (3, 1300), "fp32")), tol=(2e-2, 1e-2),
           library="fla-core"),
    Kernel("liger_dyt", _LIGER_DYT, space_liger_dyt, ("N",), launch_dyt, inputs_dyt, ref_dyt,
           (("4096x4096 bf16", (4096, 4096), "bf16"), ("8192x8192 bf16", (8192, 8192), "bf16")),
           (("6x700 fp32", (6, 700), "fp32"), ("3x1300 fp32", (3, 1300), "fp32")), tol=(2e-2, 2e-2),
           library="liger-kernel"),
    Kernel("gems_layernorm", _GEMS_LAYERNORM, space_gems_layernorm, ("M", "N"), launch_gems_layernorm,
           inputs_layernorm, ref_gems_layernorm,
           (("4096x8192 fp16", (4096, 8192), "fp16"), ("1024x16384 fp16", (1024, 16384), "fp16")),
           (("6x700 fp32", (6, 700), "fp32"), ("3x1300 fp32", (3, 1300), "fp32")), tol=(1e-2, 1e-2),
           library="flag-gems"),
)}

_JITS: dict = {}  # kernel function name -> its triton.jit
_TUNERS: dict = {}  # (kernel, tiny) -> the autotuned kernel, shared by that kernel's shapes


def tiny_default() -> bool:
    return os.environ.get(TINY_ENV) == "1"


def device() -> str:
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def _triton():
    """Triton, once this process can run the kernels; binds ``tl`` for the kernels above."""
    global tl
    import torch

    if device() == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the suite's kernels need a CUDA GPU; on a CPU set TRITON_INTERPRET=1 "
                           f"(and {TINY_ENV}=1 for interpreter-sized cases)")
    import triton
    import triton.language as language

    tl = language
    return triton


def configs_of(kernel: Kernel, tiny: bool) -> list:
    """The kernel's space; in tiny mode ``TINY_CONFIGS`` of it, spread over the whole list."""
    space = kernel.space()
    if not tiny or len(space) <= TINY_CONFIGS:
        return space
    step = (len(space) - 1) / (TINY_CONFIGS - 1)
    return [space[round(i * step)] for i in range(TINY_CONFIGS)]


def tuner(kernel: Kernel, tiny: bool):
    """The kernel's ``@triton.autotune`` over its space, keyed on its shape arguments (one per process)."""
    if (kernel.name, tiny) not in _TUNERS:
        triton = _triton()
        _TUNERS[kernel.name, tiny] = triton.autotune(configs=configs_of(kernel, tiny), key=list(kernel.key))(
            kernel.jit())
    return _TUNERS[kernel.name, tiny]


@dataclass
class Built:
    """A case ready to run: its autotuned kernel, inputs, and calls."""

    case: Case
    tuner: Any
    configs: list
    kernel_name: str  # the compiled kernel's name (as the CUDA profiler records it)
    inputs: tuple
    run: Callable[[], Any]  # one call through the autotuned kernel (the first one tunes this key)

    def direct(self, config: Any) -> Callable[[], Any]:
        """One launch of ``config`` on the plain kernel (no tuner in the way)."""
        spec, jit, meta = KERNELS[self.case.kernel], KERNELS[self.case.kernel].jit(), config.all_kwargs()
        return lambda: spec.launch(jit, *self.inputs, **meta)

    def check(self) -> None:
        """The tuned kernel's output against torch's (raises ``AssertionError`` where they differ)."""
        import torch

        spec = KERNELS[self.case.kernel]
        rtol, atol = spec.tol
        if spec.reference is ref_matmul:
            atol *= math.sqrt(self.case.dims[2] / 64)  # fp16 rounding grows with K
        torch.testing.assert_close(self.run(), spec.reference(*self.inputs), rtol=rtol, atol=atol)

    def pick(self) -> Optional[int]:
        """The position in ``configs`` of the tuner's pick (None before tuning)."""
        return index_of(self.configs, getattr(self.tuner, "best_config", None))


def index_of(configs: list, config: Any) -> Optional[int]:
    if config is None:
        return None
    want = (config.kwargs, config.num_warps, config.num_stages)
    return next((i for i, c in enumerate(configs) if (c.kwargs, c.num_warps, c.num_stages) == want), None)


@dataclass(frozen=True)
class Case:
    kernel: str
    position: int  # which of the kernel's shapes (the same position in tiny mode)
    shape: str  # its label
    dims: tuple
    dtype: str
    tiny: bool = False

    @property
    def name(self) -> str:
        return f"{self.kernel}/{self.shape}"

    def build(self, seed: int = 0) -> Built:
        import torch

        spec = KERNELS[self.kernel]
        tuned = tuner(spec, self.tiny)
        dev = device()
        inputs = spec.inputs(self.dims, self.dtype, dev, torch.Generator(device=dev).manual_seed(seed))
        name = getattr(spec.jit(), "fn", spec.jit()).__name__
        return Built(self, tuned, tuned.configs, name, inputs, lambda: spec.launch(tuned, *inputs))


def cases(tiny: Optional[bool] = None, kernels: Optional[list] = None, libraries: bool = False) -> list:
    """Every case of the suite (of ``kernels`` only, if given), in order; a library's kernels only
    where named or ``libraries``."""
    tiny = tiny_default() if tiny is None else tiny
    found = []
    for spec in KERNELS.values():
        if (kernels is not None and spec.name not in kernels) or (kernels is None and spec.library and not libraries):
            continue
        for position, (label, dims, dtype) in enumerate(spec.tiny if tiny else spec.shapes):
            found.append(Case(spec.name, position, label, tuple(dims), dtype, tiny))
    return found


def select(spec: str, tiny: Optional[bool] = None) -> list:
    """Cases by comma-separated kernel names (every shape) or case names (``add/2^20``); in tiny mode a
    case name picks the tiny shape at the same position."""
    every = cases(tiny=False, libraries=True)
    small = cases(tiny=True, libraries=True)
    tiny = tiny_default() if tiny is None else tiny
    chosen: list = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in KERNELS:
            chosen += [c for c in (small if tiny else every) if c.kernel == item]
            continue
        found = [i for i, c in enumerate(every) if c.name == item] or [i for i, c in enumerate(small) if c.name == item]
        if not found:
            raise SystemExit(f"unknown suite kernel or case {item!r}; kernels: {', '.join(KERNELS)}; cases look like "
                             f"{every[0].name}")
        chosen.append((small if tiny else every)[found[0]])
    return list(dict.fromkeys(chosen))
