"""Every environment variable the package reads: name, type, default and meaning, in one table.

Values are read when used (a test or a long-lived process may change them between tunings),
always through ``value(name)``, which parses and checks them; ``validate()`` checks them all at
once before any tuning work starts, so a bad value fails with the variable's name and what it
accepts rather than halfway through a collective. Variables that belong to Triton or torch are
listed too (``owner``), so this table is the whole story; their owners check them.

``python -m triton_dist_plugin.settings`` prints the table in ``docs/settings.md``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

_ON = ("1", "true", "yes", "on", "y")
_OFF = ("0", "false", "no", "off", "n")


class SettingError(ValueError):
    """An environment variable holds a value the plugin cannot use."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # what the docs call its type
    default: str  # as the docs show it
    meaning: str
    parse: Optional[Callable[[str], Any]] = None  # raw text -> value; raises ValueError when invalid
    accepts: str = ""  # what an error message says is valid
    owner: str = "triton-dist-plugin"


def _bit(default: bool) -> Callable[[str], bool]:
    """``1`` on, ``0`` off, unset the default."""

    def parse(raw: str) -> bool:
        if raw == "":
            return default
        if raw in ("0", "1"):
            return raw == "1"
        raise ValueError

    return parse


def _flag(default: bool) -> Callable[[str], bool]:
    def parse(raw: str) -> bool:
        text = raw.strip().lower()
        if text == "":
            return default
        if text in _ON:
            return True
        if text in _OFF:
            return False
        raise ValueError

    return parse


def _optional_bit(raw: str) -> Optional[bool]:
    """``1`` on, ``0`` off, unset: decided case by case (None)."""
    if raw.strip() == "":
        return None
    if raw.strip() in ("0", "1"):
        return raw.strip() == "1"
    raise ValueError


def _count(raw: str) -> Optional[int]:
    """A whole number >= 0; unset means "the CPU count"."""
    if raw.strip() == "":
        return None
    value = int(raw.strip())
    if value < 0:
        raise ValueError
    return value


def _number(default: float, zero: bool = False) -> Callable[[str], float]:
    """A finite number above 0 (``zero``: at least 0); unset means ``default``."""
    def parse(raw: str) -> float:
        if raw.strip() == "":
            return default
        value = float(raw.strip())
        if not (value >= 0 if zero else value > 0) or value == float("inf"):  # NaN fails both
            raise ValueError
        return value

    return parse


MIN_SECONDS, MAX_SECONDS = 0.001, 86400.0
_SECONDS = "a number of seconds from 0.001 to 86400 (a day)"


def _seconds_or_never(default: float) -> Callable[[str], float]:
    """``_seconds``, or ``0`` for never."""
    seconds = _seconds(default)
    return lambda raw: 0.0 if raw.strip() in ("0", "0.0") else seconds(raw)


def _seconds(default: float) -> Callable[[str], float]:
    """Seconds from a millisecond to a day: a shorter timeout has no effect (every wait takes
    longer), a longer one overflows the clocks it is handed to; unset means ``default``."""
    def parse(raw: str) -> float:
        if raw.strip() == "":
            return default
        value = float(raw.strip())
        if not MIN_SECONDS <= value <= MAX_SECONDS:  # NaN fails too
            raise ValueError
        return value

    return parse


def _choice(default: str, *choices: str, aliases: Optional[dict] = None) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        text = raw.strip().lower()
        text = (aliases or {}).get(text, text)
        if text == "":
            return default
        if text not in choices:
            raise ValueError
        return text

    return parse


METHODS = ("event", "profiler", "npu", "cudagraph", "wall")

SETTINGS: tuple[Setting, ...] = (
    Setting("TRITON_DIST_PLUGIN_DISABLE", "flag", "off",
            "`import triton_dist_plugin` patches nothing and loads no plugins", _flag(False),
            "1/true/yes/on/y or 0/false/no/off/n"),
    Setting("TRITON_BENCH_METHOD", "choice", "`event` (`wall` under the interpreter)",
            "how candidates are timed: `event`, `profiler` (`npu`), `cudagraph` or `wall` (unset on CUDA, a "
            "short kernel's rounds after the screening by the profiler); see timing.md",
            _choice("", *METHODS, aliases={"wallclock": "wall", "cuda_graph": "cudagraph"}),
            ", ".join(METHODS)),
    Setting("TRITON_DIST_AUTOTUNE_SEARCH", "choice", "`halving`",
            "which candidates are compiled and screened (see search.md): `halving` screens a space whole up to "
            "`TRITON_DIST_AUTOTUNE_SEARCH_WHOLE` candidates, else a sample and then the neighbours of the best, "
            "and halves the survivors through longer rounds; `optuna`: optuna's TPE sampler proposes them "
            "(`pip install optuna`); `exhaustive`: no screening, every candidate measured fully",
            _choice("halving", "halving", "optuna", "exhaustive"), "halving, optuna, exhaustive"),
    Setting("TRITON_DIST_AUTOTUNE_EFFORT", "choice", "`default`",
            "how much a tuning measures (see search.md): `quick` screens fewer candidates for fewer runs and settles "
            "a tie in fewer rounds (a shorter first call, a pick more exposed to noise); `full` screens more, for "
            "longer (for tables tuned ahead of time); every number each preset sets is in `policy.py`",
            _choice("default", "quick", "default", "full"), "quick, default, full"),
    Setting("TRITON_DIST_AUTOTUNE_SEARCH_WHOLE", "count", "the effort's (`128`; `full`: `256`)",
            "spaces of up to this many candidates are screened whole (compiled up front) when no tuned key "
            "of the kernel is near; larger ones are searched, compiling on demand", _count,
            "a whole number >= 0, such as 128"),
    Setting("TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "count", "`0` (no cap)",
            "the most candidates a search compiles and screens for one key (`halving` and `optuna`); `0`: "
            "`halving` stops when no neighbour of its best candidates is left, `optuna` after three batches "
            "without a 1% gain or 256 candidates", _count, "a whole number >= 0, such as 300"),
    Setting("TRITON_DIST_AUTOTUNE_MODEL", "0/1", "`1`",
            "`1`: a cold key's candidates are ranked by a cost model first, and `halving` compiles its best few and "
            "their neighbours, falling back to the whole space where the model and the times disagree (see "
            "search.md); `0`: no model", _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_WARM_START", "0/1", "`1`",
            "`1`: a new key of a tuned kernel screens the nearest tuned key's best candidates first and "
            "stops when their neighbours bring nothing better; `0`: every key starts cold", _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_CHECK_ACCURACY", "0/1", "`0`",
            "`1`: check every kernel's candidates that does not pass `check_accuracy`", _bit(False), "0 or 1"),
    Setting("TRITON_AUTOTUNE_PARALLEL_COMPILE", "0/1", "`1`",
            "`0`: compile each candidate at its first timed call", _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_COMPILE_PROCESSES", "count", "CPU count",
            "forked workers that compile candidates into Triton's disk cache; `0`: none", _count,
            "a whole number >= 0, such as 8"),
    Setting("TRITON_DIST_AUTOTUNE_COMPILE_WORKERS", "count", "CPU count",
            "threads that compile what the workers did not", _count, "a whole number >= 0, such as 8"),
    Setting("TRITON_DIST_AUTOTUNE_COMPILE_TIMEOUT", "seconds", "`300`",
            "seconds the forked workers get before the rest compiles in threads", _seconds(300.0),
            f"{_SECONDS}, such as 300"),
    Setting("TRITON_DIST_AUTOTUNE_COMPILE_STRAGGLER", "number", "`5`",
            "a candidate still compiling once the rest of its step is in, after this many times the step's "
            "median compile (and at least 10 s), is given up and never timed (not under a tuning group, nor where "
            "the kernel's own `pre_hook`/`post_hook` or `do_bench` watches each candidate); "
            "`0`: wait for every compile", _number(5.0, zero=True), "a number >= 0, such as 5"),
    Setting("TRITON_DIST_DIRECT_LAUNCH", "flag", "on",
            "`0`: cache-hit launches go through `JITFunction.run` instead of the direct launcher", _flag(True),
            "1/true/yes/on/y or 0/false/no/off/n"),
    Setting("TRITON_DIST_COMPILED_HIT", "flag", "on",
            "`0`: the direct launcher's cache hits run its Python path instead of the compiled one (built once per "
            "machine with the C compiler into Triton's cache)", _flag(True), "1/true/yes/on/y or 0/false/no/off/n"),
    Setting("TRITON_DIST_AUTOTUNE_TIMEOUT", "seconds", "`300`",
            "how long each collective of distributed tuning waits for the other ranks", _seconds(300.0),
            f"{_SECONDS}, such as 300"),
    Setting("TRITON_DIST_AUTOTUNE_REDUCE", "choice", "`max`",
            "how ranks of a tuning group combine timings: `max` (every rank times, the slowest counts) or "
            "`leader` (rank 0 times for all)", _choice("max", "max", "leader"), "max, leader"),
    Setting("TRITON_DIST_AUTOTUNE_ON_CAPTURE", "choice", "`error`",
            "a key never tuned, met while a CUDA graph is captured: `error` raises before anything is enqueued; "
            "`fallback` launches the nearest tuned key's pick (else the first config) and warns",
            _choice("error", "error", "fallback"), "error, fallback"),
    Setting("TRITON_DIST_AUTOTUNE_FROZEN", "choice", "unset",
            "a key neither in memory nor on disk is never timed: `strict` raises, `nearest` launches the nearest "
            "tuned key's pick (else the first config); both record the miss", _choice("", "strict", "nearest"),
            "strict, nearest (unset: tune as usual)"),
    Setting("TRITON_DIST_AUTOTUNE_ISOLATE", "0/1", "on for `configs=[]` candidates",
            "run each candidate once in a worker process first, so one that crashes or hangs fails there, not "
            "in this process; `1`: for every kernel, `0`: never", _optional_bit, "0 or 1 (unset: generated only)"),
    Setting("TRITON_DIST_AUTOTUNE_ISOLATE_FORK", "0/1", "`1`",
            "fork the isolation worker from this process where that is safe (no GPU driver initialised here, no "
            "other thread, no module being imported: see failure-modes.md), ready at once; else, and with `0`, "
            "it is a fresh interpreter, which imports torch and Triton again (seconds)", _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_ISOLATE_IDLE", "seconds", "`5`",
            "how long the isolation worker keeps its GPU context (some hundreds of MB, made with its first job) "
            "after the last tuning that used it; then a fresh worker that holds no GPU memory takes its place; `0`: "
            "kept for the life of the process", _seconds_or_never(5.0), f"0, or {_SECONDS}"),
    Setting("TRITON_DIST_AUTOTUNE_ISOLATE_TIMEOUT", "seconds", "`30`",
            "how long one candidate may run in the isolation worker before it counts as hung", _seconds(30.0),
            f"{_SECONDS}, such as 30"),
    Setting("TRITON_DIST_AUTOTUNE_MANIFEST", "path", "unset",
            "a manifest from `triton-dist-tune export`, imported into the cache before the first lookup; entries "
            "from other hardware or versions are skipped with a warning", lambda raw: raw, "a file path"),
    Setting("TRITON_DIST_AUTOTUNE_TABLES", "0/1", "`1`",
            "`0`: ignore the pick tables installed libraries ship (entry-point group "
            "`triton_dist_plugin.tables`, see picks.md); `1`: use them after this machine's own picks",
            _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_DIR", "path", "`$HOME/.triton_dist/autotune`",
            "where the function-level picks and the misses log (`misses.jsonl`) are kept; set, it also holds the "
            "kernel-level picks, in `<dir>/kernels/` (unset, they are kept in Triton's cache directory, "
            "`$TRITON_CACHE_DIR/triton_dist/kernels/`)", lambda raw: raw,
            "a directory path"),
    Setting("TRITON_DIST_AUTOTUNE_SHARED", "0/1", "`0`",
            "`1`: the cache directories are shared with other users (a team's cache): entries and directories "
            "owned by another user are read, still validated and never through a symbolic link; `0`: only this "
            "user's are (see security.md)", _bit(False), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_PERSIST", "0/1", "`1`",
            "`0`: do not store kernel-level picks on disk (nor read them); each process tunes its own keys",
            _bit(True), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "0/1", "`0`",
            "`1`: never read the disk cache (function- and kernel-level); every new key is tuned and its entry "
            "rewritten", _bit(False), "0 or 1"),
    Setting("TRITON_DIST_AUTOTUNE_VERSION_CHECK", "0/1", "`0`",
            "`1`: use a disk entry only if its recorded versions (Python, torch, CUDA, ...) equal the current ones; "
            "kernel-level entries are always keyed on Triton's and the backend's hashes and the plugin's version",
            _bit(False), "0 or 1"),
    # Read here, owned (and checked) elsewhere.
    Setting("TRITON_INTERPRET", "0/1", "`0`", "Triton's interpreter: kernels run on the CPU, timed with the wall clock",
            owner="Triton"),
    Setting("TRITON_PRINT_AUTOTUNING", "0/1", "`0`", "print each tuning's pick (and, here, its notes)", owner="Triton"),
    Setting("TRITON_CACHE_DIR", "path", "`$HOME/.triton/cache`",
            "Triton's disk cache, which forked compile workers fill and `triton-dist-tune` reads; it also holds the "
            "kernel-level picks (`triton_dist/kernels/`) unless `TRITON_DIST_AUTOTUNE_DIR` is set", owner="Triton"),
    Setting("TRITON_CACHE_MANAGER", "text", "unset", "another cache manager turns the forked compile stage off",
            owner="Triton"),
    Setting("TRITON_ALWAYS_COMPILE", "flag", "off", "turns the forked compile stage off (nothing would be reused)",
            owner="Triton"),
    Setting("RANK", "count", "`0`", "this process's rank, for contextual tuning's reports", owner="torch.distributed"),
    Setting("HOME", "path", "the user's home", "where the default cache directories live", owner="the system"),
    Setting("CC", "path", "`cc`, `gcc` or `clang` on `PATH`",
            "the C compiler that builds the compiled cache-hit path (`TRITON_DIST_COMPILED_HIT`)", owner="the system"),
    Setting("PYTHONPATH", "paths", "unset",
            "where Python finds modules; the isolation worker, which never looks in the current directory, still "
            "honours it", owner="Python"),
)
_BY_NAME = {s.name: s for s in SETTINGS}


def value(name: str) -> Any:
    """The parsed value of the plugin's setting ``name``, from the environment now."""
    setting = _BY_NAME[name]
    raw = os.environ.get(name, "")
    try:
        return setting.parse(raw) if setting.parse is not None else raw
    except ValueError:
        raise SettingError(error_message(setting, raw)) from None


def unset_value(name: str) -> Any:
    """The value the setting ``name`` has when it is not set (its default, parsed)."""
    setting = _BY_NAME[name]
    return setting.parse("") if setting.parse is not None else ""


def plain(text: str) -> str:
    """``text`` without the markdown code marks the docs table keeps (for messages shown to users)."""
    return re.sub(r"`([^`]*)`", r"\1", text).replace("`", "")


def error_message(setting: Setting, raw: str) -> str:
    """What ``SettingError`` says when ``setting`` holds ``raw``, in plain text."""
    return (f"{setting.name}={raw!r} is not valid: it accepts {plain(setting.accepts)}. "
            f"Unset it for the default ({plain(setting.default)}).")


def validate() -> None:
    """Check every setting the plugin owns; raise ``SettingError`` on the first bad one."""
    for setting in SETTINGS:
        if setting.parse is not None:
            value(setting.name)


def markdown() -> str:
    """The settings table of ``docs/settings.md``."""
    rows = ["| variable | type | default | meaning | owner |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.kind} | {s.default} | {s.meaning} | {s.owner} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - prints the docs table
    print(markdown(), end="")
