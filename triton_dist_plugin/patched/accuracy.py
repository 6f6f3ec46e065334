"""The accuracy check: each candidate run once on the same inputs and compared with a reference.

Enabled per kernel with ``check_accuracy=True`` or for all with
``TRITON_DIST_AUTOTUNE_CHECK_ACCURACY=1``; a candidate whose results differ is dropped before
any timing, with the argument and the difference as its reason.

The reference never depends on which candidates a search, the cost model or a warm start
happens to run first, since any of those may put a wrong candidate first. It is the kernel
author's first config (the seed's advice: put a stable configuration first), else the next in
the author's order when that one fails; for generated spaces (``configs=[]``), the candidate the
generator designates (``request.found.reference``: the built-in's conservative tiling), then the
rest. It is run for the check even where the search would not otherwise run it. A result with
NaN or Inf where one of the next few working candidates has finite values is wrong, never a
reference.
Where most candidates agree with each other and not with the reference, a warning names both.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

from .. import _callsite, distributed, failures, settings
from .comparison import Arguments, differs, has_nonfinite, nonfinite_over

ACCURACY_ENV = "TRITON_DIST_AUTOTUNE_CHECK_ACCURACY"
#: a candidate writing NaN or Inf is the reference only if none of this many next working
#: candidates writes a finite value there (running more would compile much of a large space)
WITNESSES = 3


def accuracy_check_enabled(instance: Any) -> bool:
    flag = instance.__dict__.get("tdp_check_accuracy")
    return bool(flag) if flag is not None else settings.value(ACCURACY_ENV)


def reference_order(configs: list, author: list, designated: Any = None) -> list:
    """``configs`` in the order a reference is sought: ``designated`` first (a generator's pick),
    then by position in ``author`` (the kernel's own configs; pruning may reorder them, as a
    ``perf_model`` does, or rebuild them: then an equal config's position counts), then as given."""
    place = {id(c): i for i, c in enumerate(author)}
    equal: dict = {}
    try:
        for i, c in enumerate(author):
            equal.setdefault(c, i)
    except TypeError:  # a config with unhashable values: identity alone
        equal = {}

    def position(item: tuple) -> tuple:
        i, config = item
        if config is designated:
            return (-1, i)
        found = place.get(id(config))
        if found is None:
            try:
                found = equal.get(config)
            except TypeError:
                found = None
        return (len(author) if found is None else found, i)

    return [c for _, c in sorted(enumerate(configs), key=position)]


class Gate:
    """The accuracy check of one tuning: the reference, found once, and every candidate checked
    against it as the search readies them (``check``), step after step.

    ``order``: the candidates in the order a reference is sought (``reference_order``);
    ``make_call(config, capture)``: a call that runs the candidate once with the launch's hooks
    and calls ``capture()`` as soon as the kernel has run, before any hook puts arguments back
    (``restore_value`` would otherwise hide what it wrote); ``named``: every kernel argument of the
    launch (what it can write is compared: ``comparison.launch_tensors``); ``ready(configs)``:
    readies candidates outside the step being checked (compiles them, runs them in the isolation
    worker) and returns ``{config: reason}`` for those that failed, which are then never run
    here. Every run starts from the arguments as they were before tuning.
    """

    def __init__(self, name: str, order: list, make_call: Callable, named: dict,
                 ready: Optional[Callable[[list], dict]] = None):
        self.name, self.order, self.make_call, self.ready = name, list(order), make_call, ready
        self.arguments = Arguments(named)
        self.reference: Optional[tuple] = None  # (config, result)
        self.sought = False
        self.failed: dict = {}  # id(config) -> reason, found while seeking the reference
        self.spares: dict = {}  # id(config) -> result, run while seeking and checked later
        self.agree = 0
        self.pivot: Optional[list] = None  # [config, result, how many agree with it]

    def check(self, subset: list, failed: dict) -> dict:
        """``{config: reason}`` for those of ``subset`` that raise or disagree with the reference;
        ``failed``: those already known to fail (never run here). The arguments end as they began."""
        # The first step finds the arguments as they were before tuning; a later one, as timing
        # runs left them (an in-place kernel without restore_value changes its inputs, as upstream's do).
        before = None if not self.sought else self.arguments.state()
        wrong: dict = {}
        try:
            if not self.sought:
                self._seek(subset, failed)
            for config in subset:
                if config in failed or (self.reference is not None and config is self.reference[0]):
                    continue
                reason = self.failed.get(id(config)) or self._compare(config)
                if reason is not None:
                    wrong[config] = reason
        finally:
            self.arguments.put(before)
        return wrong

    def anchor(self, group: Any = None) -> Any:
        """The candidate a search screens whatever else it does: the reference, once sought (None
        if no candidate works). Under a group each rank sought its own from its own results, so
        the ranks take the latest in the reference order of theirs (a collective): the first that
        can be right on every rank."""
        mine = next((i for i, c in enumerate(self.order) if self.reference is not None and c is self.reference[0]), -1)
        if group is not None and distributed.world_size(group) > 1:
            mine = max(p[0] for p in distributed.all_gather_ints([mine], group, f"agreeing on {self.name}'s "
                                                                                 "accuracy reference"))
        return self.order[mine] if mine >= 0 else None

    def finish(self) -> None:
        """Warn once if most candidates agree with each other and not with the reference."""
        if self.pivot is None or self.reference is None or self.pivot[2] < 2 or self.pivot[2] <= self.agree + 1:
            return
        warnings.warn(
            f"{self.name}: {self.pivot[2]} candidates agree with each other and not with the accuracy check's "
            f"reference {self.reference[0]} (agreed with by {self.agree} others), for example {self.pivot[0]}; "
            "they were dropped as wrong. The reference is the first config that works, in the kernel's own "
            "order: if it is the wrong one, put a config you trust first.",
            RuntimeWarning, stacklevel=_callsite.stacklevel())

    # -- the reference ---------------------------------------------------------------------------

    def _seek(self, subset: list, failed: dict) -> None:
        """Walk the reference order to the first candidate that works and writes no NaN or Inf
        where one of the next ``WITNESSES`` working candidates has a finite value."""
        self.sought = True
        ready = {id(c) for c in subset}
        todo = iter(c for c in self.order if c not in failed)
        run: list = []  # (config, result) of the working candidates run so far, in order

        def working(i: int) -> Optional[tuple]:
            while len(run) <= i:
                config = next(todo, None)
                if config is None:
                    return None
                result = self._result(config) if self._readied(config, ready) else None
                if result is not None:
                    run.append((config, result))
            return run[i]

        i = 0
        while (found := working(i)) is not None:
            config, result = found
            if has_nonfinite(result):
                witnesses = [w for w in map(working, range(i + 1, i + 1 + WITNESSES)) if w is not None]
                wrong = next(((name, w[0]) for w in witnesses
                              if (name := nonfinite_over(result, w[1])) is not None), None)
                if wrong is not None:
                    self.failed[id(config)] = failures.Reason(
                        f"wrong result: argument {wrong[0]!r} holds NaN or Inf where {wrong[1]} has finite values")
                    i += 1
                    continue
            self.reference = found
            break
        self.spares = {id(c): r for c, r in run if self.reference is None or c is not self.reference[0]}

    def _readied(self, config: Any, ready: set) -> bool:
        """A candidate outside the step is readied first; False if that failed."""
        if id(config) in ready or self.ready is None or id(config) in self.failed:
            return id(config) not in self.failed
        found = self.ready([config])
        if config in found:
            self.failed[id(config)] = found[config]
            return False
        return True

    def _result(self, config: Any) -> Optional[dict]:
        """What one run of ``config`` from the original arguments wrote (``Arguments.state``), or
        None if it raised (its reason kept)."""
        self.arguments.put()
        captured: list = []
        try:
            self.make_call(config, lambda: captured.append(self.arguments.state()))()
        except Exception as exc:
            self.failed[id(config)] = failures.reason_of(exc)
            return None
        return captured[0] if captured else self.arguments.state()

    # -- the others ------------------------------------------------------------------------------

    def _compare(self, config: Any) -> Optional[str]:
        result = self.spares.pop(id(config), None)
        if result is None:
            result = self._result(config)
            if result is None:
                return self.failed[id(config)]
        if self.reference is None:  # no candidate works as a reference: nothing to compare with
            return None
        ref_config, reference = self.reference
        name = nonfinite_over(result, reference)
        if name is not None:
            return f"wrong result: argument {name!r} holds NaN or Inf where {ref_config} has finite values"
        found = differs(result, reference)
        if found is None:
            self.agree += 1
            return None
        self._tally(config, result)
        return f"wrong result: argument {found[0]!r} differs from {ref_config}'s (max abs diff {found[1]:.3g})"

    def _tally(self, config: Any, result: dict) -> None:
        """Count the wrong results that agree with the first one, for ``finish``'s warning."""
        if self.pivot is None:
            self.pivot = [config, result, 1]
        elif differs(result, self.pivot[1]) is None:
            self.pivot[2] += 1
