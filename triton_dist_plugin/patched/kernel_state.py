"""What the launch path knows: about each ``Autotuner`` (its ``KernelState``), and process-wide.

A ``KernelState`` holds what is derived once per tuner: the key's argument positions and the
launch keywords of each config, merged once and kept, so the cache-hit path does no more than
compute the key and look it up. The process-wide flags are set by ``patch`` (installed or not).
"""

from __future__ import annotations

import operator
import sys
import threading
import weakref
from typing import Any

from .. import _compat
from . import direct

#: True while the plugin is installed (``patch.activate`` sets it, ``deactivate`` clears it).
active = False
#: Autotuners that carry a per-instance fast ``run`` (removed again by ``deactivate``).
fast_instances: weakref.WeakSet[Any] = weakref.WeakSet()
current = threading.local()  # the TuningRequest of the tuning in progress on this thread
_DTYPE_STR: dict = {}

#: Launch options every Triton interpreter accepts besides kernel parameters.
_UPSTREAM_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def dtype_str(dtype: Any) -> str:
    """``str(dtype)``, memoised for torch's dtypes (the key needs it for every tensor argument on
    every launch). Only those are kept, so no other ``dtype`` finds one: its equality need not follow
    its text (``1``, ``True`` and ``1.0`` are equal, and upstream's keys tell them apart)."""
    try:
        text = _DTYPE_STR.get(dtype)
    except TypeError:  # an unhashable dtype
        return str(dtype)
    if text is None:
        text = str(dtype)
        if type(dtype) is getattr(sys.modules.get("torch"), "dtype", None):
            _DTYPE_STR[dtype] = text
    return text


class KernelState:
    """Per-``Autotuner`` facts derived once: key positions and each config's launch keywords.

    ``fast`` maps a raw key (key values, then the dtype *objects* of tensor arguments; for a launch
    with kernel arguments by keyword, first a token of its shape, see ``keyword_key``) to
    ``(config, launch keywords, direct launcher or None, upstream's key)``: what a hit needs,
    without turning dtypes into strings on every launch. A hit counts only while
    upstream's ``cache`` still holds that very config for that key, so every edit of ``cache``
    (set, replace, delete, clear, or a new dict) is honoured as upstream honours it.

    ``launch`` keeps each config's launch keywords with the ``all_kwargs()`` and ``pre_hook`` they
    came from: a config changed in place (a pruning function that sets ``num_stages`` per shape,
    or attaches a ``pre_hook``, also to configs another kernel shares) is launched as it is now,
    as upstream launches it. Every pruning asks every kernel to forget what changed
    (``forget_changed_everywhere``), and after a tuning the candidates it neither kept nor
    picked are dropped (``release``), so the table stays as small as what can still launch.
    """

    __slots__ = ("arg_names", "arg_set", "keys", "key_pos", "key_get", "min_args", "launch", "launchers", "name",
                 "fast", "shapes", "generate", "hints", "crossed", "interpreted", "rankings", "substituted",
                 "loop_picks", "__weakref__")

    def __init__(self, tuner: Any):
        self.arg_names = list(tuner.arg_names)
        self.arg_set = frozenset(self.arg_names)
        keys = tuner.keys
        # Triton-Ascend's AutoTilingTuner maps axis names to argument names.
        self.keys = list(keys.values()) if isinstance(keys, dict) else list(keys)
        self.key_pos = [self.arg_names.index(k) for k in self.keys if k in self.arg_set]
        self.key_get = _key_getter(self.key_pos)
        self.min_args = max(self.key_pos, default=-1) + 1
        self.launch: dict = {}  # id(config) -> (config, launch keywords, (all_kwargs(), pre_hook) they came from)
        self.launchers: dict = {}  # id(config) -> its direct launcher (None where none is usable)
        self.fast: dict = {}
        self.shapes: dict = {}  # (positional count, keyword names) -> the raw key of such launches, or None
        self.name = _compat.base_function(tuner.fn).__name__
        self.interpreted = _compat.is_interpreted(tuner.fn)
        self.hints = tuner.__dict__.get("tdp_hints") or {}
        self.crossed = False
        # key -> (its candidates' descriptions, fastest first; every candidate's description where
        # the space was small, else None), for warm starts
        self.rankings: dict = {}
        self.substituted: set = set()  # keys frozen mode gave another key's pick (never a nearest key)
        # A subclass's own loops, by this plugin's key (its own cache may key otherwise): the
        # fastest candidate each key's loops timed, ``(ms, config)``, which frozen mode's nearest reads.
        self.loop_picks: dict = {}
        flag = tuner.__dict__.get("tdp_generate")
        if flag is None:  # decorated before activation: configs=[] left upstream's single empty Config
            flag = len(tuner.configs) == 1 and not tuner.configs[0].kwargs and _has_open_tiles(tuner)
        self.generate = bool(flag)

    def key(self, args: tuple, kwargs: dict) -> tuple:
        """Upstream's tuning key: the ``key`` argument values, then every tensor's dtype."""
        if self.arg_set.isdisjoint(kwargs):
            n = len(args)
            key = [args[i] for i in self.key_pos if i < n]
            for arg in args:
                if hasattr(arg, "dtype"):
                    key.append(dtype_str(arg.dtype))
            return tuple(key)
        # Some kernel arguments came by keyword: follow upstream's ordering exactly.
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        named = {k: v for k, v in named.items() if k in self.arg_set}
        key = [named[k] for k in self.keys if k in named]
        key += [dtype_str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        return tuple(key)

    def raw_key(self, args: tuple, kwargs: dict) -> Any:
        """This launch's raw key in ``fast`` (what ``_fast_run`` computes), or None where it must
        take the full path: launch keywords besides ``grid`` and ``warmup``, a key argument missing,
        or a ``dtype`` that is not torch's (whose equality and hash agree with its ``str``, which
        upstream's key holds) or cannot be hashed."""
        if len(kwargs) == 2:
            if "grid" not in kwargs or "warmup" not in kwargs or len(args) < self.min_args:
                return None
            raw, given = self.key_get(args), args
        else:
            keyed = self.keyword_key(len(args), tuple(kwargs))
            if keyed is None:
                return None
            raw, given = keyed(args, kwargs), (*args, *kwargs.values())
        torch_dtype = getattr(sys.modules.get("torch"), "dtype", None)
        for a in given:
            dtype = getattr(a, "dtype", None)
            if dtype is not None and type(dtype) is not torch_dtype:
                return None
        try:
            hash(raw)
        except TypeError:
            return None
        if len(self.fast) >= _MOST_FAST:  # keys cleared from ``cache`` leave theirs here: start afresh
            self.fast.clear()
        return raw

    def keyword_key(self, arity: int, names: tuple) -> Any:
        """For launches with ``arity`` positional arguments and the keywords ``names`` (in their
        order, ``grid`` and ``warmup`` among them): a function ``(args, kwargs)`` giving their raw key
        in ``fast``, or None where such launches take the full path (a keyword that is no kernel
        argument, or one given positionally too). The key starts with a token of this shape (the
        keywords' order decides upstream's key), then holds what upstream's key reads."""
        shape = (arity, names)
        if shape not in self.shapes and len(self.shapes) < _MOST_SHAPES:
            self.shapes[shape] = _keyword_key(self.arg_names, self.keys, arity, names)
        return self.shapes.get(shape)

    def launch_kwargs(self, config: Any) -> dict:
        return self._entry(config)[1]

    def hit(self, config: Any, fn: Any, key: tuple) -> tuple:
        """What the fast path needs for ``config``, tuned for upstream's ``key``: (config, launch
        keywords, direct launcher or None, key)."""
        kwargs = self._entry(config)[1]
        launcher = self.launchers.get(id(config), _NO_LAUNCHER)
        if launcher is _NO_LAUNCHER:
            launcher = self.launchers[id(config)] = direct.Launcher(fn, kwargs) if direct.usable(fn) else None
        return (config, kwargs, launcher, key)

    def forget_changed(self, ids: set) -> None:
        """Of the configs ``ids`` (those a pruning was handed or returned: the only ones it can have
        changed), drop what was derived from any changed in place since: its next launch derives
        it again."""
        self._forget({i for i in ids & self.launch.keys() if _now(self.launch[i][0]) != self.launch[i][2]})

    def release(self, candidates: list, keep: list) -> None:
        """After a tuning: forget the candidates it derived launch keywords for that are neither
        kept (the kernel's own configs, the pick), so configs a pruning function builds anew for
        every key do not pile up (one still held elsewhere is derived again at its next launch)."""
        kept = {id(c) for c in keep}
        self._forget({id(c) for c in candidates if id(c) not in kept and id(c) in self.launch})

    def _forget(self, ids: set) -> None:
        for i in ids:
            self.launch.pop(i, None)
            self.launchers.pop(i, None)
        if ids:  # a snapshot (taken whole under the GIL): other threads add entries meanwhile
            for raw_key, hit in list(self.fast.items()):
                if id(hit[0]) in ids:
                    self.fast.pop(raw_key, None)

    def _entry(self, config: Any) -> tuple:
        entry = self.launch.get(id(config))
        seen = _now(config)
        if entry is None or entry[0] is not config or entry[2] != seen:
            kwargs = seen[0]
            if self.interpreted:
                # Compile options (Triton 3.2's warp-spec fields, Ascend's multibuffer, ...) mean
                # nothing to the interpreter: newer ones drop them, older ones reject them. Any
                # other kernel object gets every keyword, as upstream passes them.
                kwargs = {k: v for k, v in kwargs.items() if k in self.arg_set or k in _UPSTREAM_OPTIONS}
            if entry is not None:  # changed since: whatever was derived from it goes too
                self._forget({id(config)})
            entry = self.launch[id(config)] = (config, kwargs, (dict(seen[0]), seen[1]))
        return entry


def _now(config: Any) -> tuple:
    """What a config launches with now: its keywords and its ``pre_hook``."""
    return config.all_kwargs(), config.pre_hook


#: every kernel's state, so that a pruning that changes configs in place (shared ones too) reaches all
states: weakref.WeakSet = weakref.WeakSet()


def forget_changed_everywhere(configs: list) -> None:
    """After a pruning that was handed or returned ``configs``: every kernel (a config may be
    shared) forgets what it derived from those of them changed in place."""
    ids = {id(c) for c in configs}
    for state in list(states):
        if state.launch:
            state.forget_changed(ids)


NO_DTYPE = object()
_NO_LAUNCHER = object()


def _has_open_tiles(tuner: Any) -> bool:
    try:
        from ..tiling.analysis import analyse

        an = analyse(tuner.fn)
    except Exception:
        return False
    return any(not an.constexprs[name] for name in an.tiles)


def _key_getter(key_pos: list):
    """A function of the positional arguments giving the raw key: key values, then each argument's
    dtype object (a marker where it has none), one attribute lookup per argument."""
    if len(key_pos) == 1:
        (pos,) = key_pos
        return lambda args: (args[pos], *[getattr(a, "dtype", NO_DTYPE) for a in args])
    values = operator.itemgetter(*key_pos) if key_pos else (lambda args: ())
    return lambda args: (*values(args), *[getattr(a, "dtype", NO_DTYPE) for a in args])


_MOST_SHAPES = 64
_MOST_FAST = 4096


def _keyword_key(arg_names: list, keys: list, arity: int, names: tuple) -> Any:
    """See ``KernelState.keyword_key``: generated for one shape of launch, as Triton generates its binder."""
    given = [n for n in names if n not in ("grid", "warmup")]
    if len(given) != len(names) - 2 or arity > len(arg_names) or not set(given) <= set(arg_names[arity:]):
        return None
    where = {name: f"args[{i}]" for i, name in enumerate(arg_names[:arity])}
    where.update({name: f"kw[{name!r}]" for name in given})
    items = ["token", *(where[k] for k in keys if k in where)]
    items += [f"getattr({where[n]}, 'dtype', NO_DTYPE)" for n in [*arg_names[:arity], *given]]
    namespace = {"token": object(), "NO_DTYPE": NO_DTYPE}
    exec(f"def key(args, kw):\n    return ({', '.join(items)},)", namespace)  # noqa: S102
    return namespace["key"]


def state_of(tuner: Any) -> KernelState:
    state = tuner.__dict__.get("_tdp_state")
    if state is None:
        state = tuner.__dict__["_tdp_state"] = KernelState(tuner)
        states.add(state)
        tuner.__dict__.setdefault("nargs", None)  # upstream's run sets it each time and leaves None
    return state
