"""The hook bus: one pluggy ``PluginManager`` with the built-ins and third-party plugins.

Built-in behaviour is registered here as ordinary plugins (``tdp.timing``, ``tdp.reduce``,
``tdp.leader``, ``tdp.report``, ``tdp.generate``, ``tdp.store``, ``tdp.search``), marked
``trylast``, so a user's plugin replaces any of it just by answering first, or by
``plugin_manager().unregister(name="tdp.timing")``.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any, Callable, Optional

import pluggy

from . import distributed, hookspecs, timing
from .hookspecs import PROJECT, hookimpl  # noqa: F401  (re-exported: triton_dist_plugin.hookimpl)
from .reporting import report
from .store import filestore, records, tables
from .tiling.generate import BuiltinGenerator

_pm: Optional[pluggy.PluginManager] = None
_lock = threading.Lock()
TABLES = "tdp.tables"  # the built-in store of shipped tables: asked after every other (``cache_get``)
_entry_points_loaded = False


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide ``PluginManager`` (created with the built-ins on first use)."""
    global _pm
    if _pm is None:
        with _lock:
            if _pm is None:
                pm = pluggy.PluginManager(PROJECT)
                pm.add_hookspecs(hookspecs)
                pm.register(timing.BuiltinTiming(), name="tdp.timing")
                # Both trylast: pluggy calls the one registered first first, so the leader
                # strategy answers before MAX whenever it is chosen.
                pm.register(distributed.LeaderReduce(), name="tdp.leader")
                pm.register(distributed.MaxReduce(), name="tdp.reduce")
                pm.register(report.Reporter(), name="tdp.report")
                pm.register(BuiltinGenerator(), name="tdp.generate")
                # Both trylast, so called in this order: this machine's files, then the tables
                # installed libraries ship.
                pm.register(filestore.FileStore(), name=filestore.NAME)
                pm.register(tables.TableStore(), name=TABLES)
                from .search.model import BuiltinModel
                from .search.strategy import BuiltinSearch  # it calls back into the bus

                pm.register(BuiltinSearch(), name="tdp.search")
                pm.register(BuiltinModel(), name="tdp.model")
                _pm = pm
    return _pm


def load_entry_points() -> list[str]:
    """Load plugins declared in the ``triton_dist_plugin`` entry-point group (once).

    A misspelt hook name in any plugin fails here, at activation, instead of being ignored.
    """
    global _entry_points_loaded
    pm = plugin_manager()
    if not _entry_points_loaded:
        pm.load_setuptools_entrypoints(PROJECT)
        _entry_points_loaded = True
    pm.check_pending()
    return [name for name, _ in pm.list_name_plugin() if not name.startswith("tdp.")]


def register(plugin: Any, name: Optional[str] = None) -> str:
    """Register a plugin at run time; its hooks are checked against the specs now."""
    pm = plugin_manager()
    registered = pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError:
        pm.unregister(plugin)
        raise
    return registered


def unregister(plugin: Any = None, name: Optional[str] = None) -> Any:
    """Remove a plugin registered earlier (by object or by name)."""
    return plugin_manager().unregister(plugin, name=name)


def _impls(hook_name: str):
    """Implementations in pluggy's call order (tryfirst first, trylast last), wrappers skipped."""
    hook = getattr(plugin_manager().hook, hook_name)
    impls = reversed(hook.get_hookimpls())
    return [impl for impl in impls if not (impl.hookwrapper or getattr(impl, "wrapper", False))]


def implementers(hook_name: str) -> set:
    """The names of the plugins that implement ``hook_name``, wrappers included."""
    return {impl.plugin_name for impl in getattr(plugin_manager().hook, hook_name).get_hookimpls()}


def _call(impl, kwargs: dict) -> Any:
    return impl.function(**{name: kwargs[name] for name in impl.argnames})


def first_result(hook_name: str, check: Callable[[Any], Any], **kwargs: Any) -> Any:
    """Call a firstresult hook; ``check`` validates (and may normalise) the first non-None result.

    ``check`` raises ``TypeError`` on a bad result; the error is re-raised naming the plugin.
    """
    return first_answer(hook_name, check, **kwargs)[0]


def first_answer(hook_name: str, check: Callable[[Any], Any], **kwargs: Any) -> tuple[Any, Optional[str]]:
    """``first_result`` and the name of the plugin that gave it (None where none did): what
    timed a candidate is said where its times are shown."""
    for impl in _impls(hook_name):
        result = _call(impl, kwargs)
        if result is not None:
            try:
                return check(result), impl.plugin_name
            except TypeError as exc:
                raise PluginError(
                    f"plugin {impl.plugin_name!r} returned a bad result from {hook_name}: {exc}"
                ) from None
    return None, None


def cache_get(entry: Any, tables: Optional[bool] = None) -> Optional[tuple[str, dict]]:
    """``(store name, record)`` from the first store that has a valid record for ``entry``
    (``tdp_cache_get``), or None. Every record passes ``records.check`` here, whatever store it
    came from, and is returned in this version's layout (whatever format it was stored in): an
    invalid one is warned about (naming the store) and the next store is asked. The tables
    installed libraries ship (``tdp.tables``) are asked after every other store, ``trylast`` ones
    too; ``tables`` False asks the others alone, True the tables alone (a lookup of several places
    asks every place of the others first: a pick tuned here, or kept in a user's store, always
    beats a shipped one)."""
    impls = [i for i in _impls("tdp_cache_get") if tables is None or (i.plugin_name == TABLES) == tables]
    for impl in sorted(impls, key=lambda i: i.plugin_name == TABLES):  # stable: the tables last, else pluggy's order
        record = _call(impl, {"entry": entry})
        if record is None:
            continue
        if not isinstance(record, dict):
            raise PluginError(f"plugin {impl.plugin_name!r} returned {type(record).__name__} from tdp_cache_get; "
                              "expected the stored JSON object (a dict) or None")
        try:
            return impl.plugin_name, records.check(record, entry.kind)
        except records.RecordError as exc:
            warnings.warn(f"invalid autotune cache entry {where(entry, impl.plugin_name)} ({exc}); ignoring it (a "
                          "tuning of this key replaces it)", RuntimeWarning, stacklevel=4)
    return None


def where(entry: Any, store: str) -> str:
    """The entry as a warning names it: its file, or its id in the store that answered."""
    if store == filestore.NAME:
        return str(entry.path)
    return f"{entry.kind}:{entry.name}:{entry.digest} (from the store {store!r})"


def cache_put(entry: Any, record: dict) -> None:
    """Hand ``record`` to every store (``tdp_cache_put``). One store failing must not keep the
    others from the record, so each ``OSError`` is collected and raised after all as a
    :class:`StoreError`."""
    failed, kept = {}, []
    for impl in _impls("tdp_cache_put"):
        try:
            _call(impl, {"entry": entry, "record": record})
        except OSError as exc:
            failed[impl.plugin_name] = exc
        else:
            kept.append(impl.plugin_name)
    if failed:
        raise StoreError(failed, kept)


def prune(request: Any, configs: list) -> list:
    """Apply every ``tdp_prune_configs`` implementation in turn."""
    for impl in _impls("tdp_prune_configs"):
        kept = _call(impl, {"request": request, "configs": list(configs)})
        if kept is None:
            continue
        if not isinstance(kept, (list, tuple)):
            raise PluginError(
                f"plugin {impl.plugin_name!r} returned {type(kept).__name__} from tdp_prune_configs; "
                "expected a list of triton.Config or None"
            )
        if not kept:
            raise ValueError(
                f"plugin {impl.plugin_name!r} pruned every candidate of {request.kernel_name} for key "
                f"{request.key}; tdp_prune_configs must keep at least one config (return None for no opinion)"
            )
        configs = list(kept)
    return configs


def notify(record: Any) -> None:
    plugin_manager().hook.tdp_on_tuned(record=record)


def as_timing(value: Any) -> list[float]:
    """Normalise a timing to upstream's ``[p50, p20, p80]`` shape (a float repeats thrice)."""
    if isinstance(value, bool):
        raise TypeError("expected milliseconds (a float or a [p50, p20, p80] list), got a bool")
    if isinstance(value, (int, float)):
        value = [float(value)] * 3
    elif isinstance(value, (list, tuple)) and value and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        value = [float(v) for v in value]
        value += [value[0]] * (3 - len(value))
    else:
        raise TypeError(f"expected milliseconds (a float or a [p50, p20, p80] list), got {value!r}")
    if any(math.isnan(v) or v < 0 for v in value):
        raise TypeError(f"expected non-negative milliseconds, got {value!r}")
    return value


class PluginError(TypeError):
    """A plugin broke a hook's contract (a bad result); never mistaken for a failing candidate."""


class StoreError(OSError):
    """Stores that could not keep a record: ``failed`` (plugin name: its ``OSError``) and ``kept``
    (the names of those that did), so the warning can say where the pick still is."""

    def __init__(self, failed: dict, kept: list):
        super().__init__("; ".join(f"{name}: {exc}" for name, exc in failed.items()))
        self.failed, self.kept = failed, kept
