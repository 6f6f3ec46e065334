"""The hooks of triton-dist-plugin: the reference for every plugin.

A plugin is any object (module, class instance) with functions named like the hooks below and
marked with :data:`triton_dist_plugin.hookimpl`. Register it at run time with
:func:`triton_dist_plugin.register`, or ship it in a distribution that declares an entry point in
the ``triton_dist_plugin`` group; those are loaded when the plugin is activated.

Implementations are called newest-registered first; mark one ``tryfirst=True`` or
``trylast=True`` to move it. The built-in behaviour (timing, reduction, reporting, the file
store) is registered the same way with ``trylast=True``, so any user plugin runs before it and
can replace it.
Hooks are always called with keyword arguments; an implementation may accept only the ones it
needs. Hook wrappers are not called for the ``firstresult``, pruning and cache-store hooks, whose
results are checked one implementation at a time so that a wrong result names its plugin.

A :class:`~triton_dist_plugin.TuningRequest` is the question being tuned, fixed once made: its
fields (``kernel_name``, ``key``, ``device``, ``nargs``, ``kwargs``, ``autotuner``, ``grid``,
``group``) cannot be assigned. What a tuning finds out along the way lives in ``request.found``
(a :class:`~triton_dist_plugin.TuningFindings`: ``notes``, ``reference``, ``prior``,
``prior_key``, ``prior_unseen``, ``ranking``, ``problem``, ``model``), where plugins write. Those
still read through the request (``request.notes`` is ``request.found.notes``, the same list);
assigning one on the request (``request.reference = c``) still lands in ``request.found`` but is
deprecated, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import pluggy

PROJECT = "triton_dist_plugin"
hookspec = pluggy.HookspecMarker(PROJECT)
#: Marks a plugin's hook implementations. It lives beside the specs, as in pluggy and pytest, so
#: the built-in plugins depend only on this module and the bus can import and register them.
hookimpl = pluggy.HookimplMarker(PROJECT)

# -------------------------------------------------------------------------------------------
# candidates
# -------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tdp_generate_configs(request):
    """Called when a ``@triton.autotune(configs=[])`` kernel needs candidates for a new key.

    :param request: the :class:`~triton_dist_plugin.TuningRequest` (kernel, key,
        named arguments, launch keywords, device).
    :returns: a non-empty list of ``triton.Config``, or None to let the next implementation
        decide. Stops at the first non-None result. An implementation may set
        ``request.found.reference`` to one of the configs it returns: the accuracy check's reference
        (``check_accuracy=True``), a conservative candidate it trusts to compute the right
        result; otherwise the first config it returns is. (Setting ``request.reference``, as
        plugins once did, still works, with a ``DeprecationWarning``.)
    """


@hookspec
def tdp_prune_configs(request, configs):
    """Called after Triton's own pruning (``prune_configs_by``), before any candidate is timed.

    Implementations are applied in turn: each receives the list the previous one kept.

    :param request: the :class:`~triton_dist_plugin.TuningRequest`.
    :param configs: the candidates still in the running (a list of ``triton.Config``).
    :returns: the list to keep (a subset, in any order), or None for no opinion. Returning an
        empty list is an error: pruning must never leave zero candidates silently.
    """


# -------------------------------------------------------------------------------------------
# search
# -------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tdp_rank_candidates(request, candidates):
    """Called before ``tdp_search``, when a key has candidates to screen (as for ``tdp_search``) and
    ``TRITON_DIST_AUTOTUNE_MODEL`` is on: predicts which candidates are worth compiling.

    The built-in (``tdp.model``, ``trylast``) is the cost model of ``search/model.py``: block sizes
    against the extents they tile, waves over the cores, a ``tl.dot`` tile's intensity, shared
    memory and registers. The built-in searches compile the best-ranked few first, then the
    neighbours of the best measured, and compile the rest when the ranking and the measurements
    disagree (see ``search/guided.py``); ``request.found.model`` then tells how it went (kept, screened,
    the rank correlation, and whether the best screened was among those kept: the recall).

    :param request: the :class:`~triton_dist_plugin.TuningRequest`.
    :param candidates: the candidates, in their given order.
    :returns: one number per candidate, in that order: a predicted time in any unit (lower is
        faster; ``inf``: predicted not to run), or None for no opinion (then every candidate is
        screened as without a model). Under a tuning group it must be the same on every rank:
        decide only from the candidates and the request. Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def tdp_search(request, candidates, evaluate, space, screen):
    """Called when a key has candidates to compare and screening is on (not with
    ``TRITON_DIST_AUTOTUNE_SEARCH=exhaustive``, a kernel's own ``do_bench``, or
    ``use_cuda_graph=True``, which measure every candidate fully): decides which candidates
    are compiled and screened, and which go on to be measured.

    The built-in (``tdp.search``, ``trylast``) is ``halving`` or ``optuna``
    (``TRITON_DIST_AUTOTUNE_SEARCH``; see ``search.py``).

    :param request: the :class:`~triton_dist_plugin.TuningRequest`; ``request.found.prior``
        holds the nearest tuned key's candidates, fastest first (a warm start), or None, and
        ``request.found.prior_unseen`` those that key's space did not hold (nothing is known of
        them); ``request.found.ranking`` what ``tdp_rank_candidates`` predicted (or None); append
        to ``request.found.notes`` to explain the path taken (they reach ``TuningRecord.notes``).
    :param candidates: the candidates, in their given order.
    :param evaluate: ``evaluate(subset) -> {candidate: [p50, p20, p80]}``: compiles the
        candidates of ``subset`` not yet compiled (in parallel), runs them in the isolation
        worker and checks their results where those are on, screens each with a short round
        and reduces over the tuning group. Failures time as infinity; a candidate screened
        before is not screened again. Under a group it is a collective: call it with the same
        subsets in the same order on every rank, deciding only from what it returned and from
        seeded randomness (``search.seed(request)``).
    :param space: a :class:`~triton_dist_plugin.search.strategy.Space`: each candidate's parameters as
        grid coordinates (``names``, ``values``, ``coords``), ``neighbours(i)`` and
        ``closest(coord)``.
    :param screen: the screening rules (:class:`~triton_dist_plugin.engine.Screen`);
        ``screen.survivors(timings)`` keeps the candidates near the best, ``screen.policy`` holds
        every number of the tuning's effort (``policy.Policy``; the older fields, such as
        ``screen.n_repeat``, still read from it).
    :returns: the finalists, a list of candidates (normally screened ones) that go on to the
        longer rounds; the pick is the fastest of them (an empty list: none worked, the tuning
        fails with every reason). None lets the next implementation decide. Stops at the first
        non-None result.
    """


# -------------------------------------------------------------------------------------------
# timing
# -------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tdp_time_candidate(request):
    """Called to time one candidate in one round of a tuning: so a candidate is timed several times,
    each time as that round asks (``request.n_repeat``): a short screening round
    (``Policy.screen_repeat`` runs, 5 by default; twice on a device, tuning alone, for those
    screened as they compiled), for the best few a longer second round
    (``second_repeat``, 25), the full measurement of the finalists (``n_repeat`` None: the method's
    default, or the count the steady measurement chose), and, for finalists too close to call, up
    to ``settle_rounds`` more (``docs/plugins.md`` has the counts). With the ``event`` method the
    second round and the full measurement are split into interleaved rounds, one call each. A small
    space is measured fully at once. The printout, the report and ``triton-dist-tune show`` name
    the plugin that answered as the timer. A stored key is read back, not timed again.

    Not called for a kernel that passed its own ``do_bench=`` to ``triton.autotune``: that one
    wins, as upstream.

    :param request: the :class:`~triton_dist_plugin.CandidateRequest`: ``call()`` runs
        the candidate once (pre/post hooks, ``reset_to_zero`` and ``restore_value`` included),
        ``config``, ``kernel_name``, ``key``, ``n_warmup``/``n_repeat`` (None: the method's
        default), ``device`` (``"cuda"``, ``"npu"``, ``"cpu"``), ``method`` (the resolved
        ``TRITON_BENCH_METHOD``; ``profiler`` for a short kernel's rounds after the screening,
        where it is unset on CUDA: ``docs/timing.md``) and ``quantiles``.
    :returns: milliseconds, as a float or upstream's ``[p50, p20, p80]`` list, or None to let
        the next implementation decide. Stops at the first non-None result. Raising marks the
        candidate as failed (timed as infinity, with the exception as its reason).
    """


@hookspec(firstresult=True)
def tdp_reduce_timings(request, timings, group):
    """Called after every candidate was timed, to agree on timings across ranks.

    :param request: the :class:`~triton_dist_plugin.TuningRequest`.
    :param timings: ``{config: [p50, p20, p80]}`` as measured by this process, in the order
        the candidates were timed (the same on every rank).
    :param group: the ``torch.distributed`` process group tuning together, or None when this
        process tunes alone.
    :returns: the reduced ``{config: [p50, p20, p80]}`` with the same keys, or None to let the
        next implementation decide. Stops at the first non-None result. The built-in takes the
        maximum over the group (the slowest rank decides), so every rank picks the same config.
    """


# -------------------------------------------------------------------------------------------
# cache stores
# -------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tdp_cache_get(entry):
    """Called to read a persisted pick: a kernel-level key (``@triton.autotune``) or a
    function-level one (``tune.autotune``) that this process has not tuned yet.

    Not called with ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1``, nor for kernels that do not persist
    (``TRITON_DIST_AUTOTUNE_PERSIST=0``, upstream's ``cache_results=True``).

    The built-in file store (``tdp.store``, ``trylast``) reads ``entry.path``; a store registered
    without ``trylast`` is asked before it, and ``unregister(name="tdp.store")`` leaves the
    registered stores alone. The tables installed libraries ship (``tdp.tables``) are asked
    after every store, ``trylast`` or not: a pick tuned here, or kept in a user's store, beats a
    shipped one. Whatever store answers, the record is checked as a file's is (the
    layout of its format, an older one read in the current layout; key, context, pick still among
    the candidates, versions with ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``); one that fails is
    not used. One lookup asks for up to six ``entry`` places, in order: the key's own, then where
    more thorough tunings put theirs (the search ``exhaustive``, the effort ``full``: a pick of a
    harder search serves an easier one), and, for a function-level key, the place earlier formats
    gave it (its digest covered no context) right after the default setting's; every other
    store is asked for every place before the tables are. Only
    these lookups go through stores: directory scans (frozen mode's nearest key,
    ``triton-dist-tune`` list/show/export/clear, manifest import) and the ``.log`` beside a
    function-level entry read and write the local cache directory only.

    :param entry: the :class:`~triton_dist_plugin.hook_objects.CacheEntry`: ``kind`` (``"kernel"``
        or ``"function"``), ``name``, ``digest`` (a stable id of the source, hardware, key and
        context) and ``path`` (the built-in file store's place for it). Stores on other media key on
        ``(kind, name, digest)``.
    :returns: the stored JSON object (a dict, as ``tdp_cache_put`` received it), or None to let
        the next store answer (absent, unreadable, unreachable: warn and return None). Stops at
        the first non-None result; anything but a dict is a ``PluginError`` naming the plugin.
    """


@hookspec
def tdp_cache_put(entry, record):
    """Called once a key was tuned, to keep its pick: every store is called, in turn.

    Under a tuning group only the agreed pick is stored, once per group: rank 0 of the group
    calls this; the other ranks agree on its hit at their next start.

    :param entry: the :class:`~triton_dist_plugin.hook_objects.CacheEntry` (as for ``tdp_cache_get``).
    :param record: the entry as a JSON object (a dict of JSON types); ``tdp_cache_get`` must
        return an equal one.
    :returns: ignored. A store that cannot keep the record raises ``OSError`` (or a subclass):
        the other stores are still called, and the tuning warns and keeps its pick in memory,
        as for an unwritable cache directory. Any other exception propagates.
    """


# -------------------------------------------------------------------------------------------
# results
# -------------------------------------------------------------------------------------------


@hookspec
def tdp_on_tuned(record):
    """Called once a key has a pick: after timing, after a disk-cache hit (the plugin's persisted
    picks or upstream's ``cache_results``), or when an untuned key is launched without timing
    (during CUDA graph capture, with a fallback: no timings, a note says so).

    For observers (logs, progress, reports); the return value is ignored.

    :param record: the :class:`~triton_dist_plugin.TuningRecord`: kernel name, key,
        every candidate's timing and failure reason, which candidates were measured fully
        (``measured``; the others hold a short screening round's time), the pick, how long tuning
        took, whether the result came from the disk cache, and the timing method. Kernel-level
        records are keyed by ``triton.Config``; function-level ones by each configuration's
        description (``{'BLOCK': 128}``).
    """
