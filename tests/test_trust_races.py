"""Function-level tuning that can be trusted under threads and across processes.

* Threads calling one ``@autotune`` function with one key tune it once: the others wait for that
  pick (host-level functions: the Triton interpreter is not thread-safe).
* A config space holding callables (functions, lambdas, built-ins, partials, objects) is stored
  under a description free of memory addresses, so a fresh process finds the pick again.
"""

import collections
import json
import textwrap
import threading

import torch
from helpers import run_python

from triton_dist_plugin.store import cache, describe
from triton_dist_plugin.tune import N_REPEAT, N_WARMUP, autotune

THREADS = 8
JOIN_S = 120


def counting_scale(calls: collections.Counter, lock: threading.Lock, gate=None):
    """A host-level tuned function counting its calls per (key, candidate)."""

    @autotune(config_space=[{"k": 1}, {"k": 2}, {"k": 3}], key_fn=lambda x: tuple(x.shape))
    def scale(x, k):
        with lock:
            calls[(tuple(x.shape), k)] += 1
        if gate is not None:
            gate(x)
        return x * k

    return scale


def run_threads(targets: list) -> list:
    """Start every target at once (a barrier), join them; the results, in order."""
    barrier = threading.Barrier(len(targets))
    results: list = [None] * len(targets)
    errors: list = []

    def run(i: int, target) -> None:
        barrier.wait()
        try:
            results[i] = target()
        except BaseException as exc:  # reported by the test, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, t), daemon=True) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not [t for t in threads if t.is_alive()], "a thread is stuck (deadlock?)"
    assert not errors, errors
    return results


def test_threads_with_one_key_tune_it_once_and_share_the_pick(recorder):
    calls, lock = collections.Counter(), threading.Lock()
    scale = counting_scale(calls, lock)
    x = torch.randn(64)
    results = run_threads([lambda: scale(x)] * THREADS)
    assert len(recorder.records) == 1 and len(recorder.timed) == 3  # one tuning, each candidate timed once
    (key,) = scale.best_configs
    pick = scale.best_configs[key]["k"]
    for k in (1, 2, 3):  # 5 warm-up and 10 timed runs each, plus every thread's call with the pick
        assert calls[(key, k)] == N_WARMUP + N_REPEAT + (THREADS if k == pick else 0), (k, pick, calls)
    for y in results:
        torch.testing.assert_close(y, x * pick)


def test_different_keys_tune_at_the_same_time_without_deadlock(recorder):
    """Each key's tuning waits inside a candidate until the other key's tuning has started: only
    keys tuned in parallel get through (a shared lock would stall both until the timeout)."""
    started = {(1,): threading.Event(), (2,): threading.Event()}
    overlapped = []

    def gate(x):
        mine, other = tuple(x.shape), (2,) if tuple(x.shape) == (1,) else (1,)
        if not started[mine].is_set():
            started[mine].set()
            overlapped.append(started[other].wait(JOIN_S / 4))

    calls, lock = collections.Counter(), threading.Lock()
    scale = counting_scale(calls, lock, gate)
    xs = [torch.randn(1), torch.randn(2)]
    results = run_threads([lambda x=x: scale(x) for x in xs for _ in range(THREADS // 2)])
    assert overlapped == [True, True]
    assert len(recorder.records) == 2 and len(scale.best_configs) == 2
    for i, y in enumerate(results):
        x = xs[i // (THREADS // 2)]
        torch.testing.assert_close(y, x * scale.best_configs[tuple(x.shape)]["k"])
    for key in started:
        assert sum(n for (k, _), n in calls.items() if k == key) == 3 * (N_WARMUP + N_REPEAT) + THREADS // 2


def test_untuned_calls_and_cache_hits_do_not_wait_for_a_tuning_in_progress(recorder):
    """While one key tunes (held inside a candidate), ``autotune=False`` and a key already tuned
    answer at once."""
    release, inside = threading.Event(), threading.Event()

    def gate(x):
        if x.numel() == 3:
            inside.set()
            release.wait(JOIN_S)

    calls, lock = collections.Counter(), threading.Lock()
    scale = counting_scale(calls, lock, gate)
    tuned = torch.randn(5)
    scale(tuned)
    tuning = threading.Thread(target=scale, args=(torch.randn(3),), daemon=True)
    tuning.start()
    try:
        assert inside.wait(JOIN_S)
        torch.testing.assert_close(scale(tuned, autotune=False), tuned)  # the first config, k=1
        torch.testing.assert_close(scale(tuned), tuned * scale.best_configs[(5,)]["k"])
        assert len(recorder.records) == 1  # the other tuning is still held
    finally:
        release.set()
        tuning.join(JOIN_S)
    assert not tuning.is_alive() and len(recorder.records) == 2


# A config space of callables, tuned in a fresh process: how often it ran, and what it picked.
CALLABLES = textwrap.dedent("""
    import functools, json, sys, warnings
    import torch
    from triton_dist_plugin.tune import autotune

    def double(x):
        return x * 2

    class Shift:  # a default repr, with an address
        def __init__(self, by):
            self.by = by

        def __call__(self, x):
            return x + self.by

    def make_scale(factor):
        return lambda x: x * factor

    space = [{"act": torch.relu}, {"act": double}, {"act": lambda x: x * 3}, {"act": make_scale(4)},
             {"act": make_scale(5)}, {"act": functools.partial(torch.add, other=1.0)}, {"act": Shift(2.0)},
             {"act": Shift(3.0).__call__}, {"act": torch.tanh, "dtype": torch.float32}]
    calls = []

    @autotune(config_space=space, key_fn=lambda x: tuple(x.shape))
    def apply(x, act, dtype=None):
        calls.append(act)
        return act(x)

    x = torch.randn(256)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = apply(x)
    (best,) = apply.best_configs.values()
    pick = next(i for i, c in enumerate(space) if c is best)
    assert torch.allclose(y, best["act"](x))
    print(json.dumps({"calls": len(calls), "pick": pick, "warnings": [str(w.message) for w in caught]}))
""")


def test_a_config_space_of_callables_is_found_again_by_a_fresh_process(tmp_path):
    env = {"HOME": str(tmp_path), cache.ROOT_ENV: str(tmp_path / "tdp-cache"), "TRITON_INTERPRET": "1"}
    runs = []
    for _ in range(2):
        result = run_python(CALLABLES, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["calls"] == 9 * (N_WARMUP + N_REPEAT) + 1 and not first["warnings"]
    assert second["calls"] == 1, second  # nothing timed: the one call with the stored pick
    assert second["pick"] == first["pick"] and not second["warnings"]
    (entry,) = (tmp_path / "tdp-cache").glob("*/*.json")
    assert " at 0x" not in entry.read_text()


def test_describe_is_stable_and_tells_callables_apart():
    def nested(x):
        return x

    values = [lambda x: x * 2, lambda x: x * 3, nested, (lambda k: lambda x: x * k)(2),
              (lambda k: lambda x: x * k)(3), torch.relu, torch.tanh]
    texts = [describe.describe(v) for v in values]
    assert len(set(texts)) == len(texts) and not [t for t in texts if " at 0x" in t]
    assert texts[5] == "torch._VariableFunctionsClass.relu"
    assert describe.describe(torch.float16) == "torch.float16" and describe.describe(torch.device("cpu")) == "cpu"
    # Plain values keep the text stored entries were written with.
    assert describe.describe({"BLOCK": 128, "name": "a", "sizes": [1, (2, 3.5)], "none": None}) == \
        "{'BLOCK': 128, 'name': 'a', 'sizes': [1, (2, 3.5)], 'none': None}"

    class Loop:
        def __init__(self):
            self.me = self

    assert describe.describe(Loop()).startswith(f"{__name__}.{Loop.__qualname__}#")  # a cycle ends
