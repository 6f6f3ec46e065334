"""The objects hooks receive: what is being tuned, one candidate, the result, and a cache entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

INF3 = [float("inf")] * 3


@dataclass
class TuningRequest:
    """One tuning job: a kernel (or host function) and the key it is tuned for."""

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
    #: why candidates were generated, kept or dropped (filled by ``tdp_generate_configs``)
    notes: list = field(default_factory=list)
    #: the ``torch.distributed`` group tuning together (None: this process alone)
    group: Any = None
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
    #: the candidate the accuracy check takes as its reference first, where no author's order
    #: says (``configs=[]``: ``tdp_generate_configs`` may designate a conservative one), or None
    reference: Any = None


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
