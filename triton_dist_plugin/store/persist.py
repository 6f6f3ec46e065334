"""Kernel-level picks on disk: a key one process tuned is never timed again by another.

Every key a ``@triton.autotune`` kernel tunes is stored as one JSON file under
``<Triton's cache directory>/triton_dist/kernels/<kernel name>/``, so clearing or redirecting
Triton's cache (``TRITON_CACHE_DIR``) resets them, as it does upstream's own ``cache_results``;
``TRITON_DIST_AUTOTUNE_DIR`` moves them to its ``kernels/`` folder. An entry is keyed on at least
what upstream's disk cache keys on (Triton's hash, the backend's hash, the kernel's
``cache_key``, the environment variables that change compilation, the tuning key and every
candidate) plus the hardware and what the plugin adds (its version, the timing method, the
search and its effort, the accuracy check and isolation): a pick is never reused under a check it was not made
with, nor after an upgrade. Reads and writes go through the store hooks
(``tdp_cache_get``/``tdp_cache_put``), whose records pass ``records.check`` first. The nearest
stored key (warm starts, frozen mode's nearest key) is found in the directory's index
(``index``) without reading the other entries; the few nearest are then read from the directory
and checked in full (the same check, this kernel, source, hardware and setting, the key the
index claimed) before one is used. ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1`` never reads; with
``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1`` the recorded versions of torch and the rest must match
too. ``TRITON_DIST_AUTOTUNE_PERSIST=0`` turns it off; so does upstream's own disk cache
(``cache_results=True``), which then keeps its meaning for that kernel.

A stored pick counts only if it is still one of the kernel's current candidates (compared by
their description); otherwise the key is tuned again.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import os
import threading
from pathlib import Path
from typing import Any, Optional

from .. import _compat, settings
from . import cache, describe, filestore, fingerprint, index, keys, manifest, predict, records

ENV = "TRITON_DIST_AUTOTUNE_PERSIST"
FORMAT = cache.FORMAT  # the same record layout as function-level entries
DIRECTORY = "kernels"
TRIES = 8  # the most entries a lookup of the nearest stored key reads
_READ: dict = {}  # (folder, name) -> (stat, checked record, record): frozen mode's neighbours, read once
_READ_MOST = 64  # entries kept...
_READ_BYTES = 8 << 20  # ...and their files' bytes at most (held parsed, about 3x that): oldest go first
_READ_LOCK = threading.Lock()


def context(device: str, configs: list, method: str, accuracy: bool, isolated: bool) -> dict:
    """What a pick depends on besides the kernel's source, the hardware and the key (the search
    and its effort as function entries have them: ``fingerprint.tuning_context``)."""
    described = [f"{describe.describe(c)} | {c}" for c in configs]
    return {"triton": fingerprint.triton_hash(), "backend": fingerprint.backend_hash(device),
            "env": fingerprint.compile_env(), "plugin": describe.versions().get("triton-dist-plugin", "?"),
            "method": method, **fingerprint.tuning_context(),
            "accuracy": bool(accuracy), "isolated": bool(isolated),
            "configs": hashlib.sha256("\n".join(described).encode()).hexdigest()}


def _tagged(n: int, stream: Any) -> Any:
    """``(distance, n, name)`` for each ``(distance, name)`` of ``stream``: merged streams keep their order."""
    for claimed, name in stream:
        yield claimed, n, name


def _same_setting(theirs: Any, ours: dict) -> bool:
    """Another key's entry made under the same context, or a more thorough search's (its
    candidates may differ: pruning and generation depend on the key)."""
    return isinstance(theirs, dict) and fingerprint.serves({k: v for k, v in theirs.items() if k != "configs"},
                                                           {k: v for k, v in ours.items() if k != "configs"})


def enabled(instance: Any) -> bool:
    return settings.value(ENV) and not getattr(instance, "cache_results", False)


def source_digest(fn: Any) -> str:
    """The kernel's source and the sources of the jit functions it calls (Triton's ``cache_key``)."""
    jit = _compat.jit_function(fn)
    key = getattr(jit, "cache_key", None)
    if isinstance(key, str):
        return key
    return hashlib.sha256(describe.source_of(_compat.base_function(fn)).encode()).hexdigest()


class KernelStore(cache.EntryStore):
    """The persisted picks of one kernel on one machine."""

    kind = "kernel"

    def __init__(self, name: str, fn: Any, device: str, world: int, configs: list, method: str,
                 accuracy: bool = False, isolated: bool = False):
        super().__init__(name, source_digest(fn), describe.hardware(device, world),
                         cache.kernel_base() / DIRECTORY / cache.safe_name(name), cache.kernel_root(),
                         context(device, configs, method, accuracy, isolated))
        self.configs = list(configs)  # a row's index is its position here

    def read(self, key: Any, configs: list) -> Optional[tuple]:
        """The stored pick's position in ``configs``, the stored timings of those of ``configs`` it
        timed (as upstream's ``configs_timings`` holds them), where the entry was found (its
        file, or the store that answered), those of ``configs`` it measured fully (the other
        timings are a screening round's), how the pick was decided and what timed, and the store
        that answered where it was not the file store (for the views, as after a tuning): the
        fields of ``job.Found``; None when there is no usable entry."""
        if settings.value(cache.ALWAYS_TUNE_ENV):
            return None  # before the manifest: nothing is read at all
        manifest.load_from_env()
        found = self.lookup(key, self._ours)
        if found is None:
            return None
        where, record, store = found
        described = [describe.describe(c) for c in configs]
        if record["pick_config"] not in described:
            return None
        stored = {c["config"]: c["timing"] for c in record["candidates"]}
        timings = {c: _timing(stored[d]) for c, d in zip(configs, described) if d in stored}
        fully = {c["config"] for c in record["candidates"] if c["measured"]}
        measured = [c for c, d in zip(configs, described) if d in fully and c in timings]
        return described.index(record["pick_config"]), timings, where, measured, record.get("decision"), \
            record.get("timer"), filestore.other_than_files(store)

    def _ours(self, record: dict) -> bool:
        """An entry of this kernel, source and hardware (any key, any context)."""
        return record.get("kernel") == self.name and record.get("source") == self.source and \
            record.get("hardware") == self.hw

    def _nearest(self, key: Any, picks: Optional[set] = None, itself: bool = True, reuse: bool = False):
        """``(stored key, record)`` of the stored keys nearest ``key`` that pass every check,
        nearest first (``itself``: ``key`` too, stored under other candidates): at most ``TRIES``
        entries are read, each once (``reuse``: once per process, while unchanged on disk)."""
        signature = keys.signature(key)
        if signature is None:
            return
        vector = keys.vector(key)
        streams = [_tagged(n, index.nearest(self.dir, self.root, index.identity(self.name, self.source, self.hw, c,
                                                                                  signature), vector, picks,
                                            catch_up=n == 0)) for n, c in enumerate(self.contexts())]
        seen: set = set()
        setting_of: dict = {}  # a stored key -> the first setting it was found under
        # Merged by distance, then by setting (this one's first: merge primes them in order, and
        # this one's index catches up first), so a key stored under several gives its own first.
        for claimed, n, name in heapq.merge(*streams):
            if name in seen:  # an entry written again has a row per write
                continue
            if len(seen) >= TRIES:
                return
            seen.add(name)
            found = self._read(name, key, claimed) if reuse else \
                self._usable(filestore.read_json(self.dir / name, self.root), name, key, claimed)
            if found is None or not (itself or not _same_key(found[0], key)):
                continue
            if setting_of.setdefault(repr(found[0]), n) != n:
                continue  # that key again, from a more thorough setting: one neighbour per key
            yield found

    def _read(self, name: str, key: Any, claimed: float) -> Optional[tuple]:
        """``_usable`` of the entry ``name``, its file read (and checked) once for the process while
        its size and time stay: frozen mode's misses read the same neighbours again and again."""
        try:
            st = os.stat(self.dir / name, follow_symlinks=False)
        except OSError:
            return None
        stat = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)
        with _READ_LOCK:
            held = _READ.get((str(self.dir), name))
        if held is None or held[0] != stat:
            record = filestore.read_json(self.dir / name, self.root)
            try:
                held = (stat, records.check(record, "kernel"), record)
            except records.RecordError:
                held = (stat, None, record)
            with _READ_LOCK:
                _READ.pop((str(self.dir), name), None)
                if st.st_size <= _READ_BYTES:  # one larger is read each time, and takes no other's place
                    while _READ and (len(_READ) >= _READ_MOST or
                                     sum(h[0][1] for h in _READ.values()) + st.st_size > _READ_BYTES):
                        _READ.pop(next(iter(_READ)))
                    _READ[(str(self.dir), name)] = held
        return self._usable(held[2], name, key, claimed, checked=held[1])

    def _usable(self, record: Any, name: str, key: Any, claimed: float, checked: Any = False) -> Optional[tuple]:
        """``(its key, the record in this version's layout)`` if ``record`` is a valid entry of
        this kernel, source, hardware and setting at its own place, as far from ``key`` as the
        index claimed. ``checked``: ``records.check`` of it, already made (None: it failed)."""
        try:
            current = records.check(record, "kernel") if checked is False else checked
        except records.RecordError:
            return None
        if current is None:
            return None
        if not self._ours(current) or not _same_setting(current["context"], self.context):
            return None
        if describe.entry_digest(current["source"], current["hardware"], current["key"],
                                 records.id_context(record, "kernel")) != name[:32]:
            return None
        if describe.versions_refused(current["versions"]):
            return None  # made under other versions of the software, which the setting refuses
        stored = keys.parse(current["key"])
        if stored is None or not math.isclose(keys.distance(stored, key), claimed, rel_tol=1e-9, abs_tol=1e-12):
            return None
        return stored, current

    def nearest_pick(self, key: Any, configs: list) -> Optional[tuple[Any, Any]]:
        """``(stored key, config)``: the nearest stored key whose pick is still one of ``configs``,
        with that config (for frozen mode's nearest key); None if there is none."""
        described = {describe.describe(c): c for c in configs}
        for stored, record in self._nearest(key, {index.pick_digest(d) for d in described}):
            if record["pick_config"] in described:
                return stored, described[record["pick_config"]]
        return None

    def frozen_pick(self, key: Any, configs: list, fill: Any = None) -> Optional[tuple[Any, Any, bool]]:
        """``(stored key, config, trusted)`` for frozen mode's nearest: from the stored keys nearest
        ``key`` whose picks are still among ``configs``, the config ``predict.choose`` gives (the
        nearest key's pick, or where the data trusts it the one good across them: ``trusted``),
        with the nearest of those keys; None if there is none. ``fill(key, config)``: how much of
        the machine a config's programs keep busy at a key (``patched/machine_fill``), if known."""
        described = {describe.describe(c): c for c in configs}
        neighbours, failed = [], set()
        for stored, record in self._nearest(key, {index.pick_digest(d) for d in described}, reuse=True):
            if record["pick_config"] in described:
                neighbours.append((stored, predict.measured(record), record["pick_config"]))
                failed.update(c["config"] for c in record["candidates"] if c.get("failure"))
            if len(neighbours) >= predict.MOST:
                break
        if not neighbours:
            return None
        # The same order whatever order the index gave them in; a config that failed at any never chosen.
        neighbours.sort(key=lambda n: (keys.distance(key, n[0]), repr(n[0])))
        by_name = None if fill is None else (lambda at, name: fill(at, described[name]))
        pick, trusted = predict.choose(key, neighbours, [d for d in described if d not in failed], by_name)
        nearest = neighbours[0]
        return nearest[0], described[pick if pick in described else nearest[2]], trusted

    def nearest_ranking(self, key: Any) -> Optional[tuple[Any, tuple[list, Optional[list]]]]:
        """``(stored key, (ranking, space))`` of the nearest stored key: its candidates
        (descriptions), fastest first, the pick leading, and every candidate of its space where
        that was kept (else None); for warm starts. None if there is none."""
        for stored, record in self._nearest(key, itself=False):  # a warm start is from another key
            rows = [c for c in record["candidates"] if c["ms"] is not None]
            order = [c["config"] for c in sorted(rows, key=lambda c: c["ms"])]
            pick = record["pick_config"]
            space = record.get("space")
            return stored, ([pick] + [d for d in order if d != pick], space if isinstance(space, list) else None)
        return None

    def record(self, key: Any, best: Any, timings: dict, failures: dict, measured: list, method: str,
               bench_time: Optional[float], space: Optional[list] = None, notes: Optional[list] = None,
               model: Optional[dict] = None, decision: Optional[dict] = None, timer: Optional[str] = None) -> dict:
        """The entry ``store`` writes (its arguments are ``store``'s)."""
        rows = _rows(self.configs, best, timings, failures, measured)
        return self.full(key, {
            "pick": next((r["index"] for r in rows if r["config"] == describe.describe(best)), -1),
            "pick_config": describe.describe(best), "method": method, "bench_time_s": bench_time,
            "candidates": rows,
            **({"space": space} if space is not None else {}),
            **({"notes": [str(n)[:1000] for n in notes[:100]]} if notes else {}),
            **({"model": dict(model)} if model else {}),
            **({"decision": dict(decision)} if decision else {}),
            **({"timer": timer} if timer else {}),
        })

    def store(self, key: Any, best: Any, timings: dict, failures: dict, measured: list, method: str,
              bench_time: Optional[float], space: Optional[list] = None, notes: Optional[list] = None,
              model: Optional[dict] = None, decision: Optional[dict] = None, timer: Optional[str] = None) -> Path:
        """Hand the entry to every store (``tdp_cache_put``); a store's ``OSError`` is raised after
        all. ``space``: every candidate's description (small spaces; for warm starts); ``notes``:
        the tuning's notes (how long each step took; for the report); ``model`` and ``decision``:
        how the cost model did and how the pick was decided, ``timer`` what timed where it was not
        the built-in timer (``TuningRecord``'s fields). An entry
        that would not pass ``records.check`` (a pick that failed on this rank, say) is not kept."""
        entry = self.entry(key)
        cache.put_checked(entry, self.record(key, best, timings, failures, measured, method, bench_time, space,
                                             notes, model, decision, timer))
        return entry.path


def _same_key(stored: Any, key: Any) -> bool:
    try:
        return bool(stored == key)
    except Exception:  # noqa: BLE001 - a part of the user's key that cannot be compared
        return True


def _rows(configs: list, best: Any, timings: dict, failures: dict, measured: list) -> list:
    """The candidates as the entry lists them (``records.row``): each once (the pick's own row for
    its description), at its position in ``configs`` (one tuned beside them after these)."""
    position = {id(c): i for i, c in enumerate(configs)}
    fully = {id(c) for c in measured}
    rows: dict = {}
    for c, t in timings.items():
        described = describe.describe(c)
        if described in rows and c is not best:
            continue
        index = position.get(id(c), len(configs) + len(rows))
        rows[described] = records.row(index, described, t, failures.get(c), id(c) in fully)
    return list(rows.values())


def _timing(value: Any) -> Any:
    if isinstance(value, list):
        return [float(v) if isinstance(v, (int, float)) else math.inf for v in value]
    return float(value) if isinstance(value, (int, float)) else math.inf
