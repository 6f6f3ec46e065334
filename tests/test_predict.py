"""Frozen mode's pick for a key nobody tuned (``store/predict.py``): the nearest tuned key's pick,
unless the tuned keys around it agree on another config and, held out in turn, that one lost less
than the nearest key's pick did; the same answer every time."""

import warnings

import pytest
import torch
import triton
from helpers import DEVICE

from kernels import KERNELS
from triton_dist_plugin import hookimpl
from triton_dist_plugin.store import predict

ADD = KERNELS["add"]
ORDER = ["A", "B", "C"]


def _grid(odd_key=3000, sizes=(300, 1000, 3000, 6000, 10000)):
    """A is best everywhere but at ``odd_key``, where C is 0.1% faster (noise) and 20% slower elsewhere."""
    return [((n,), {"A": 1.0, "B": 1.5, "C": 0.999 if n == odd_key else 1.2}, "C" if n == odd_key else "A")
            for n in sizes]


def test_the_config_good_across_the_neighbours_replaces_an_odd_nearest_pick():
    neighbours = sorted(_grid(), key=lambda n: abs(n[0][0] - 3100))
    assert predict.choose((3100,), neighbours, ORDER) == ("A", True)
    assert predict.weighted((3100,), neighbours, ORDER) == "A"


def test_where_the_best_moves_with_the_shape_the_nearest_pick_stands():
    # Small shapes like A, large ones like C: the nearest key is the better guess, held out.
    grid = [((n,), {"A": 1.0 if n < 3000 else 1.3, "C": 1.3 if n < 3000 else 1.0}, "A" if n < 3000 else "C")
            for n in (300, 600, 1000, 3000, 6000, 10000)]
    for target in (400, 8000):
        near = min(grid, key=lambda n: abs(n[0][0] - target))[2]
        assert predict.choose((target,), grid, ORDER) == (near, False)


def test_too_few_neighbours_or_unmeasured_configs_leave_the_nearest_pick():
    two = _grid(sizes=(1000, 3000))
    assert predict.choose((3100,), two, ORDER) == ("C", False)
    assert predict.weighted((5,), [((1,), {"A": 1.0}, "A"), ((2,), {"B": 1.0}, "B"), ((3,), {"C": 1.0}, "C")],
                            ORDER) is None  # none measured at more than half of them
    tie = [((n,), {"A": 1.0, "B": 1.0}, "A") for n in (1, 2, 3)]
    assert predict.weighted((2,), tie, ["B", "A"]) == "B"  # a tie: the first in the given order


class OddGrid:
    """The add kernel's BLOCK=256 best at every size but 3000, where 512 is 5% faster (clear of the
    tie, so it is that key's pick) and 20% slower everywhere else."""

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        n, block = request.key[0], request.config.kwargs["BLOCK"]
        if n == 3000:
            return {128: 1.3, 256: 1.0, 512: 0.95}[block]
        return {128: 1.3, 256: 1.0, 512: 1.2}[block]


@pytest.mark.parametrize("memo", ["default", "none"])
def test_frozen_nearest_launches_the_config_the_tuned_keys_around_it_favour(plugins, monkeypatch, memo):
    """The same picks whether the neighbours' entries are kept read for the process or read again
    each time (a memo of 1 byte keeps none); the memo never holds more bytes than it may."""
    from triton_dist_plugin.store import persist

    monkeypatch.setattr(persist, "_READ", {})  # this process's memo, from this test on
    if memo == "none":
        monkeypatch.setattr(persist, "_READ_BYTES", 1)
    plugins(OddGrid())
    for n in (300, 1000, 3000, 6000, 10000):
        kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
        x = torch.randn(n, device=DEVICE)
        ADD.launch(kernel, x, x)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_FROZEN", "nearest")
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)  # a fresh process would read the disk
    x = torch.randn(4200, device=DEVICE)  # nearest to 3000 (512), between it and 6000 (256)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(ADD.launch(kernel, x, x), x + x)
    assert kernel.best_config.kwargs["BLOCK"] == 256  # the nearest key (3000) picked 512
    said = [str(w.message) for w in caught if "never tuned" in str(w.message)]
    assert len(said) == 1 and "the config the tuned keys around it favour" in said[0], said
    # Close to a tuned key, its own pick weighs most: 3100 launches 3000's pick, 512.
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x = torch.randn(3100, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ADD.launch(kernel, x, x)
    assert kernel.best_config.kwargs["BLOCK"] == 512
    held = [h[0][1] for h in persist._READ.values()]
    assert sum(held) <= persist._READ_BYTES and (held if memo == "default" else not held), held


@pytest.mark.parametrize("seed", range(5))
def test_the_same_neighbours_give_the_same_pick_in_any_order_of_reading(seed):
    import random

    grid = _grid()
    random.Random(seed).shuffle(grid)
    assert predict.choose((3100,), grid, ORDER) == ("A", True)


def test_neighbours_as_far_as_each_other_give_one_pick_in_either_order():
    a, b = ((1000, 4000), {"A": 1.0, "B": 1.1}, "A"), ((4000, 1000), {"A": 1.1, "B": 1.0}, "B")
    assert predict.choose((2000, 2000), [a, b], ORDER) == predict.choose((2000, 2000), [b, a], ORDER)
