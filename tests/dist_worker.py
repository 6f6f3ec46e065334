"""One rank of a multi-process test: ``python tests/dist_worker.py SCENARIO RANK WORLD PORT``.

Runs a real gloo group on 127.0.0.1 and prints one JSON line with what this rank saw. Every
scenario's collectives time out (TRITON_DIST_AUTOTUNE_TIMEOUT), so a divergence is an error.
``helpers.run_ranks`` forks most ranks from ``python tests/dist_worker.py --serve ...`` instead, which
has run this module-level code once (``fork_server`` says how); ``main`` is the same either way.
"""

import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402

import triton_dist_plugin as tdp  # noqa: E402
from triton_dist_plugin.tune import autotune  # noqa: E402

# rank -> candidate -> tens of ms; MAX over ranks: a=5, b=3, c=4 -> b. A median of wall-clock runs: on a
# loaded machine a sleep of a few ms wakes late by as much, so the gaps are 10 ms and more.
SLEEP_CS = {
    0: {"a": 1, "b": 3, "c": 4},
    1: {"a": 5, "b": 2, "c": 1},
    2: {"a": 1, "b": 1, "c": 2},
    3: {"a": 2, "b": 3, "c": 1},
}


def sleepy(rank):
    @autotune(config_space=[{"mode": m} for m in "abc"], key_fn=lambda x: x)
    def op(x, mode):
        time.sleep(SLEEP_CS[rank][mode] / 1e2)
        return mode

    return op


def _tuned_once(op, group):
    """Tune ``op`` once over ``group``: its error, if any, as the scenario's result."""
    try:
        op(1, autotune_pg=group)
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def scenario_max(rank, world, group):
    op = sleepy(rank)
    return {"result": op(1, autotune_pg=group), "best": op.best_configs[1]}


def scenario_world_default(rank, world, group):
    return {"result": sleepy(rank)(1)}  # no group given: WORLD, since it is initialised


def scenario_divergent_prune(rank, world, group):
    @autotune(config_space=[{"mode": m} for m in "abc"], key_fn=lambda x: x,
              prune_fn=lambda e, x: not (rank == 1 and e["mode"] == "a"))
    def op(x, mode):
        return mode

    return _tuned_once(op, group)


def scenario_divergent_space(rank, world, group):
    # Same length, same retained positions, other values: rank 1 tunes another block size.
    @autotune(config_space=[{"block": b} for b in ((64, 128, 256) if rank == 0 else (64, 128, 512))],
              key_fn=lambda x: x)
    def op(x, block):
        return block

    return _tuned_once(op, group)


def scenario_divergent_key(rank, world, group):
    op = sleepy(rank)
    try:
        op(rank, autotune_pg=group)
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def scenario_one_rank_hit(rank, world, group):
    # Each rank has its own HOME and one process per node writes the cache (rank 0 here), so
    # after a first tuning only rank 0 has the entry on disk.
    first = sleepy(rank)(1, autotune_pg=group)
    for costs in SLEEP_CS.values():
        costs["a"] = 0  # a re-tune would now pick "a"
    tuned = []

    class Count:
        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            if not record.cache_hit:  # a hit (on disk, or shared by a rank) has its record too
                tuned.append(record.key)

    tdp.register(Count())
    home = os.environ["HOME"]
    on_disk = len([f for _, _, fs in os.walk(home) for f in fs if f.endswith(".json")])
    second = sleepy(rank)(1, autotune_pg=group)  # a fresh tuner: rank 0 hits its disk cache, rank 1 misses
    return {"first": first, "result": second, "tuned_here": len(tuned), "entries_on_disk": on_disk}


def scenario_silent_rank(rank, world, group):
    op = sleepy(rank)
    done = os.path.join(os.path.dirname(os.environ["HOME"]), "rank0-done")
    if rank == 1:  # never enters tuning: it waits for rank 0 to give up (leaving sooner would be "exited")
        deadline = time.monotonic() + 60
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"error": None}
    result = _tuned_once(op, group)
    open(done, "w").close()
    return result


def scenario_dead_rank(rank, world, group):
    """Rank 1 leaves (its connections close) once every other rank has begun tuning with it (their
    ``prune_fn`` has run: the agreement's collective comes next), so each meets the closed
    connection inside tuning. (Leaving at once, rank 5 of 8 once waited for the timeout in a CI
    rehearsal; not reproduced since, and a late entry alone fails at once with plain gloo.)"""
    entered = Path(os.environ["HOME"]).parent  # every rank's home is in the test's directory
    dist.barrier(group)
    if rank == 1:
        deadline = time.monotonic() + 20
        while len(list(entered.glob("entered-*"))) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # from the prune to the collective's receive
        return {"error": None}

    def prune(config, x):
        (entered / f"entered-{rank}").touch()
        return True

    @autotune(config_space=[{"mode": m} for m in "abc"], key_fn=lambda x: x, prune_fn=prune)
    def op(x, mode):
        return mode

    return _tuned_once(op, group)


class RankCosts:
    """Each rank sees other costs for the add kernel's blocks: alone, rank 0 picks 128 and rank 1
    256; with the MAX over both ranks, 512 (128 -> 8, 256 -> 9, 512 -> 6)."""

    COSTS = {0: {128: 1.0, 256: 9.0, 512: 5.0}, 1: {128: 8.0, 256: 2.0, 512: 6.0}}

    def __init__(self, rank):
        self.costs = self.COSTS[rank]

    @tdp.hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        return self.costs[request.config.kwargs["BLOCK"]]


def _alone_and_together(rank, group, make_kernel):
    """The add kernel's pick tuned alone, then inside ``tuning_group(group)``."""
    from kernels import KERNELS

    spec = KERNELS["add"]
    tdp.register(RankCosts(rank))
    picks = {}
    for label, ctx in (("alone", None), ("together", group)):
        kernel = make_kernel(spec)
        x, y = spec.make_inputs("tiny", "cpu")
        if ctx is None:
            out = spec.launch(kernel, x, y)
        else:
            with tdp.tuning_group(ctx):
                out = spec.launch(kernel, x, y)
        assert torch.equal(out, x + y)
        picks[label] = kernel.best_config.kwargs["BLOCK"]
    return picks


def scenario_kernel_group(rank, world, group):
    """A plain @triton.autotune kernel tuned over the group: ranks see different costs."""
    return _alone_and_together(rank, group, lambda spec: triton.autotune(configs=spec.configs("cpu"),
                                                                        key=spec.key)(spec.jit))


def scenario_kernel_persist(rank, world, group):
    """Tuned together once (rank 0 writes the entry); then a new tuner of the same kernel, where
    only rank 0 finds the entry: every rank takes it, none times anything."""
    from helpers import Recorder

    from kernels import KERNELS

    spec = KERNELS["add"]
    rec = Recorder()
    tdp.register(rec)
    x, y = spec.make_inputs("tiny", "cpu")
    picks, timed = [], []
    for _ in range(2):
        kernel = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
        with tdp.tuning_group(group):
            spec.launch(kernel, x, y)
        picks.append(str(kernel.best_config))
        timed.append(len(rec.timed) - sum(timed))
    from triton_dist_plugin.store import cache

    stored = sum(f.endswith(".json") for _, _, fs in os.walk(cache.kernel_base()) for f in fs)
    return {"picks": picks, "timed": timed, "stored": stored}


def scenario_subclass_group(rank, world, group):
    """A tuner subclass with its own loop over _bench (FlagGems-style), tuned over the group."""
    from triton_dist_plugin import _compat

    class Lib(_compat.Autotuner):
        def run(self, *args, **kwargs):
            self.nargs = dict(zip(self.arg_names, args))
            key = tuple(self.nargs[k] for k in self.keys)
            if key not in self.cache:
                timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
                self.cache[key] = min(timings, key=timings.get)
            self.best_config = self.cache[key]
            return self.fn.run(*args, **kwargs, **self.best_config.kwargs)

    return _alone_and_together(rank, group, lambda spec: Lib(spec.jit, spec.jit.arg_names, spec.configs("cpu"),
                                                             spec.key, None, None))


def scenario_all2all(rank, world, group):
    from kernels import all2all

    manifest = os.path.join(os.environ["HOME"], "..", "manifest.json")
    results = [all2all.run(rows, 8, group=group, manifest=manifest) for rows in (40, 100)]
    return {"results": results, "space": len(all2all.CONFIG_SPACE)}


def _contextual_kernel(rank):
    import triton.language as tl

    # The contextual tuner averages a few calls (as Triton-distributed's does), so one scheduling
    # stall of a loaded machine moves a mean by its share: the gaps are 100 ms and more.
    costs = {0: {32: 10, 64: 220, 128: 110}, 1: {32: 230, 64: 10, 128: 110}}  # MAX: 32->230, 64->220, 128->110

    def sleeper(block):
        return lambda nargs: time.sleep(costs[rank][block] / 1e3)

    @triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=sleeper(b)) for b in (32, 64, 128)], key=["n"])
    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    return copy


def scenario_contextual(rank, world, group):
    from triton_dist_plugin.autotuner import contextual_autotune

    copy = _contextual_kernel(rank)
    picks = {}
    for is_dist in (False, True):
        copy.cache.clear()

        @contextual_autotune(is_dist=is_dist, n_repeat=3, n_warmup=1)
        def step(x):
            y = torch.empty_like(x)
            copy[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
            if is_dist:  # noqa: B023 (called in this iteration) - alone, a barrier would tie the ranks' times
                dist.barrier()
            return y

        x = torch.randn(256)
        assert torch.equal(step(x), x)
        picks["dist" if is_dist else "alone"] = copy.best_config.kwargs["BLOCK"]
    return picks


def _contextual_copy_step(rank):
    """A contextual tuner over one launch of ``_contextual_kernel`` on every rank (``is_dist``)."""
    from triton_dist_plugin.autotuner import contextual_autotune

    copy = _contextual_kernel(rank)

    @contextual_autotune(is_dist=True, n_repeat=1, n_warmup=0)
    def step(x):
        y = torch.empty_like(x)
        copy[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
        return y

    return step


def scenario_contextual_diverge(rank, world, group):
    step = _contextual_copy_step(rank)
    try:
        step(torch.randn(100 + rank))  # a different key on each rank
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def scenario_compile_split(rank, world, group):
    """Ranks that share a compile cache split the candidates; a failure on one is every rank's.
    The compile is a recording function standing in for Triton's warmup (the interpreter
    compiles nothing), so what each rank compiled and loaded is visible."""
    from triton_dist_plugin.compiling import precompile

    calls = []

    def warm(*args, tag, size, **meta):
        calls.append(tag)
        if tag == 4:
            raise ValueError(f"candidate {tag} cannot compile")

    kwargs = [{"tag": i, "size": 2 ** i} for i in range(7)]
    out = {}
    for mode, cache_id in (("shared", "one-dir"), ("separate", f"dir-of-rank-{rank}")):
        calls.clear()
        failed = precompile.warm_all(warm, (), {}, kwargs, device=None, group=group, cache_id=cache_id)
        out[mode] = {"calls": list(calls), "failed": {str(k): str(v) for k, v in failed.items()}}
    return out


class _Timed:
    """Counts the candidates this rank's timing hooks reach (it answers None: the built-in times)."""

    def __init__(self):
        self.count = 0

    @tdp.hookimpl
    def tdp_time_candidate(self, request):
        self.count += 1


def scenario_leader(rank, world, group):
    """The leader strategy: rank 0's timings decide and the others time nothing, for the
    function-level tuner (by setting) and a plain kernel (by ``tuning_group(strategy=)``)."""
    from kernels import KERNELS

    counter = _Timed()
    tdp.register(counter)
    os.environ["TRITON_DIST_AUTOTUNE_REDUCE"] = "leader"
    op = sleepy(rank)
    out = {"function_pick": op(1, autotune_pg=group), "function_timed": counter.count}
    del os.environ["TRITON_DIST_AUTOTUNE_REDUCE"]
    spec = KERNELS["add"]
    x, y = spec.make_inputs("tiny", "cpu")
    counter.count = 0
    kernel = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
    with tdp.tuning_group(group, strategy="leader"):
        result = spec.launch(kernel, x, y)
    out.update(kernel_pick=str(kernel.best_config), kernel_timed=counter.count,
               correct=bool(torch.equal(result, x + y)))
    return out


def scenario_node(rank, world, group):
    """Every rank of a node tunes real kernels with its own wall-clock timings (ranks of one host
    contend, so each sees other times): alone, then with the MAX reduction, then with the leader
    strategy. Only ``together`` and ``leader`` must agree; ``alone`` shows what upstream would do."""
    from kernels import KERNELS

    os.environ["TRITON_DIST_AUTOTUNE_PERSIST"] = "0"  # each way tunes afresh, none reads another's pick
    counter = _Timed()
    tdp.register(counter)
    out = {}
    for name in ("add", "scale"):
        spec = KERNELS[name]
        inputs = spec.make_inputs("tiny", "cpu")
        for label, how in (("alone", None), ("together", "max"), ("leader", "leader")):
            kernel = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
            counter.count = 0
            if how is None:
                result = spec.launch(kernel, *inputs)
            else:
                with tdp.tuning_group(group, strategy=how):
                    result = spec.launch(kernel, *inputs)
            torch.testing.assert_close(result, spec.reference(*inputs))
            out[f"{name}_{label}"] = str(kernel.best_config)
            out[f"{name}_{label}_timed"] = counter.count
    return out


def scenario_stream(rank, world, group):
    """Candidates screened as they compile under a group: none is left uncompiled (ranks would
    differ in which), and every rank screens them all and picks the same."""
    import tempfile
    from pathlib import Path

    from search_space import BEST, SPACE, Bowl, copy, forked_prepare

    from triton_dist_plugin import engine
    from triton_dist_plugin.search import strategy as search

    class Counted(Bowl):
        def __init__(self):
            super().__init__()
            self.screenings = {}

        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            if request.n_repeat == engine.Screen().policy.screen_repeat:
                self.screenings[str(request.config)] = self.screenings.get(str(request.config), 0) + 1
            return super().tdp_time_candidate(request)

    timer = Counted()
    tdp.register(timer)
    marks = Path(tempfile.mkdtemp())
    x = torch.randn(300)
    y = torch.zeros_like(x)

    def make_call(config):
        return lambda: copy[(triton.cdiv(300, config.kwargs["BLOCK"]),)](x, y, 300, **config.kwargs,
                                                                        num_warps=config.num_warps)

    request = tdp.TuningRequest("copy", (300,), "cpu")
    # A device's method: alone, a candidate screened as it compiled would be screened again once its step
    # is in; under a group each rank screens what arrives when it arrives, so none is.
    outcome = engine.run_candidates(request, SPACE, make_call, method="event", screen=engine.Screen(), group=group,
                                    prepare=forked_prepare(marks))
    note = next(n for n in request.notes if n.startswith("screened"))
    left = int(note.split("; ")[1].split()[0]) if "left uncompiled" in note else 0
    features = {k: v for k, v in search.features_of(outcome.best).items() if k in BEST}
    return {"pick": str(outcome.best), "pick_features": features, "compiled": len(list(marks.iterdir())),
            "screened": len(outcome.timings), "left": left, "correct": bool(torch.equal(x, y)) and features == BEST,
            "most_screenings": max(timer.screenings.values())}


def scenario_search(rank, world, group):
    """A large space searched under a group (halving, then optuna): the ranks' own times differ
    (a rank-dependent skew on the bowl), the reduced ones do not, so every rank screens the same
    candidates in the same order and picks the same."""
    from search_space import LARGE, LARGE_BEST, copy

    from triton_dist_plugin.search import strategy as search

    class Skewed:
        def __init__(self):
            self.timed = []

        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            request.call()
            self.timed.append(str(request.config))
            features = search.features_of(request.config)
            skew = 0.05 * rank * (features["BLOCK"] % 3)
            return 1.0 + skew + sum(abs(math.log2(features[k]) - math.log2(v)) for k, v in LARGE_BEST.items())

    timer = Skewed()
    tdp.register(timer)
    out, correct = {}, True
    for strategy in ("halving", "optuna"):
        os.environ["TRITON_DIST_AUTOTUNE_SEARCH"] = strategy
        timer.timed.clear()
        kernel = triton.autotune(configs=LARGE, key=["n"])(copy)
        x = torch.randn(300)
        y = torch.zeros_like(x)
        with tdp.tuning_group(group):
            kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
        correct = correct and bool(torch.equal(x, y))
        out[strategy] = {"path": list(dict.fromkeys(timer.timed)), "pick": str(kernel.best_config)}
    timer.timed.clear()  # a second key: both ranks warm-start from the first, on one path
    os.environ["TRITON_DIST_AUTOTUNE_SEARCH"] = "halving"
    x = torch.randn(1000)
    y = torch.zeros_like(x)
    with tdp.tuning_group(group):
        kernel[lambda m: (triton.cdiv(1000, m["BLOCK"]),)](x, y, 1000)
    out["warm"] = {"path": list(dict.fromkeys(timer.timed)), "pick": str(kernel.best_config)}
    correct = correct and bool(torch.equal(x, y))
    out["correct"] = correct
    return out


def scenario_model(rank, world, group):
    """A cost model that ranks differently on each rank (as on machines of another kind): rank 0's
    is right, the others' upside down. Every rank follows rank 0's ranking, so they screen the same
    candidates and record the same account of the model."""
    from search_space import BEST, SPACE, bowl, copy

    from triton_dist_plugin.search import strategy as search

    os.environ["TRITON_DIST_AUTOTUNE_MODEL"] = "1"

    class Bowl:
        def __init__(self):
            self.timed, self.model = [], None

        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            request.call()
            self.timed.append(str(request.config))
            return bowl(search.features_of(request.config))

        @tdp.hookimpl(tryfirst=True)
        def tdp_rank_candidates(self, request, candidates):
            sign = 1 if rank == 0 else -1
            return [sign * bowl(search.features_of(c)) for c in candidates]

        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            self.model = record.model

    timer = Bowl()
    tdp.register(timer)
    kernel = triton.autotune(configs=SPACE, key=["n"])(copy)
    x = torch.randn(300)
    y = torch.zeros_like(x)
    with tdp.tuning_group(group):
        kernel[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, y, 300)
    picked = search.features_of(kernel.best_config)
    return {"path": list(dict.fromkeys(timer.timed)), "model": timer.model, "best": picked | BEST == picked,
            "correct": bool(torch.equal(x, y))}


def scenario_device_rounds(rank, world, group):
    """The device path (the ``event`` method: interleaved rounds for the second round and the full
    measurement, then settling), with times that differ per rank and, on rank 1 only, the fastest
    failing part-way through the full measurement: every rank runs the same rounds, drops it at
    the same point, and picks the same."""
    from search_space import copy

    from triton_dist_plugin import engine
    from triton_dist_plugin.hook_objects import TuningRequest

    configs = [triton.Config({"BLOCK": b, "UNROLL": 1}, num_warps=w) for b in (32, 64, 128) for w in (1, 2)]
    base = [0.2, 0.1, 0.102, 0.2, 0.099, 0.2]  # ms: the full measurement runs 250 calls each

    class Timer:
        def __init__(self):
            self.asked = []

        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            request.call()
            i = configs.index(request.config)
            self.asked.append([i, request.n_warmup, request.n_repeat])
            full = request.n_repeat is not None and request.n_repeat > 25
            if rank == 1 and i == 4 and full and sum(a[0] == 4 and a[2] == request.n_repeat for a in self.asked) == 2:
                raise RuntimeError("lost the device on rank 1")
            return base[i] * (1 + 0.01 * rank)

    timer = Timer()
    tdp.register(timer)
    n = 300
    x, y = torch.randn(n), torch.zeros(n)

    def make_call(config):
        return lambda: copy[(triton.cdiv(n, config.kwargs["BLOCK"]),)](x, y, n, **config.kwargs)

    request = TuningRequest("copy", (n,), "cuda")
    outcome = engine.run_candidates(request, configs, make_call, method="event", group=group, screen=engine.Screen())
    return {"pick": configs.index(outcome.best), "asked": timer.asked, "notes": request.notes,
            "failed": {str(configs.index(c)): r for c, r in outcome.failures.items()},
            "correct": bool(torch.equal(x, y))}


def scenario_accuracy(rank, world, group):
    """The accuracy check under a group, where the author's first config raises on rank 1 only, so
    each rank seeks its reference from other results; a wrong candidate is the fastest, and a search
    budget of 2 with a cost model that ranks the wrong ones first screens only them: the ranks still
    screen the same candidates (rank 0's reference among them), agree, and pick a right one."""
    import triton.language as tl

    @triton.jit
    def graded(x, out, n, RANK: tl.constexpr, BLOCK: tl.constexpr, FLAW: tl.constexpr, ID: tl.constexpr):
        tl.static_assert(not (FLAW == 5 and RANK == 1), "broken on rank 1")
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n) * 2.0
        if FLAW == 4:
            v = v + 100.0
        tl.store(out + offs, v, mask=offs < n)

    class Scripted:
        @tdp.hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            request.call()
            return [5.0, 4.0, 3.0, 0.1, 0.2][request.config.kwargs["ID"]]

        @tdp.hookimpl(tryfirst=True)
        def tdp_rank_candidates(self, request, candidates):
            return [[9.0, 8.0, 7.0, 0.1, 0.2][c.kwargs["ID"]] for c in candidates]

    os.environ["TRITON_DIST_AUTOTUNE_SEARCH_WHOLE"] = "2"
    os.environ["TRITON_DIST_AUTOTUNE_SEARCH_BUDGET"] = "2"
    tdp.register(Scripted())
    flaws = [5, 0, 0, 4, 4]  # raises on rank 1, right, right, wrong, wrong
    configs = [triton.Config({"BLOCK": 16, "FLAW": f, "ID": i}) for i, f in enumerate(flaws)]
    kernel = triton.autotune(configs=configs, key=["n"], check_accuracy=True)(graded)
    n = 48
    x, out = torch.linspace(-1, 1, n), torch.zeros(n)
    with tdp.tuning_group(group):
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n, RANK=rank)
    return {"pick": kernel.best_config.kwargs["ID"], "right": bool(torch.allclose(out, 2 * x)),
            "timed": sorted(c.kwargs["ID"] for c, t in kernel.configs_timings.items() if math.isfinite(t[0]))}


def scenario_checks_differ(rank, world, group):
    """The accuracy check on rank 0 only: its reference exchange is a collective the other rank
    would never make, so the ranks must refuse at once, not wait for a timeout."""
    from kernels import KERNELS

    if rank == 0:
        os.environ["TRITON_DIST_AUTOTUNE_CHECK_ACCURACY"] = "1"
    spec = KERNELS["add"]
    kernel = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
    x, y = spec.make_inputs("tiny", "cpu")
    try:
        with tdp.tuning_group(group):
            spec.launch(kernel, x, y)
        return {"error": None}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _every_front_end(rank, group):
    """One call per front end, each of a fresh tuner over a new key: the patched Autotuner, a
    subclass's own loop (batched through ``_bench``, and its own ``_batch_bench``), the
    function-level and the contextual tuner."""
    from test_subclass import LibTunerLike, NewerAutoTilingLike, _configs, _inc

    class AloneLike(LibTunerLike):
        """Prunes with its own ``prune_configs``: each candidate's ``_bench`` is timed alone."""

        def prune_configs(self, kwargs):
            return super().prune_configs(kwargs)

    from kernels import KERNELS

    spec = KERNELS["add"]
    x, y = spec.make_inputs("tiny", "cpu")
    step = _contextual_copy_step(rank)

    def subclass(cls):
        kernel = cls(_inc, _inc.arg_names, _configs()[:4], ["n"], ["out"], ["x"])
        n = 300
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](torch.zeros(n), torch.zeros(n), n)

    return {
        "kernel": lambda: spec.launch(triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit), x, y),
        "subclass": lambda: subclass(LibTunerLike),
        "subclass_alone": lambda: subclass(AloneLike),
        "subclass_batch_bench": lambda: subclass(NewerAutoTilingLike),
        "function": lambda: sleepy(rank)(1, autotune_pg=group),
        "contextual": lambda: step(torch.randn(64)),
    }


def _errors_of(fronts, group):
    errors = {}
    for name, call in fronts.items():
        started = time.monotonic()
        try:
            with tdp.tuning_group(group):
                call()
            errors[name] = None
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc} ({time.monotonic() - started:.1f}s)"
    return errors


def scenario_effort_differs(rank, world, group):
    """``TRITON_DIST_AUTOTUNE_EFFORT=full`` on rank 0, ``quick`` on rank 1: their screenings would
    make different collectives, so every front end refuses at once on every rank."""
    os.environ["TRITON_DIST_AUTOTUNE_EFFORT"] = "full" if rank == 0 else "quick"
    return {"errors": _errors_of(_every_front_end(rank, group), group)}


def scenario_frozen_differs(rank, world, group):
    """Frozen mode (``strict``) on rank 0 only: rank 0 would time nothing while rank 1 tunes with
    collectives, so every front end refuses at once on every rank instead of hanging."""
    if rank == 0:
        os.environ["TRITON_DIST_AUTOTUNE_FROZEN"] = "strict"
    return {"errors": _errors_of(_every_front_end(rank, group), group)}


def scenario_frozen_one_rank_with_a_stored_pick(rank, world, group):
    """A key tuned together (rank 0 keeps the pick); then frozen mode on rank 1 only, and a fresh
    tuner meets the key: the stored pick is every rank's, nothing is timed, so frozen mode differing
    does not matter there."""
    from kernels import KERNELS

    spec = KERNELS["add"]
    x, y = spec.make_inputs("tiny", "cpu")
    with tdp.tuning_group(group):
        tuned = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
        spec.launch(tuned, x, y)
        if rank == 1:
            os.environ["TRITON_DIST_AUTOTUNE_FROZEN"] = "strict"
        fresh = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
        spec.launch(fresh, x, y)
    return {"tuned": tuned.best_config.kwargs["BLOCK"], "fresh": fresh.best_config.kwargs["BLOCK"]}


def scenario_own_batch_bench_loses_other_configs(rank, world, group):
    """A subclass's own ``_batch_bench`` leaves out a config that failed to compile there, another on
    each rank (Triton-Ascend's drops failed compiles): a config missing on any rank fails on all, and
    every rank keeps the same pick."""
    from test_subclass import NewerAutoTilingLike, _configs, _inc

    class Losing(NewerAutoTilingLike):
        def _batch_bench(self, *args, configs, **kwargs):
            lost = configs[3] if rank == 0 else configs[2]  # the fastest two, one on each rank
            ms = {0: 5.0, 1: 4.0, 2: 1.0, 3: 1.0}
            return {c: [ms[i]] * 3 for i, c in enumerate(configs) if c is not lost}

    kernel = Losing(_inc, _inc.arg_names, _configs()[:4], ["n"], ["out"], ["x"])
    n = 300
    with tdp.tuning_group(group):
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](torch.zeros(n), torch.zeros(n), n)
    return {"pick": kernel.best_config.kwargs["BLOCK"],
            "timings": {c.kwargs["BLOCK"]: t[0] for c, t in kernel.configs_timings.items()}}


def scenario_one_request(rank, world, group):
    """Inside ``tuning_group``, every hook of one tuning sees one request, over that group."""
    from kernels import KERNELS
    from triton_dist_plugin import hookimpl

    seen = []

    class Watch:
        @hookimpl
        def tdp_prune_configs(self, request, configs):
            seen.append(("prune", id(request), request.group is group))

        @hookimpl(tryfirst=True)
        def tdp_search(self, request, candidates, evaluate, space, screen):
            seen.append(("search", id(request), request.group is group))

        @hookimpl(tryfirst=True)
        def tdp_time_candidate(self, request):
            seen.append(("time", id(request.tuning), request.tuning.group is group))

    tdp.register(Watch())
    spec = KERNELS["add"]
    x, y = spec.make_inputs("tiny", "cpu")
    with tdp.tuning_group(group):
        spec.launch(triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit), x, y)
    return {"hooks": sorted({h for h, _, _ in seen}), "requests": len({i for _, i, _ in seen}),
            "over_the_group": all(g for _, _, g in seen)}


def scenario_frozen_group(rank, world, group):
    """Tuned together once (only rank 0 keeps the pick on its disk), then, in frozen mode, a new
    key with fresh tuners: every rank launches rank 0's nearest pick, not what its own disk has."""
    from kernels import KERNELS

    spec = KERNELS["add"]
    tdp.register(RankCosts(rank))
    x, y = spec.make_inputs("tiny", "cpu")
    with tdp.tuning_group(group):
        spec.launch(triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit), x, y)
    os.environ["TRITON_DIST_AUTOTUNE_FROZEN"] = "nearest"
    kernel = triton.autotune(configs=spec.configs("cpu"), key=spec.key)(spec.jit)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tdp.tuning_group(group):
            out = spec.launch(kernel, x[:700], y[:700])
    assert torch.equal(out, x[:700] + y[:700])
    return {"pick": kernel.best_config.kwargs["BLOCK"]}


def scenario_environment(rank, world, group):
    """What a rank gets from its start: ``fork_server`` must give a forked one what a fresh one has."""
    import multiprocessing.process
    import random
    import site

    import numpy

    knobs = getattr(triton, "knobs", None)
    return {"home": os.environ["HOME"], "timeout": os.environ["TRITON_DIST_AUTOTUNE_TIMEOUT"], "cwd": os.getcwd(),
            "argv": sys.argv[1:], "triton_home": knobs.cache.home_dir if knobs else None,
            "start_dir": multiprocessing.process.ORIGINAL_DIR, "user_base": site.getuserbase(),
            "hash": hash("rank"), "random": random.random(), "numpy": float(numpy.random.random()),
            "seed": torch.initial_seed(), "torch": torch.randn(3).tolist(), "parent": os.getppid()}


def main():
    scenario, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if f"prepare_{scenario}" in globals():
        globals()[f"prepare_{scenario}"](rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    group = dist.new_group(list(range(world)))
    t0 = time.perf_counter()
    out = globals()[f"scenario_{scenario}"](rank, world, group)
    out["rank"], out["seconds"] = rank, time.perf_counter() - t0
    print(json.dumps(out, default=str), flush=True)
    sys.stderr.flush()
    # Leave without tearing gloo down: after a deliberate divergence a peer may be gone already.
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        import fork_server

        fork_server.serve(main)
    else:
        main()
