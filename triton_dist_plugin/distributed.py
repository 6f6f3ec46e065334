"""Distributed selection: every rank of a ``torch.distributed`` group ends with the same pick.

Ranks first agree (same key, same retained candidates, same cache decision), then time every
candidate in the same order, and reduce the timings with MAX over the group: the slowest rank's
time counts, so every rank computes the same minimum. Every collective here waits at most
``TRITON_DIST_AUTOTUNE_TIMEOUT`` seconds (default 300): a rank that diverged or died makes the
others fail with an error that says so, never hang.

Plain ``@triton.autotune`` kernels tune alone unless asked: ``with tuning_group(group):`` (or
``set_tuning_group(group)``) makes every kernel tuned in that scope reduce over ``group``.

Two strategies (``TRITON_DIST_AUTOTUNE_REDUCE``, or ``strategy=`` of ``tuning_group``): ``max``,
every rank times and the slowest rank's time counts; ``leader``, for ranks known to be alike,
only the group's rank 0 times and its timings are every rank's (``LeaderReduce``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import time
from datetime import timedelta
from typing import Any, Iterator, Optional

from . import policy, settings
from .hookspecs import hookimpl

TIMEOUT_ENV = "TRITON_DIST_AUTOTUNE_TIMEOUT"
STRATEGY_ENV = "TRITON_DIST_AUTOTUNE_REDUCE"
STRATEGIES = ("max", "leader")
_group: contextvars.ContextVar = contextvars.ContextVar("tdp_tuning_group", default=None)
_strategy: contextvars.ContextVar = contextvars.ContextVar("tdp_tuning_strategy", default=None)
_default_group: Any = None
_default_strategy: Optional[str] = None


class RankMismatch(RuntimeError):
    """Ranks entered one tuning with different keys, candidates or decisions."""


def timeout() -> timedelta:
    return timedelta(seconds=settings.value(TIMEOUT_ENV))


def _checked(strategy: Optional[str]) -> Optional[str]:
    if strategy is not None and strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not a tuning strategy; use one of {', '.join(STRATEGIES)}")
    return strategy


def set_tuning_group(group: Any, strategy: Optional[str] = None) -> None:
    """Make every ``@triton.autotune`` kernel tuned from now on reduce over ``group`` (None: alone).

    ``"world"`` means ``torch.distributed``'s default group. ``strategy`` (``"max"`` or
    ``"leader"``) overrides ``TRITON_DIST_AUTOTUNE_REDUCE`` for every tuning from now on.
    """
    global _default_group, _default_strategy
    _default_group, _default_strategy = group, _checked(strategy)


@contextlib.contextmanager
def tuning_group(group: Any = "world", strategy: Optional[str] = None) -> Iterator[None]:
    """Within this block, ``@triton.autotune`` kernels tune together over ``group``, with
    ``strategy`` (``"max"`` or ``"leader"``; None: as set outside the block)."""
    token, chosen = _group.set(group), _strategy.set(_checked(strategy) or _strategy.get())
    try:
        yield
    finally:
        _strategy.reset(chosen)
        _group.reset(token)


def strategy() -> str:
    """How the current tuning's ranks combine timings: the innermost ``tuning_group``'s strategy,
    else ``set_tuning_group``'s, else ``TRITON_DIST_AUTOTUNE_REDUCE``."""
    return _strategy.get() or _default_strategy or settings.value(STRATEGY_ENV)


def _resolve(group: Any) -> Any:
    if group is None:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("distributed tuning was asked for, but torch.distributed is not initialised; "
                           "call torch.distributed.init_process_group first")
    return dist.group.WORLD if isinstance(group, str) and group.lower() == "world" else group


def kernel_group() -> Any:
    """The group plain kernels tune over here: the innermost ``tuning_group`` or the default."""
    group = _group.get()
    return _resolve(group if group is not None else _default_group)


def function_group(pg: Any) -> Any:
    """The group for the function-level tuner: ``pg``, else WORLD when initialised, else None."""
    if pg is not None:
        return _resolve(pg)
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.group.WORLD
    return None


def writes_cache(group: Any) -> bool:
    """Only the agreed pick is stored, once per group: by its rank 0 (every process when alone).

    Ranks that lack the entry on their own disk still hit next time: ``agree`` shares the
    lowest hitting rank's pick with the group.
    """
    return group is None or rank(group) == 0


def rank(group: Any) -> int:
    if group is None:
        return 0
    import torch.distributed as dist

    return dist.get_rank(group)


def world_size(group: Any) -> int:
    if group is None:
        return 1
    import torch.distributed as dist

    return dist.get_world_size(group)


def _device_for(group: Any) -> str:
    import torch.distributed as dist

    return "cuda" if dist.get_backend(group) == "nccl" else "cpu"


def _wait(work: Any, what: str) -> None:
    limit = timeout().total_seconds()
    started = time.monotonic()
    try:
        ok = work.wait(timeout())
    except RuntimeError as exc:
        waited = time.monotonic() - started
        if waited < 0.9 * limit:  # not the timeout: a peer went away (its connection closed or reset)
            raise RuntimeError(f"{what}: the collective failed after {waited:.1f}s, well before the {limit:g}s "
                               f"timeout ({TIMEOUT_ENV}): another rank exited, crashed or closed its connection "
                               f"({exc})") from exc
        raise RuntimeError(f"{what}: no agreement across ranks within {limit:g}s ({TIMEOUT_ENV}); another "
                           f"rank failed, diverged or did not enter tuning ({exc})") from exc
    if ok is False:
        raise RuntimeError(f"{what}: timed out after {limit:g}s ({TIMEOUT_ENV})")


def all_reduce_max(values: list[float], group: Any, what: str = "timing reduction") -> list[float]:
    import torch
    import torch.distributed as dist

    flat = torch.tensor(values, dtype=torch.float64, device=_device_for(group))
    _wait(dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group, async_op=True), what)
    return flat.cpu().tolist()


def all_gather_ints(values: list[int], group: Any, what: str) -> list[list[int]]:
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.int64, device=_device_for(group))
    out = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    _wait(dist.all_gather(out, mine, group=group, async_op=True), what)
    return [t.cpu().tolist() for t in out]


def host_peers(group: Any, cache_id: Optional[str]) -> tuple[int, int]:
    """``(position, count)`` of this rank among the group's ranks that share its compile cache:
    same host and same cache directory (``cache_id``); None shares with no one."""
    import socket

    mine = digest((socket.gethostname(), cache_id) if cache_id is not None else ("alone", rank(group)))
    rows = all_gather_ints([mine], group, "finding the ranks that share this host's compile cache")
    peers = [i for i, row in enumerate(rows) if row[0] == mine]
    return peers.index(rank(group)), len(peers)


def failed_anywhere(failed: list[int], count: int, group: Any) -> dict[int, int]:
    """``{candidate: lowest rank}`` for every candidate some rank of ``group`` failed to compile."""
    flags = [1 if i in failed else 0 for i in range(count)]
    rows = all_gather_ints(flags, group, "sharing which candidates failed to compile")
    out: dict[int, int] = {}
    for r, row in enumerate(rows):
        for i, flag in enumerate(row):
            if flag and i not in out:
                out[i] = r
    return out


def digest(obj: Any) -> int:
    """A stable 63-bit number for ``repr(obj)`` (what ranks compare instead of the object)."""
    return int.from_bytes(hashlib.sha256(repr(obj).encode()).digest()[:8], "big") >> 1


def from_first(group: Any, value: Any, what: str) -> Any:
    """The group's rank 0's ``value`` (anything ``json`` writes), on every rank (a collective)."""
    if group is None:
        return value
    import json

    import torch
    import torch.distributed as dist

    data = json.dumps(value).encode() if rank(group) == 0 else b""
    size = all_gather_ints([len(data)], group, what)[0][0]
    buffer = torch.zeros(size, dtype=torch.uint8, device=_device_for(group))
    if data:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    _wait(dist.broadcast(buffer, src=dist.get_global_rank(group, 0), group=group, async_op=True), what)
    return json.loads(bytes(buffer.cpu().tolist()).decode())


def agree(group: Any, name: str, key: Any, candidates: list, cached_pick: Optional[int],
          checks: Optional[dict] = None, frozen: Optional[str] = None) -> Optional[int]:
    """Check that all ranks tune the same key over the same candidates, with the same ``checks``
    (the settings that decide which collectives a tuning makes, such as the accuracy check);
    agree on the cache. ``frozen``: this rank's frozen mode, which must be the same on every rank
    only where none has a stored pick (a frozen rank would time nothing while the others tune).

    Returns the pick every rank uses from a cache (the lowest rank that hit shares its pick) or
    None when every rank must tune. Raises ``RankMismatch`` on every rank when they differ.
    """
    import torch.distributed as dist

    # The effort steers every phase's counts and steps, hence the collectives each makes: part of
    # every check (named where it is not the default, so the default's digest is what it was).
    effort = policy.current().name
    checks = dict(sorted({**(checks or {}), **({"effort": effort} if effort != "default" else {})}.items()))
    rows = all_gather_ints([digest(key), digest(candidates), -1 if cached_pick is None else cached_pick,
                            digest(checks), digest(frozen)], group, f"agreeing on the tuning of {name}")
    ranks = dist.get_process_group_ranks(group) if hasattr(dist, "get_process_group_ranks") else list(range(len(rows)))
    fix = "keep rank-dependent values out of key_fn and prune_fn"
    for column, what, mine in ((0, "key", key), (1, "retained candidates", candidates), (3, "checks", checks)):
        _same(rows, ranks, column, name, what, mine, fix if column < 3 else
              "set the same TRITON_DIST_AUTOTUNE_* settings (EFFORT among them, and check_accuracy=) on every rank")
    hits = [row[2] for row in rows if row[2] >= 0]
    if not hits:
        _same(rows, ranks, 4, name, "frozen mode", frozen, "set the same TRITON_DIST_AUTOTUNE_FROZEN on every rank")
    return hits[0] if hits else None


def _same(rows: list, ranks: list, column: int, name: str, what: str, mine: Any, fix: str) -> None:
    """Raise ``RankMismatch`` (on every rank: each sees the same rows) where ``column`` differs."""
    if len({row[column] for row in rows}) < 2:
        return
    groups: dict = {}
    for rank, row in zip(ranks, rows):
        groups.setdefault(row[column], []).append(rank)
    split = "; ".join(f"ranks {r}" for r in groups.values())
    raise RankMismatch(f"{name}: ranks disagree on the {what} ({split}); this rank has {what} {mine!r}. "
                       f"Every rank must tune with the same key and checks and prune to the same candidates ({fix})")


class LeaderReduce:
    """The ``leader`` strategy: the group's rank 0 times, the others time nothing, and the
    reduction hands rank 0's timings to every rank.

    For ranks known to be alike (same GPU model, clocks and load): tuning costs one rank's GPU
    time, and no rank's noise moves the pick. The other ranks keep their GPU idle rather than
    time a confirmation sample, which would cost a second round and a collective for a check
    the premise makes moot. A candidate that failed on any rank (a compile failure, a wrong
    result) still counts as failed everywhere: non-leaders hold 0 for the candidates they skip
    and infinity for those that failed, and the reduction takes the maximum. A kernel's own
    ``do_bench`` is always called, on every rank, as upstream calls it.
    """

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        tuning = request.tuning
        group = getattr(tuning, "group", None)
        if group is None or strategy() != "leader" or rank(group) == 0:
            return None
        return 0.0  # skipped here: the leader's time replaces it

    @hookimpl(trylast=True)
    def tdp_reduce_timings(self, request, timings, group):
        if group is None or strategy() != "leader":
            return None
        return MaxReduce.reduce(request, timings, group, f"taking rank 0's timings of {request.kernel_name}")


class MaxReduce:
    """The built-in ``tdp_reduce_timings``: the slowest rank's time counts for each candidate."""

    @hookimpl(trylast=True)
    def tdp_reduce_timings(self, request, timings, group):
        if group is None:
            return timings
        return self.reduce(request, timings, group, f"reducing timings of {request.kernel_name}")

    @staticmethod
    def reduce(request: Any, timings: dict, group: Any, what: str) -> dict:
        values = all_reduce_max([v for t in timings.values() for v in t], group, what)
        return {config: values[3 * i : 3 * i + 3] for i, config in enumerate(timings)}
