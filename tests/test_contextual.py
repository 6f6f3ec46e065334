"""Contextual autotune on real kernels under the interpreter."""

import threading

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE

from triton_dist_plugin.autotuner import contextual_autotune

BLOCK = 512


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # logs go to ./.autotune_logs
    return tmp_path


def seen_by(log):
    return lambda nargs: log.append(nargs["n"])


def make_scale(log=None):
    hook = seen_by(log) if log is not None else None

    @triton.autotune(configs=[triton.Config({"BLOCK": BLOCK}, num_warps=w, pre_hook=hook) for w in (4, 8)], key=["n"])
    @triton.jit
    def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(y_ptr + offsets, alpha * x, mask=mask)

    return scale_kernel


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128, 256)], key=["n"])
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


def test_seed_run_scale_example(in_tmp):
    scale_kernel = make_scale()

    @contextual_autotune(is_dist=False, n_repeat=3, n_warmup=2)
    def run_scale(x, alpha):
        y = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), BLOCK),)
        scale_kernel[grid](x, y, alpha, x.numel())
        return y

    x = torch.randn(1500, device=DEVICE)
    y = run_scale(x, 3.0)
    torch.testing.assert_close(y, 3.0 * x)
    assert list(scale_kernel.cache) == [(1500, "torch.float32", "torch.float32")]
    assert set(c.num_warps for c in scale_kernel.configs_timings) == {4, 8}
    log = (in_tmp / ".autotune_logs" / "rank-0.log").read_text()
    assert "scale_kernel key=(1500" in log and "round 4 timed" in log and "average" in log
    assert "best config: candidate" in log


def test_two_kernels_and_one_kernel_twice_with_current_arguments(in_tmp):
    calls = []
    scale_kernel = make_scale(calls)

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def fused(x, small):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 2.0, x.numel())
        s = torch.empty_like(small)
        scale_kernel[(triton.cdiv(small.numel(), BLOCK),)](small, s, 2.0, small.numel())
        out = torch.empty_like(x)
        add_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, out, x.numel())
        return out, s

    x, small = torch.randn(1200, device=DEVICE), torch.randn(300, device=DEVICE)
    out, s = fused(x, small)
    torch.testing.assert_close(out, 3 * x)
    torch.testing.assert_close(s, 2 * small)
    assert {k[0] for k in scale_kernel.cache} == {1200, 300} and len(add_kernel.cache) == 1
    # every timed or warm-up launch saw its own call's n, launch by launch, in program order
    assert calls[:2] == [1200, 300] and set(calls) == {1200, 300}
    assert calls.count(1200) == calls.count(300)


def test_all_candidates_invalid_is_cannot_find_valid_config_and_leaves_no_state():
    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (48, 96)], key=["n"])
    @triton.jit
    def bad(x, n, BLOCK: tl.constexpr):
        tl.static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of 2")
        tl.store(x + tl.arange(0, BLOCK), 1.0)

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def f(x):
        bad[(1,)](x, x.numel())

    with pytest.raises(RuntimeError, match="cannot find valid config") as info:
        f(torch.zeros(128, device=DEVICE))
    assert "power of 2" in str(info.value)
    assert not bad.cache
    scale_kernel = make_scale()

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def g(x):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 1.0, x.numel())
        return y

    x = torch.randn(100, device=DEVICE)
    torch.testing.assert_close(g(x), x)  # the next tuner works


def test_invalid_candidate_is_skipped_and_the_flow_goes_on():
    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (96, 64, 128)], key=["n"])
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr):
        tl.static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of 2")
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def f(x):
        y = torch.empty_like(x)
        copy[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
        return y

    x = torch.randn(300, device=DEVICE)
    torch.testing.assert_close(f(x), x)
    assert copy.best_config.kwargs["BLOCK"] in (64, 128)
    assert copy.configs_timings[copy.configs[0]][0] == float("inf")


def test_nesting_and_a_second_thread_are_clear_errors():
    scale_kernel = make_scale()
    errors = []

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def inner(x):
        return x

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def outer(x):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 1.0, x.numel())
        if not errors:
            try:
                inner(x)
            except RuntimeError as exc:
                errors.append(str(exc))
            t = threading.Thread(target=lambda: errors.append(_try(inner, x)))
            t.start()
            t.join()
        return y

    outer(torch.randn(64, device=DEVICE))
    assert len(errors) == 2 and all("another contextual tuner is active" in e for e in errors)


def _try(f, *args):
    try:
        f(*args)
        return "no error"
    except RuntimeError as exc:
        return str(exc)


def test_user_exception_reaches_the_caller_and_the_next_call_works():
    scale_kernel = make_scale()
    state = {"fail": True}

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def f(x):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 2.0, x.numel())
        if state["fail"]:
            raise KeyError("user bug")
        return y

    x = torch.randn(200, device=DEVICE)
    with pytest.raises(KeyError, match="user bug"):
        f(x)
    assert not scale_kernel.cache  # no half-finished pick was kept
    state["fail"] = False
    torch.testing.assert_close(f(x), 2 * x)
    assert len(scale_kernel.cache) == 1


def test_logs_are_appended_not_truncated(in_tmp):
    for _ in range(2):
        scale_kernel = make_scale()

        @contextual_autotune(n_repeat=1, n_warmup=0)
        def f(x, kernel=scale_kernel):
            y = torch.empty_like(x)
            kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 1.0, x.numel())
            return y

        f(torch.randn(64, device=DEVICE))
    assert (in_tmp / ".autotune_logs" / "rank-0.log").read_text().count("== contextual_autotune") == 2


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="n_repeat must be an int >= 1"):
        contextual_autotune(n_repeat=0)
    with pytest.raises(ValueError, match="n_warmup must be an int >= 0"):
        contextual_autotune(n_warmup=-1)


def test_configs_empty_kernels_are_generated_and_tuned_in_context():
    from kernels import KERNELS

    spec = KERNELS["add"]
    kernel = triton.autotune(configs=[], key=spec.key)(spec.jit)

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def f(x, y):
        return spec.launch(kernel, x, y)

    x, y = spec.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(f(x, y), x + y)
    assert len(kernel.configs_timings) > 1 and "BLOCK" in kernel.best_config.kwargs


def test_is_dist_without_torch_distributed_is_an_error_that_leaves_no_lock():
    @contextual_autotune(is_dist=True)
    def f(x):
        return x

    with pytest.raises(RuntimeError, match="not initialised"):
        f(1)

    @contextual_autotune()
    def g(x):
        return x

    assert g(2) == 2  # the failed call released the tuner


def test_once_tuned_the_function_runs_once_per_call():
    scale_kernel = make_scale()
    runs = []

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def f(x):
        runs.append(1)
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 1.0, x.numel())
        return y

    x = torch.randn(64, device=DEVICE)
    f(x)
    first = len(runs)
    torch.testing.assert_close(f(x), x)
    assert first > 2 and len(runs) == first + 1
