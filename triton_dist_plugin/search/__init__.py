"""The search: which candidates of a large space are screened, in what order, and which go on to
be measured fully (the ``tdp_search`` hook). ``strategy`` holds the built-in plugin and the
choice between strategies, ``halving`` the default successive halving, ``tpe`` optuna's TPE
sampler, ``space`` the candidates as points on a grid of their parameters."""
