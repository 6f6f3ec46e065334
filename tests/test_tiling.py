"""configs=[] generation, hints, screening and the accuracy check, on real kernels.

Every generated candidate is checked for correct output: the tuners here run with
``check_accuracy=True`` and the tests launch each generated config against a torch reference.
"""

import inspect
import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE

from kernels import KERNELS
from triton_dist_plugin import activation
from triton_dist_plugin.tiling.analysis import analyse
from triton_dist_plugin.tiling.generate import GenerationError

#: On Triton-Ascend, ``hints=`` belong to Triton-Ascend's own autotune (see docs/ascend.md); the
#: plugin's hint vocabulary applies where Triton's autotune has no ``hints`` of its own.
plugin_hints = pytest.mark.skipif("hints" in inspect.signature(activation._ORIGINAL_AUTOTUNE).parameters,
                                  reason="hints= are Triton-Ascend's own here")


def generated(name, **kw):
    spec = KERNELS[name]
    return spec, triton.autotune(configs=[], key=spec.key, check_accuracy=True, **kw)(spec.jit)


def every_candidate_is_correct(spec, kernel, args, rtol=1e-4):
    ref = spec.reference(*args)
    assert kernel.configs_timings, "candidates were timed"
    for config in kernel.configs_timings:
        out = spec.launch(spec.jit, *args, **config.kwargs)  # the tiling (older interpreters reject options)
        torch.testing.assert_close(out, ref, rtol=rtol, atol=rtol)


def test_analysis_classifies_the_tiling_parameters():
    roles = {name: {t.name: (t.role, t.extent) for t in analyse(spec.jit).tiles.values()}
             for name, spec in KERNELS.items()}
    assert roles["add"] == {"BLOCK": ("program", "n")}
    assert roles["softmax"] == {"BLOCK_N": ("whole", "n_cols")}
    assert roles["layernorm"] == {"BLOCK_N": ("loop", "N")}
    assert roles["matmul"] == {"BLOCK_M": ("program", "M"), "BLOCK_N": ("program", "N"), "BLOCK_K": ("loop", "K")}
    assert "GROUP_M" not in roles["matmul"]  # a constexpr, but it sizes no block


def test_one_dimensional_generation(recorder):
    spec, kernel = generated("add")
    args = spec.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(spec.launch(kernel, *args), spec.reference(*args))
    assert 1 < len(kernel.configs_timings) <= 4
    assert all(math.log2(c.kwargs["BLOCK"]).is_integer() for c in kernel.configs_timings)
    assert any(note.startswith("kept") for note in recorder.records[0].notes)
    every_candidate_is_correct(spec, kernel, args)


@triton.jit
def _transpose_add(x, y, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    a = tl.load(x + rm[:, None] * N + rn[None, :], mask=mask)
    b = tl.load(y + rn[None, :] * M + rm[:, None], mask=mask)
    tl.store(out + rm[:, None] * N + rn[None, :], a + b, mask=mask)


def test_two_dimensional_generation():
    kernel = triton.autotune(configs=[], key=["M", "N"], check_accuracy=True)(_transpose_add)
    M, N = 40, 72
    x, y = torch.randn(M, N, device=DEVICE), torch.randn(N, M, device=DEVICE)
    out = torch.empty_like(x)
    grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]), triton.cdiv(N, m["BLOCK_N"]))  # noqa: E731
    kernel[grid](x, y, out, M, N)
    torch.testing.assert_close(out, x + y.T)
    assert all({"BLOCK_M", "BLOCK_N"} == set(c.kwargs) for c in kernel.configs_timings)
    for config in kernel.configs_timings:
        o = torch.empty_like(x)
        _transpose_add[grid](x, y, o, M, N, **config.kwargs)
        torch.testing.assert_close(o, x + y.T)


@triton.jit
def _row_softmax(out, inp, stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(inp + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@plugin_hints
def test_whole_row_reduction_covers_the_row_with_a_fixed_grid():
    kernel = triton.autotune(configs=[], key=["n_cols"], hints={"num_warps": [1, 2]}, check_accuracy=True)(
        _row_softmax)
    x = torch.randn(6, 100, device=DEVICE)
    y = torch.empty_like(x)
    kernel[(6,)](y, x, x.stride(0), 100)  # a fixed grid is fine: the block does not decide the programs
    torch.testing.assert_close(y, torch.softmax(x, -1))
    assert {c.kwargs["BLOCK_N"] for c in kernel.configs_timings} == {128}  # next power of two of 100
    assert sorted(c.num_warps for c in kernel.configs_timings) == [1, 2]


def test_looped_reduction_generation():
    spec, kernel = generated("layernorm")
    args = spec.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(spec.launch(kernel, *args), spec.reference(*args), rtol=1e-4, atol=1e-4)
    assert all(c.kwargs["BLOCK_N"] <= 128 for c in kernel.configs_timings)
    every_candidate_is_correct(spec, kernel, args)


@plugin_hints
def test_matmul_with_a_k_loop_needs_and_takes_a_hint_for_group_m():
    spec, kernel = generated("matmul")
    args = spec.make_inputs("tiny", DEVICE)
    with pytest.raises(GenerationError, match="GROUP_M is a tl.constexpr without a value.*hints="):
        spec.launch(kernel, *args)
    spec, kernel = generated("matmul", hints={"GROUP_M": [1, 4]})
    torch.testing.assert_close(spec.launch(kernel, *args), spec.reference(*args), rtol=1e-4, atol=1e-4)
    assert {c.kwargs["GROUP_M"] for c in kernel.configs_timings} == {1, 4}
    every_candidate_is_correct(spec, kernel, args)


def test_a_fixed_grid_that_would_be_wrong_is_an_error():
    spec, kernel = generated("add")
    x, y = spec.make_inputs("tiny", DEVICE)
    with pytest.raises(GenerationError, match="grid is fixed.*lambda meta"):
        kernel[(4,)](x, y, torch.empty_like(x), x.numel())


def test_parameters_passed_at_launch_or_defaulted_are_not_generated(recorder):
    spec, kernel = generated("add")
    x, y = spec.make_inputs("tiny", DEVICE)
    o = torch.empty_like(x)
    kernel[lambda m: (triton.cdiv(x.numel(), 128),)](x, y, o, x.numel(), BLOCK=128)
    torch.testing.assert_close(o, x + y)
    assert not recorder.timed  # nothing left to choose

    @triton.autotune(configs=[], key=["n"])
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr = 64):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    z = torch.empty_like(x)
    copy[(triton.cdiv(x.numel(), 64),)](x, z, x.numel())
    torch.testing.assert_close(z, x)
    assert not recorder.timed


@plugin_hints
def test_hints_cross_explicit_configs_and_unknown_hints_are_errors():
    spec = KERNELS["add"]
    args = spec.make_inputs("tiny", DEVICE)
    kernel = triton.autotune(configs=spec.configs(DEVICE)[:2], key=spec.key, hints={"num_warps": [1, 2]})(spec.jit)
    spec.launch(kernel, *args)
    assert len(kernel.configs_timings) == 4
    bad = triton.autotune(configs=[], key=spec.key, hints={"multibufer": [True]})(spec.jit)
    with pytest.raises(ValueError, match="multibufer is neither a parameter of the kernel nor a compile option"):
        spec.launch(bad, *args)


def test_nothing_valid_is_an_error_asking_for_configs():
    kernel = triton.autotune(configs=[], key=["n_cols"])(_row_softmax)
    x = torch.randn(1, 5000, device=DEVICE)  # one row of 5000 needs a block of 8192: over the budget
    with pytest.raises(GenerationError, match="write triton.Config candidates"):
        kernel[(1,)](torch.empty_like(x), x, x.stride(0), 5000)


def test_print_autotuning_shows_why_candidates_were_kept_or_dropped(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    spec, kernel = generated("add")
    spec.launch(kernel, *spec.make_inputs("tiny", DEVICE))
    out = capsys.readouterr().out
    assert "kept BLOCK=" in out and "dropped BLOCK=" in out


@triton.jit
def _buggy_copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    if BLOCK == 64:
        v = v * 2  # a candidate that runs fine and computes the wrong thing
    tl.store(y + offs, v, mask=offs < n)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_accuracy_check_rejects_a_wrong_candidate(how, monkeypatch, recorder):
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
    if how == "argument":
        kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(_buggy_copy)
    else:
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CHECK_ACCURACY", "1")
        kernel = triton.autotune(configs=configs, key=["n"])(_buggy_copy)
    x = torch.randn(300, device=DEVICE)
    y = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
    torch.testing.assert_close(y, x)
    assert kernel.best_config.kwargs["BLOCK"] != 64
    assert "wrong result: argument 'y'" in recorder.records[0].failures[configs[1]]
    assert configs[1] not in {r.config for r in recorder.timed}  # never timed


def test_screening_round_then_full_measurement_of_the_best(recorder):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]
    kernel = triton.autotune(configs=configs, key=["n"])(KERNELS["add"].jit)
    x = torch.randn(2000, device=DEVICE)
    y = torch.zeros_like(x)
    kernel[lambda m: (triton.cdiv(2000, m["BLOCK"]),)](x, x, y, 2000)
    torch.testing.assert_close(y, 2 * x)
    screened = [r.config for r in recorder.timed if r.n_repeat == 5]
    second = [r.config for r in recorder.timed if r.n_repeat == 25]
    full = [r.config for r in recorder.timed if r.n_repeat is None]
    assert len(screened) == 9 and len(second) == 3 and len(full) == 2
    assert set(full) <= set(second) <= set(screened)
    # The second round's two fastest go on to the full measurement.
    ranked = sorted(second, key=lambda c: kernel.configs_timings[c][0] if c not in full else -1)
    assert set(ranked[:2]) == set(full)
    assert kernel.best_config in full
    assert len(kernel.configs_timings) == 9


def _plan(name, shape_args, hw, hints=None):
    from triton_dist_plugin.tiling.generate import plan

    spec = KERNELS[name]
    an = analyse(spec.jit)
    nargs = dict(zip(an.params, shape_args))
    return plan(None, an, nargs, {"grid": lambda m: (1,)}, hints or {}, hw=hw)


def test_cuda_model_keeps_matmul_candidates_within_shared_memory_and_count():
    # The model of an H200 as hardware.py reads it there (132 SMs, 227 KB opt-in shared memory).
    from triton_dist_plugin.tiling.hardware import Hardware

    h200 = Hardware("cuda", 132, 232448, 8192, 16, 16, (4, 8), (3, 4), 12)
    a = torch.empty(4096, 4096, dtype=torch.float16)
    result = _plan("matmul", (a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1), h200, {"GROUP_M": [8]})
    assert 1 < len(result.configs) <= 12
    for c in result.configs:
        k = c.kwargs
        assert c.num_stages * (k["BLOCK_M"] * k["BLOCK_K"] + k["BLOCK_K"] * k["BLOCK_N"]) * 2 <= 232448
        assert k["BLOCK_M"] * k["BLOCK_N"] <= 256 * 128 and k["GROUP_M"] == 8
    assert any("shared memory" in n or "registers" in n for n in result.notes)


@pytest.mark.parametrize("m, n, k, best", [
    (4096, 4096, 4096, (128, 256, 64, 8, 4)),
    (512, 4096, 4096, (128, 128, 64, 8, 4)),
    (8192, 2048, 4096, (128, 256, 64, 8, 4)),
    (1024, 1024, 1024, (64, 128, 64, 4, 4)),
])
def test_generated_matmul_space_holds_the_exhaustive_best(m, n, k, best):
    """Each shape's fastest config of the 48-config expert space, every config timed on an H200
    (benchmarks/results/model_truth_h200.json), is among the generated candidates. A tile that all
    but fills the machine (128 programs on 132 SMs) is not ranked below smaller ones that fill it
    more: 128x128 at 512x4096x4096, 64x128 at 1024^3."""
    from triton_dist_plugin.tiling.hardware import Hardware

    h200 = Hardware("cuda", 132, 232448, 8192, 16, 16, (4, 8), (3, 4), 12)
    a = torch.empty(1, dtype=torch.float16)
    result = _plan("matmul", (a, a, a, m, n, k, k, 1, n, 1, n, 1), h200, {"GROUP_M": [8]})
    got = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages)
           for c in result.configs}
    assert best in got, sorted(got)


@pytest.mark.parametrize("cores", [108, 114, 132, 304])
def test_generated_matmul_space_keeps_large_tiles_on_every_core_count(cores):
    """On GPUs of other sizes, a large matmul keeps its large tiles, and an empty one (M=0, an expert
    with no tokens) still gets candidates."""
    from triton_dist_plugin.tiling.hardware import Hardware

    gpu = Hardware("cuda", cores, 232448, 8192, 16, 16, (4, 8), (3, 4), 12)
    a = torch.empty(1, dtype=torch.float16)
    large = _plan("matmul", (a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1), gpu, {"GROUP_M": [8]})
    assert {(128, 256), (128, 128)} <= {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in large.configs}
    assert _plan("matmul", (a, a, a, 0, 64, 64, 64, 1, 64, 1, 64, 1), gpu, {"GROUP_M": [8]}).configs


def test_ascend_model_keeps_blocks_32_byte_aligned_and_within_the_unified_buffer():
    # The Ascend model as hardware.py builds it (no NPU here: the model is exercised directly).
    from triton_dist_plugin.tiling.hardware import Hardware

    npu = Hardware("npu", 40, 192 * 1024, 16384, 8, 32, (), (), 12)
    x = torch.empty(1 << 20, dtype=torch.float16)
    result = _plan("add", (x, x, x, 1 << 20), npu)
    assert result.configs
    for c in result.configs:
        assert (c.kwargs["BLOCK"] * 2) % 32 == 0 and c.kwargs["BLOCK"] * 2 * 3 <= 192 * 1024
    assert any("not a multiple of 32" in n for n in result.notes)  # 8 fp16 elements = 16 bytes


def test_deeper_pipelines_are_dropped_where_shared_memory_is_small():
    from triton_dist_plugin.tiling.hardware import Hardware

    small = Hardware("cuda", 108, 100 * 1024, 8192, 16, 16, (4, 8), (3, 4), 12)
    a = torch.empty(4096, 4096, dtype=torch.float16)
    result = _plan("matmul", (a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1), small, {"GROUP_M": [8]})
    assert result.configs
    for c in result.configs:
        k = c.kwargs
        assert c.num_stages * (k["BLOCK_M"] * k["BLOCK_K"] + k["BLOCK_K"] * k["BLOCK_N"]) * 2 <= 100 * 1024


def test_ascend_unified_buffer_follows_the_chip_name():
    from triton_dist_plugin.tiling.hardware import ub_kbytes

    assert ub_kbytes("Ascend950PR") == 256 and ub_kbytes("Ascend910_9599") == 256
    assert ub_kbytes("Ascend910B4") == 192 and ub_kbytes("Ascend910_9382") == 192
