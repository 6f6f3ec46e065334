"""Which candidates a tuning compiles and screens, and which go on to be measured.

The engine hands ``tdp_search`` the candidates and ``evaluate(subset)``, which readies (compiles,
isolates, checks) the candidates of ``subset`` not yet ready, screens them with a short round,
reduces over the tuning group and returns their timings. A strategy calls it as often as it
likes and returns the finalists; the engine then measures those in longer rounds and picks the
fastest (the pick is always among the fully measured). Strategies must decide only from what
``evaluate`` returned (the same on every rank) and seeded randomness, so that every rank of a
group follows the same path.

Built in (``TRITON_DIST_AUTOTUNE_SEARCH``): ``halving``, the default (``halving.py``: a cold key
guided by the cost model's ranking (``model.py``, ``guided.py``), else small spaces screened whole
and large ones searched from a sample along neighbours; warm starts from the nearest tuned key),
and ``optuna`` (``tpe.py``: optuna's TPE sampler proposes each batch, without the model).
"""

from __future__ import annotations

from .. import settings
from ..hookspecs import hookimpl
from .halving import (
    BUDGET_ENV,
    SEARCH_ENV,
    WARM_ENV,
    WHOLE_ENV,
    budget,
    halving,
    ranked,
    seed,
    whole_limit,
)
from .space import Space, features_of

__all__ = ["BUDGET_ENV", "SEARCH_ENV", "WARM_ENV", "WHOLE_ENV", "BuiltinSearch", "Space", "budget",
           "features_of", "halving", "ranked", "seed", "whole_limit"]


class BuiltinSearch:
    """The built-in ``tdp_search``: ``halving``, or ``optuna`` when selected."""

    @hookimpl(trylast=True)
    def tdp_search(self, request, candidates, evaluate, space, screen):
        if settings.value(SEARCH_ENV) == "optuna":
            from . import tpe as search_optuna

            return search_optuna.tpe(request, candidates, evaluate, space, screen)
        return halving(request, candidates, evaluate, space, screen)
