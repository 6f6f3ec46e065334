"""The one tuning loop every front end uses: time each candidate, reduce, select.

Front ends (the patched ``Autotuner``, the function-level ``autotune``, the contextual tuner)
turn their own candidates into ``make_call(config)`` closures; the engine times them through
``tdp_time_candidate`` (or the kernel's own ``do_bench``), records why any failed, reduces the
timings through ``tdp_reduce_timings`` and picks the fastest valid one. What a failure is and
what upstream would have raised for it live in ``failures``; how much is measured, in ``policy``.

``loop`` holds ``run_candidates`` (the phases), ``steps`` one step of a search, ``screen`` what a
screening round keeps, ``rounds`` how candidates are timed and reduced, ``outcome`` the result and
the record.
"""

from ..failures import NOT_SEARCHED
from ..hook_objects import CandidateRequest
from .loop import run_candidates
from .outcome import Outcome, record, shown_timer
from .rounds import same_keys, time_one
from .screen import Screen

__all__ = ["NOT_SEARCHED", "CandidateRequest", "Outcome", "Screen", "record", "run_candidates", "same_keys",
           "shown_timer", "time_one"]
