"""Frozen mode's pick for a key nobody tuned (``store/predict.py``): the nearest tuned key's pick,
unless the tuned keys around it agree on another config and, held out in turn, that one lost less
than the nearest key's pick did; the same answer every time."""

import math
import warnings

import pytest
import torch
import triton
from helpers import DEVICE
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import KERNELS
from triton_dist_plugin import hookimpl
from triton_dist_plugin.search import model
from triton_dist_plugin.store import keys, predict

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


def _frozen_after_grid(plugins, monkeypatch, timer, n: int) -> tuple:
    """The add kernel tuned at 300 to 10000 under ``timer``, then launched at ``n`` in frozen mode by a
    fresh tuner (as a fresh process would, from the disk): that tuner, and the miss warnings it gave."""
    plugins(timer)
    for size in (300, 1000, 3000, 6000, 10000):
        kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
        x = torch.randn(size, device=DEVICE)
        ADD.launch(kernel, x, x)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_FROZEN", "nearest")
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x = torch.randn(n, device=DEVICE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(ADD.launch(kernel, x, x), x + x)
    return kernel, [str(w.message) for w in caught if "never tuned" in str(w.message)]


@pytest.mark.parametrize("memo", ["default", "none"])
def test_frozen_nearest_launches_the_config_the_tuned_keys_around_it_favour(plugins, monkeypatch, memo):
    """The same picks whether the neighbours' entries are kept read for the process or read again
    each time (a memo of 1 byte keeps none); the memo never holds more bytes than it may."""
    from triton_dist_plugin.store import persist

    monkeypatch.setattr(persist, "_READ", {})  # this process's memo, from this test on
    if memo == "none":
        monkeypatch.setattr(persist, "_READ_BYTES", 1)
    kernel, said = _frozen_after_grid(plugins, monkeypatch, OddGrid(), 4200)  # nearest to 3000 (512), then 6000 (256)
    assert kernel.best_config.kwargs["BLOCK"] == 256  # the nearest key (3000) picked 512
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


# A machine of 4 cores; per element, a block of 512 is the cheapest, 128 the dearest; every
# program of a wave costs as much as the wave's slowest, so the best block moves with how the
# programs of each fill the last wave.
CORES, EFFICIENCY = 4, {128: 1.3, 256: 1.1, 512: 1.0}


def _waves_ms(n: int, block: int) -> float:
    return math.ceil(math.ceil(n / block) / CORES) * block * EFFICIENCY[block] / 1000 + 0.05


def _fill(key, config) -> float:
    return model.wave_fill(math.ceil(key[0] / int(config)), CORES, 1)


WAVES = [((n,), {str(b): _waves_ms(n, b) for b in EFFICIENCY},
          str(min(EFFICIENCY, key=lambda b: _waves_ms(n, b)))) for n in (300, 1000, 3000, 6000, 10000)]


def test_where_the_programs_fill_the_machine_otherwise_the_times_are_carried_by_it():
    order = [str(b) for b in EFFICIENCY]
    neighbours = sorted(WAVES, key=lambda n: abs(math.log(n[0][0] + 1) - math.log(1422)))
    assert neighbours[0][2] == "256" and min(order, key=lambda c: _waves_ms(1421, int(c))) == "128"
    assert predict.choose((1421,), neighbours, order)[0] == "256"  # the nearest key's pick, 15% slower here
    assert predict.choose((1421,), neighbours, order, _fill) == ("128", True)
    # Where the fill is unknown everywhere, the times are taken as they are (the weighted rule, in log space).
    assert predict.filled((1421,), neighbours, order, lambda key, config: None) == \
        min(order, key=lambda c: sum(math.log(t[c] / min(t.values())) / (keys.distance((1421,), k) + 1e-3)
                                     for k, t, _ in neighbours))


@settings(max_examples=60, deadline=None)
@given(st.integers(200, 12000), st.randoms(use_true_random=False))
def test_the_filled_pick_is_the_same_in_any_order_of_reading_and_never_worse_held_out(target, rng):
    """Over the wave-made grid (its times follow the fill exactly): one answer whatever order the
    neighbours come in, and never slower at the target than the nearest key's pick."""
    order = [str(b) for b in EFFICIENCY]
    near = sorted(WAVES, key=lambda n: (keys.distance((target,), n[0]), repr(n[0])))
    shuffled = list(near)
    rng.shuffle(shuffled)
    pick = predict.choose((target,), near, order, _fill)
    assert pick == predict.choose((target,), shuffled, order, _fill)
    assert _waves_ms(target, int(pick[0])) <= _waves_ms(target, int(near[0][2]))


class Waves:
    """The add kernel's blocks timed as ``_waves_ms`` says (the interpreter's machine model has 4 cores)."""

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        return _waves_ms(request.key[0], request.config.kwargs["BLOCK"])


def test_frozen_nearest_carries_the_neighbours_times_by_how_each_block_fills_the_machine(plugins, monkeypatch):
    """A real kernel: its grid (one program per BLOCK of n) is what the kernel's source says, so
    frozen mode counts each block's programs at the tuned keys and at the one it launches."""
    from triton_dist_plugin.tiling import hardware

    assert hardware.current().cores == CORES
    kernel, said = _frozen_after_grid(plugins, monkeypatch, Waves(), 1421)  # nearest to 1000 (256); 128 fills better
    assert kernel.best_config.kwargs["BLOCK"] == 128
    assert len(said) == 1 and "the config the tuned keys around it favour" in said[0], said


def test_the_programs_are_counted_from_the_source_only_where_the_launch_starts_as_many():
    """The matmul's blocks over M and N: counted at any key; a grid of another shape (a persistent
    kernel's one program per core, say) leaves every count unknown rather than wrong."""
    from triton_dist_plugin.patched import machine_fill

    spec = KERNELS["matmul"]
    config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1})
    named = {"M": 100, "N": 40, "K": 64}
    grid = lambda meta: (triton.cdiv(100, meta["BLOCK_M"]) * triton.cdiv(40, meta["BLOCK_N"]),)  # noqa: E731
    tuner = triton.autotune(configs=[config], key=spec.key)(spec.jit)
    fill = machine_fill.for_launch(tuner, ["M", "N", "K"], named, grid)
    assert fill((100, 40, 64, "torch.float32"), config) == model.wave_fill(4 * 3, CORES, 1)
    assert fill((64, 16, 64, "torch.float32"), config) == model.wave_fill(2 * 1, CORES, 1)  # another key's count
    assert fill((64,), config) is None and fill("(64, 16)", config) is None  # a key that holds no N: unknown
    persistent = machine_fill.for_launch(tuner, ["M", "N", "K"], named, lambda meta: (CORES,))
    assert persistent((100, 40, 64, "torch.float32"), config) is None
    assert machine_fill.for_launch(tuner, ["M", "N", "K"], named, None) is None
    # A block over an argument the key does not hold: the count would hang on this launch's N.
    assert machine_fill.for_launch(tuner, ["M", "K"], named, grid) is None
    # Nothing to confirm the count by here (a size the source cannot count, a grid that fails): unknown everywhere.
    unconfirmed = machine_fill.for_launch(tuner, ["M", "N", "K"], {**named, "M": 100.0}, lambda meta: 1 // 0)
    assert unconfirmed((64, 16, 64, "torch.float32"), config) is None


def test_a_fill_that_knows_nothing_leaves_the_pick_as_without_one():
    """Where no count is known anywhere (a persistent grid, say), the rules are the old ones exactly."""
    import random

    rng = random.Random(7)
    order = ["A", "B", "C", "D"]
    for _ in range(300):
        measured = [{c: rng.uniform(1, 2) for c in order if rng.random() < 0.9} or {"A": 1.0} for _ in range(5)]
        grid = [((rng.randint(1, 5000), rng.randint(1, 5000)), t, min(t, key=t.get)) for t in measured]
        target = (rng.randint(1, 5000), rng.randint(1, 5000))
        grid.sort(key=lambda n: (keys.distance(target, n[0]), repr(n[0])))
        assert predict.choose(target, grid, order, lambda key, config: None) == predict.choose(target, grid, order)
