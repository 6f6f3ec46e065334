"""The built-in observer: what ``TRITON_PRINT_AUTOTUNING=1`` prints once a key is tuned."""

from __future__ import annotations

import math
import sys

from .. import _compat
from ..hookspecs import hookimpl
from . import pick_reason


def _stored(record) -> str:
    """Where a hit's pick was read: the disk cache, a cache store, or a library's pick table."""
    store = getattr(record, "stored_in", None)
    if store == "tdp.tables":
        return "a pick table an installed library ships"
    return f"the cache store {store!r}" if store else "the disk cache"


def format_record(record) -> str:
    """Every candidate with its time or failure, the pick marked, as a few readable lines.

    The candidates measured fully come first; those a screening round dropped follow under their
    own heading, with that short round's time (not comparable with a full measurement). A cache
    hit's record holds the stored entry's times and which of them were full measurements, so it
    prints the same way as the tuning that wrote it.
    """
    timer = f"timed by {record.timer}" if getattr(record, "timer", None) else f"{record.method} timing"
    lines = [
        f"Triton autotuning for function {record.kernel_name},",
        f"with key as {record.key},",
        f"finished after {record.bench_time or 0.0:.2f}s ({timer} on {record.device}"
        + (f", from {_stored(record)}: the times of the tuning that stored it" if record.cache_hit else "")
        + "),",
    ]
    lines += [f"   {note}" for note in getattr(record, "notes", [])]
    fully = {id(c) for c in getattr(record, "measured", [])}
    head, screened, full_ms = [], [], []  # screened: dropped after a short screening round; not comparable
    def is_pick(config) -> bool:  # a function-level hit's pick is a description made anew: equal, not the same
        return config is record.best_config or isinstance(config, str) and config == record.best_config

    for config, timing in record.timings.items():
        mark = "*" if is_pick(config) else " "
        shown = f"{timing[0]:.4f} ms" if math.isfinite(timing[0]) else f"failed: {record.failures.get(config, 'inf')}"
        line = f" {mark} {config}: {shown}"
        is_screened = fully and id(config) not in fully and math.isfinite(timing[0])
        (screened if is_screened else head).append(line)
        if not is_screened and not is_pick(config):
            full_ms.append(timing[0])
    pick = record.timings.get(record.best_config, [None])[0]
    why = pick_reason.line(pick, full_ms, getattr(record, "decision", None))
    if screened:
        lines.append("   measured fully" + (" (the pick is the fastest of these):" if why is None else ":"))
    lines += head
    if why is not None:
        lines.append(f"   {why}")
    if screened:
        lines.append("   screened out (a short round each): not comparable with the full measurements above")
        lines += screened
    lines.append(f"best config selected: {record.best_config};")
    return "\n".join(lines)


class Reporter:
    @hookimpl(trylast=True)
    def tdp_on_tuned(self, record):
        if _compat.print_autotuning():
            print(format_record(record), flush=True)


def progress_bar(total: int, name: str, leader: bool = True):
    """A progress bar on rank 0, only on a terminal and only when there is something to wait for."""
    if not leader or total < 2 or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=f"autotune {name}", leave=False, file=sys.stderr)
