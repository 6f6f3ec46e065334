"""The ``optuna`` search (``TRITON_DIST_AUTOTUNE_SEARCH=optuna``): optuna's TPE sampler proposes
the candidates to screen, batch after batch, from what was screened so far.

Each parameter of the space is a categorical choice over its values' positions; a proposal that
is not a candidate (the space may be pruned) screens the candidate closest to it, and optuna is
told that candidate's time. A failed candidate (out of resources, a compile given up) is told as
the worst time seen so far: TPE leaves failed trials out of its model, and kept proposing more of
the region that fails (a failed trial only while nothing has worked yet). The sampler is seeded from the
kernel and key and told only reduced timings, so every rank of a group proposes the same
batches. A warm start's best candidates (and those its key never had) are enqueued first. The search ends after
``Policy.patience`` batches without a gain of ``Policy.gain``, when every candidate was screened, or at
``TRITON_DIST_AUTOTUNE_SEARCH_BUDGET`` candidates (without one: ``Policy.optuna_cap``, 256 by default;
each batch waits for its slowest compile, so many batches cost more than their compiles).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from . import halving as search
from .space import Space


def search_space(space: Space) -> dict:
    from optuna.distributions import CategoricalDistribution

    return {name: CategoricalDistribution(list(range(len(space.values[name])))) for name in space.names}


def tpe(request: Any, candidates: list, evaluate: Callable[[list], dict], space: Space, screen: Any) -> list:
    try:
        import optuna
    except ImportError:
        raise ImportError(f"{search.SEARCH_ENV}=optuna needs optuna: `pip install optuna` (or "
                          "`pip install triton-dist-plugin[search]`), or unset it for the built-in halving") from None
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    policy = screen.policy
    batch, cap = policy.batch, min(len(candidates), search.settings.value(search.BUDGET_ENV) or policy.optuna_cap)
    sampler = optuna.samplers.TPESampler(seed=search.seed(request), n_startup_trials=batch, multivariate=True,
                                         constant_liar=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distributions = search_space(space)
    position = {id(c): i for i, c in enumerate(candidates)}
    prior = [c for c in (request.found.prior or []) if id(c) in position][: policy.warm_first]
    unseen = [c for c in request.found.prior_unseen or [] if id(c) in position] if prior else []
    for c in prior + unseen:
        study.enqueue_trial(dict(zip(space.names, space.coords[position[id(c)]])))
    screened: dict = {}
    best, stale = math.inf, 0
    while len(screened) < cap and stale < policy.patience:
        trials, chosen = [], []
        while len(trials) < batch and len(screened) + len({id(c) for c in chosen}) < cap:
            trial = study.ask(distributions)
            trials.append(trial)
            chosen.append(candidates[space.closest(tuple(trial.params[n] for n in space.names))])
            if len(trials) >= 4 * batch:
                break  # proposals keep landing on screened candidates
        new = [c for c in dict.fromkeys(chosen) if c not in screened]
        if new:
            screened.update(evaluate(new))
        finite = [t[0] for t in screened.values() if math.isfinite(t[0])]
        for trial, c in zip(trials, chosen):
            value = screened[c][0]
            if math.isfinite(value):
                study.tell(trial, value)
            elif finite:  # told as the worst seen, so that the sampler learns to avoid such candidates
                study.tell(trial, max(finite))
            else:
                study.tell(trial, state=TrialState.FAIL)
        now = min((t[0] for t in screened.values()), default=math.inf)
        stale = 0 if now < best * (1 - policy.gain) else stale + 1
        best = min(best, now)
        if len(screened) == len(candidates):
            break
    request.found.notes.append(f"optuna's TPE sampler searched {len(screened)} of {len(candidates)} candidates"
                               + (f", starting from the nearest tuned key {request.found.prior_key}" if prior else ""))
    return screen.survivors(screened)
