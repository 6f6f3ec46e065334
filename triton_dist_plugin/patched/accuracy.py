"""The accuracy check: each candidate run once on the same inputs and compared with a reference.

Enabled per kernel with ``check_accuracy=True`` or for all with
``TRITON_DIST_AUTOTUNE_CHECK_ACCURACY=1``; a candidate whose results differ is dropped before
any timing, with the argument and the difference as its reason.

The reference never depends on which candidates a search, the cost model or a warm start
happens to run first, since any of those may put a wrong candidate first. It is the kernel
author's first config (the seed's advice: put a stable configuration first), else the next in
the author's order when that one fails; for generated spaces (``configs=[]``), the candidate the
generator designates (``request.reference``: the built-in's conservative tiling), then the
rest. It is run for the check even where the search would not otherwise run it. A result with
NaN or Inf where the next working candidate has finite values is wrong, never a reference.
Where most candidates agree with each other and not with the reference, a warning names both.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

from .. import _callsite, distributed, failures, settings

ACCURACY_ENV = "TRITON_DIST_AUTOTUNE_CHECK_ACCURACY"


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


def _tolerance(tensor: Any) -> tuple[float, float]:
    name = str(tensor.dtype)
    if "float16" in name or "bfloat16" in name or "float8" in name:
        return 2e-2, 2e-2
    if "float" in name or "complex" in name:
        return 1e-3, 1e-3
    return 0.0, 0.0


def _floating(tensor: Any) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _nonfinite_over(result: dict, other: dict) -> Optional[str]:
    """The first argument where ``result`` holds NaN or Inf and ``other`` a finite value."""
    import torch

    for name, value in result.items():
        if _floating(value) and bool((~torch.isfinite(value) & torch.isfinite(other[name])).any()):
            return name
    return None


def _has_nonfinite(result: dict) -> bool:
    import torch

    return any(_floating(v) and not bool(torch.isfinite(v).all()) for v in result.values())


def _differs(result: dict, reference: dict) -> Optional[tuple[str, float]]:
    """``(argument, max abs diff)`` of the first argument that differs beyond its tolerance."""
    import torch

    for name, value in result.items():
        ref = reference[name]
        if _floating(value):
            rtol, atol = _tolerance(value)
            a, b = (value, ref) if value.is_complex() else (value.double(), ref.double())
            if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                return name, float((a - b).abs().nan_to_num(nan=float("inf")).max())
        elif not torch.equal(value, ref):
            return name, float((value.double() - ref.double()).abs().max()) if value.numel() else 0.0
    return None


class Gate:
    """The accuracy check of one tuning: the reference, found once, and every candidate checked
    against it as the search readies them (``check``), step after step.

    ``order``: the candidates in the order a reference is sought (``reference_order``);
    ``make_call(config)``: a call that runs it once with the launch's hooks; ``named``: every
    kernel argument of the launch (its tensors are compared: outputs and anything mutated);
    ``ready(configs)``: readies candidates outside the step being checked (compiles them, runs
    them in the isolation worker) and returns ``{config: reason}`` for those that failed, which
    are then never run here. Every run starts from the arguments as they were before tuning.
    """

    def __init__(self, name: str, order: list, make_call: Callable, named: dict,
                 ready: Optional[Callable[[list], dict]] = None):
        import torch

        self.name, self.order, self.make_call, self.ready = name, list(order), make_call, ready
        self.tensors = {n: v for n, v in named.items() if isinstance(v, torch.Tensor)}
        self.original = {n: v.clone() for n, v in self.tensors.items()}
        self.reference: Optional[tuple] = None  # (config, result)
        self.sought = False
        self.failed: dict = {}  # id(config) -> reason, found while seeking the reference
        self.spare: Optional[tuple] = None  # (config, result) run while seeking, checked later
        self.agree = 0
        self.pivot: Optional[list] = None  # [config, result, how many agree with it]

    def check(self, subset: list, failed: dict) -> dict:
        """``{config: reason}`` for those of ``subset`` that raise or disagree with the reference;
        ``failed``: those already known to fail (never run here). The arguments end as they began."""
        # The first step finds the arguments as they were before tuning; a later one, as timing
        # runs left them (an in-place kernel without restore_value changes its inputs, as upstream's do).
        before = self.original if not self.sought else {n: v.clone() for n, v in self.tensors.items()}
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
            for n, v in self.tensors.items():
                v.copy_(before[n])
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
        """Run candidates in reference order until one is a reference: it works, and any NaN or
        Inf it writes the next working candidate writes too."""
        self.sought = True
        ready = {id(c) for c in subset}
        tentative = None
        for config in self.order:
            if config in failed or not self._readied(config, ready):
                continue
            result = self._result(config)
            if result is None:
                continue
            if tentative is not None:
                name = _nonfinite_over(tentative[1], result)
                if name is None:
                    self.reference, self.spare = tentative, (config, result)
                    return
                self.failed[id(tentative[0])] = failures.Reason(
                    f"wrong result: argument {name!r} holds NaN or Inf where {config} has finite values")
                tentative = None
            if _has_nonfinite(result):
                tentative = (config, result)
                continue
            self.reference = (config, result)
            return
        self.reference = tentative  # nothing left to tell it from (or no candidate works: None)

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
        """The tensors after one run of ``config`` from the original arguments, or None if it
        raised (its reason kept)."""
        for n, v in self.tensors.items():
            v.copy_(self.original[n])
        try:
            self.make_call(config)()
        except Exception as exc:
            self.failed[id(config)] = failures.describe(exc)
            return None
        return {n: v.clone() for n, v in self.tensors.items()}

    # -- the others ------------------------------------------------------------------------------

    def _compare(self, config: Any) -> Optional[str]:
        if self.spare is not None and self.spare[0] is config:
            result, self.spare = self.spare[1], None
        else:
            result = self._result(config)
            if result is None:
                return self.failed[id(config)]
        if self.reference is None:  # no candidate works as a reference: nothing to compare with
            return None
        ref_config, reference = self.reference
        name = _nonfinite_over(result, reference)
        if name is not None:
            return f"wrong result: argument {name!r} holds NaN or Inf where {ref_config} has finite values"
        found = _differs(result, reference)
        if found is None:
            self.agree += 1
            return None
        self._tally(config, result)
        return f"wrong result: argument {found[0]!r} differs from {ref_config}'s (max abs diff {found[1]:.3g})"

    def _tally(self, config: Any, result: dict) -> None:
        """Count the wrong results that agree with the first one, for ``finish``'s warning."""
        if self.pivot is None:
            self.pivot = [config, result, 1]
        elif _differs(result, self.pivot[1]) is None:
            self.pivot[2] += 1
