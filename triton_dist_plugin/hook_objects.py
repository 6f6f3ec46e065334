"""The objects hooks receive: what is being tuned, what its tuning finds, one candidate, the
result, and a cache entry."""

from __future__ import annotations

import warnings
from dataclasses import FrozenInstanceError, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Optional

INF3 = [float("inf")] * 3


@dataclass
class TuningFindings:
    """What a tuning finds out along the way (``request.found``): the plugin's own code and any
    plugin write here, never into the question (``TuningRequest``), which stays as it was asked."""

    #: why candidates were generated, kept or dropped, and how they were timed (``TuningRecord.notes``)
    notes: list = field(default_factory=list)
    #: the candidate the accuracy check takes as its reference first, where no author's order
    #: says (``configs=[]``: ``tdp_generate_configs`` may designate a conservative one), or None
    reference: Any = None
    #: a warm start: the candidates in the order the nearest tuned key ranked them (fastest
    #: first), or None; ``prior_key`` is that key; ``prior_unseen``: the candidates that key's
    #: (small) space did not hold, such as those ``configs=[]`` generated for this shape only
    prior: Optional[list] = None
    prior_key: Any = None
    prior_unseen: list = field(default_factory=list)
    #: ``tdp_rank_candidates``' predicted time of each candidate (lower is faster), or None;
    #: ``problem``: what the built-in model saw; ``model``: how the guided search went (see
    #: ``search/guided.py``), recorded with the pick
    ranking: Optional[list] = None
    problem: Any = None
    model: Optional[dict] = None
    #: what timed candidates where the built-in timer did not: a plugin's name (its
    #: ``tdp_time_candidate`` answered), or the kernel's own do_bench, with how many timings each gave
    timers: dict = field(default_factory=dict)
    #: those of ``timers`` that timed the full measurement (the times every view shows), once it ran
    shown_by: Optional[set] = None
    #: why a profiler session timed nothing in this tuning (CUPTI held elsewhere, no kernel
    #: launched): its later rounds are then timed by device events, with the same counts
    unprofiled: Optional[str] = None


_UNSET: Any = object()  # a finding not given to the constructor (None is a value: "no ranking")

#: The findings a request once held itself: still read there, and (deprecated) assigned there
#: (those added since, ``timers``, ``shown_by`` and ``unprofiled``, live in ``found`` alone).
FINDINGS = tuple(f.name for f in fields(TuningFindings) if f.name not in ("timers", "shown_by", "unprofiled"))


def _read_through(name: str) -> property:
    return property(lambda self: getattr(self.found, name), doc=f"``found.{name}``, read through the request.")


@dataclass(init=False)
class TuningRequest:
    """One tuning job: a kernel (or host function) and the key it is tuned for.

    Fixed once made (assigning a field raises ``FrozenInstanceError``), so that no search, model
    or plugin changes the question mid-tuning. ``nargs`` and ``kwargs`` are still plain dicts:
    they hold the launch's own arguments, which plugins read and copy as dicts; change neither.
    What the tuning finds goes to ``found`` (a ``TuningFindings``). The findings read through
    the request as before (``request.notes`` is ``request.found.notes``, the same list);
    assigning one on the request still lands in ``found``, with a ``DeprecationWarning``.
    """

    kernel_name: str
    key: tuple
    device: str
    #: named arguments of the launch (positional ones bound to their names)
    nargs: dict = field(default_factory=dict)
    #: launch keywords that are not kernel arguments (meta-parameters, ``num_warps``...)
    kwargs: dict = field(default_factory=dict)
    #: the ``Autotuner`` being tuned, when the job is a ``@triton.autotune`` kernel
    autotuner: Any = None
    #: the launch grid (a tuple or a function of the meta-parameters), for kernels
    grid: Any = None
    #: the ``torch.distributed`` group tuning together (None: this process alone)
    group: Any = None
    #: what the tuning finds out: notes, the reference, the warm start, the ranking, the model's verdict
    found: TuningFindings = field(default_factory=TuningFindings)

    def __init__(self, kernel_name: str, key: tuple, device: str, nargs: Optional[dict] = None,
                 kwargs: Optional[dict] = None, autotuner: Any = None, grid: Any = None, notes: Any = _UNSET,
                 group: Any = None, prior: Any = _UNSET, prior_key: Any = _UNSET, prior_unseen: Any = _UNSET,
                 ranking: Any = _UNSET, problem: Any = _UNSET, model: Any = _UNSET, reference: Any = _UNSET, *,
                 found: Optional[TuningFindings] = None) -> None:
        # The arguments, positions included, of the request that held its findings: plugins and
        # tests build requests so. Findings given beside ``found`` (``dataclasses.replace`` with
        # one) go to a copy of it: a request built from another never writes into that one's.
        given = {"notes": notes, "prior": prior, "prior_key": prior_key, "prior_unseen": prior_unseen,
                 "ranking": ranking, "problem": problem, "model": model, "reference": reference}
        given = {name: value for name, value in given.items() if value is not _UNSET}
        found = TuningFindings(**given) if found is None else replace(found, **given) if given else found
        question = {"kernel_name": kernel_name, "key": key, "device": device,
                    "nargs": {} if nargs is None else nargs, "kwargs": {} if kwargs is None else kwargs,
                    "autotuner": autotuner, "grid": grid, "group": group, "found": found}
        for name, value in question.items():
            object.__setattr__(self, name, value)

    def __copy__(self) -> TuningRequest:
        """A copy with findings of its own (as a copy of the request had before they moved)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        object.__setattr__(clone, "found", replace(self.found))
        return clone

    notes = _read_through("notes")
    reference = _read_through("reference")
    prior = _read_through("prior")
    prior_key = _read_through("prior_key")
    prior_unseen = _read_through("prior_unseen")
    ranking = _read_through("ranking")
    problem = _read_through("problem")
    model = _read_through("model")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FINDINGS:  # a plugin written when findings lived on the request
            warnings.warn(f"assigning request.{name} is deprecated: the tuning's findings live in "
                          f"request.found; assign request.found.{name}", DeprecationWarning, stacklevel=2)
            setattr(self.found, name, value)
        elif name in _QUESTION and name in self.__dict__:  # set once (a subclass's own __init__ may)
            raise FrozenInstanceError(f"cannot assign to field {name!r}: a TuningRequest is the question being "
                                      "tuned and does not change; what the tuning finds goes to request.found")
        else:  # an attribute of a plugin's own, hung on the request: as before
            object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _QUESTION or name in FINDINGS:
            raise FrozenInstanceError(f"cannot delete field {name!r} of a TuningRequest")
        object.__delattr__(self, name)


_QUESTION = frozenset(f.name for f in fields(TuningRequest))


@dataclass
class CandidateRequest:
    """One candidate to time; ``call()`` runs it once with every hook applied."""

    call: Callable[[], Any]
    config: Any
    kernel_name: str
    key: tuple
    device: str
    method: str
    n_warmup: Optional[int] = None
    n_repeat: Optional[int] = None
    quantiles: tuple = (0.5, 0.2, 0.8)
    tuning: Optional[TuningRequest] = None


@dataclass
class TuningRecord:
    """What a tuning decided, handed to ``tdp_on_tuned`` observers."""

    kernel_name: str
    key: tuple
    best_config: Any
    #: ``{config: [p50, p20, p80]}`` in ms after reduction; failed candidates are ``[inf]*3``
    timings: dict
    #: ``{config: "ExceptionType: message"}`` for every candidate that failed
    failures: dict
    bench_time: Optional[float]
    cache_hit: bool
    method: str
    device: str
    autotuner: Any = None
    notes: list = field(default_factory=list)
    #: the candidates measured fully; the others in ``timings`` hold a short screening round's time
    measured: list = field(default_factory=list)
    #: how the cost model's ranking did (``kept``, ``screened``, ``of``, ``rho``, ``recall``), or None
    model: Optional[dict] = None
    #: how sure the pick is: ``margin`` (the runner-up's time over the pick's, less 1), ``noise``
    #: (their relative spread), ``rounds`` (interleaved rounds run to separate them), ``confidence``
    #: (the share of those rounds the pick won) and ``tie`` (too close to tell: the first of the tied
    #: in the given order was picked), or None when fewer than two finalists ran
    decision: Optional[dict] = None
    #: what timed the candidates where it was not the built-in timer of ``method``: the plugins
    #: whose ``tdp_time_candidate`` answered (``"plugin 'name'"``), or the kernel's own do_bench
    timer: Optional[str] = None
    #: a cache hit's store, where it is not this machine's files: the store that answered (a cache
    #: store's, or ``tdp.tables``: a table an installed library ships)
    stored_in: Optional[str] = None


@dataclass(frozen=True)
class CacheEntry:
    """One persisted pick, as the store hooks (``tdp_cache_get``/``tdp_cache_put``) see it.

    A store on another medium keys on ``(kind, name, digest)``; ``path`` is where the built-in
    file store keeps it.
    """

    #: ``"kernel"`` (a ``@triton.autotune`` key) or ``"function"`` (a ``tune.autotune`` key)
    kind: str
    #: the kernel's name, or the function's ``module.qualname``
    name: str
    #: a stable id of the source, the hardware, the key and what else the pick was keyed on (its
    #: context; for a function entry of format 1 or 2, none) (the entry file's name, less ``.json``)
    digest: str
    path: Path
    #: the cache root ``path`` lies below: the file store refuses a symbolic link anywhere between
    #: the two (None: only the file and its own directory are checked)
    root: Optional[Path] = None
