"""triton-dist-tune: look at, export, move and clear what was tuned.

    triton-dist-tune list   [NAME]              every function-level and kernel-level entry
    triton-dist-tune show   NAME                every candidate of the entries whose name contains NAME
    triton-dist-tune export [NAME] [-o FILE] [--format json|csv]
    triton-dist-tune clear  [NAME] [--all] [-n]  delete entries (-n: list what would go, delete nothing)
    triton-dist-tune report -o FILE [NAME]      one HTML page: a chart of every candidate per entry
    triton-dist-tune import FILE                the picks of an exported manifest, into the cache
    triton-dist-tune misses [NAME]              keys launched untuned (frozen mode, CUDA graph capture)
    triton-dist-tune pretune MODULE:FUNCTION --cases FILE.json|MODULE:CALLABLE

The commands that take ``NAME`` keep the entries whose name contains it (``--exact``: whose name
is it); a ``NAME`` that matches nothing is one line on standard error and status 1. ``list``,
``show``, ``export``, ``clear`` and ``report`` also take ``--kernels`` or ``--functions``.

Function-level entries live under ``$HOME/.triton_dist/autotune`` (``TRITON_DIST_AUTOTUNE_DIR``),
and the plugin's kernel-level picks under ``triton_dist/kernels/`` in Triton's cache directory
(``TRITON_CACHE_DIR``, default ``$HOME/.triton/cache``; under ``TRITON_DIST_AUTOTUNE_DIR/kernels``
when that is set); kernel-level entries also come from Triton's own ``*.autotune.json`` files
(``cache_results=True`` or ``TRITON_CACHE_AUTOTUNING=1``) in Triton's cache directory. Every entry
read passes the same check as at a launch (``records.check``); one that does not is skipped with
its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from .. import settings, untuned
from ..store import cache, filestore, fingerprint, manifest, persist, records


@dataclass
class Entry:
    kind: str  # "function" or "kernel"
    name: str
    key: str
    pick: str
    best_ms: Optional[float]
    when: str
    path: str
    candidates: list = field(default_factory=list)
    restore: dict = field(default_factory=dict)  # the plugin's own entries: what `import` writes back


def kernel_cache_root() -> Path:
    return fingerprint.triton_cache_dir()


def _ms(value) -> Optional[float]:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(float(value)) else None
    except OverflowError:  # a JSON integer too large for a float
        return None


def _skip(path: Path, reason: str) -> None:
    print(f"triton-dist-tune: skipping {path}: {reason}", file=sys.stderr)


def function_entries() -> list[Entry]:
    return _plugin_entries("function", cache.cache_root(), "*/*.json")


def persisted_kernel_entries() -> list[Entry]:
    """The kernel-level picks the plugin keeps (``persist.py``)."""
    return _plugin_entries("kernel", cache.kernel_base(), f"{persist.DIRECTORY}/*/*.json")


def _plugin_entries(kind: str, folder: Path, pattern: str) -> list[Entry]:
    out = []
    root = cache.kernel_root() if kind == "kernel" else cache.cache_root()
    for path in sorted(folder.glob(pattern)):
        if path.is_symlink() or path.parent.is_symlink():
            continue  # never followed (the file store refuses them too)
        rec = filestore.read_json(path, root)
        if rec is None:
            continue
        try:
            records.check(rec, kind)
        except records.RecordError as exc:
            _skip(path, str(exc))
            continue
        cands = [{"config": c["config"], "ms": _ms(c.get("ms")), "failure": c.get("failure"),
                  "measured": c.get("measured", True) is not False} for c in rec["candidates"]]
        best = min((c["ms"] for c in cands if c["ms"] is not None), default=None)
        out.append(Entry(kind, rec[kind], rec["key"], rec["pick_config"], best, rec["timestamp"], str(path), cands,
                         manifest.entry(path, rec, kind)))
    return out


def kernel_entries() -> list[Entry]:
    import datetime as dt

    out = []
    for path in sorted(kernel_cache_root().glob("*/*.autotune.json")):
        rec = filestore.read_json(path)
        if rec is None or "configs_timings" not in rec:
            continue
        try:
            cands = [_kernel_candidate(item) for item in _pairs(rec["configs_timings"])]
            when = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat()
        except (ValueError, OSError, RecursionError) as exc:
            _skip(path, "nested too deeply" if isinstance(exc, RecursionError) else str(exc))
            continue
        valid = [c for c in cands if c["ms"] is not None]
        best = min(valid, key=lambda c: c["ms"]) if valid else None
        out.append(Entry("kernel", path.name[: -len(".autotune.json")], str(rec.get("key")),
                         best["config"] if best else "-", best["ms"] if best else None, when, str(path), cands))
    return out


def _pairs(value) -> list:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise ValueError("field 'configs_timings' is not a list of [config, timing] pairs")
    return value


def _kernel_candidate(pair: list) -> dict:
    config, timing = pair
    if not isinstance(config, dict) or not isinstance(config.get("kwargs", {}), dict):
        raise ValueError("a config in 'configs_timings' is not an object with 'kwargs'")
    kwargs = dict(config.get("kwargs", {}))
    opts = {k: v for k, v in config.items() if k not in ("kwargs", "pre_hook") and v is not None}
    # Triton's own tuner measures every candidate fully (it has no screening round); its
    # [p50, p20, p80] is kept for the report's noise.
    spread = [_ms(v) for v in timing] if isinstance(timing, list) and len(timing) == 3 else None
    return {"config": ", ".join(f"{k}={v}" for k, v in {**kwargs, **opts}.items()), "ms": _ms(timing),
            "failure": None if _ms(timing) is not None else "inf", "measured": True,
            **({"timing": spread} if spread and None not in spread else {})}


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    widths = [min(w, 100) for w in widths]
    line = lambda r: "  ".join(str(x)[:w].ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fmt(ms: Optional[float]) -> str:
    return f"{ms:.4f}" if ms is not None else "-"


def _round(candidate: dict) -> str:
    """Which round a candidate's time is from: ``full`` (a full measurement), ``screening`` (a
    short round that dropped it: not comparable with a full measurement), or ``-`` (failed)."""
    if candidate.get("ms") is None:
        return "-"
    return "full" if candidate.get("measured", True) is not False else "screening"


def _pick_ms(e: Entry) -> Optional[float]:
    """The pick's own time (its full measurement), never a faster screening round's."""
    return next((c["ms"] for c in e.candidates if c.get("config") == e.pick), None)


def _rounds(e: Entry) -> str:
    """How the entry's candidates were timed: ``2 full + 4 screened``, ``1 failed`` added."""
    counts = {"full": 0, "screening": 0, "-": 0}
    for c in e.candidates:
        counts[_round(c)] += 1
    parts = [f"{counts['full']} full"] + [f"{n} {what}" for what, n in (("screened", counts["screening"]),
                                                                         ("failed", counts["-"])) if n]
    return " + ".join(parts)


def _source(e: Entry) -> Optional[str]:
    """The digest of the kernel's (or function's) source the entry was tuned for, if recorded
    (``show`` prints it where entries of one name and key come from different sources)."""
    record = e.restore.get("record") if isinstance(e.restore, dict) else None
    source = record.get("source") if isinstance(record, dict) else None
    return source if isinstance(source, str) else None


def cmd_list(entries: list[Entry]) -> str:
    if not entries:
        return (f"nothing tuned yet (looked in {cache.cache_root()}, {cache.kernel_base() / persist.DIRECTORY} and "
                f"{kernel_cache_root()})")
    rows = [[e.kind, e.name, e.key, e.pick, _fmt(_pick_ms(e)), _rounds(e), e.when[:19]] for e in entries]
    return _table(rows, ["kind", "name", "key", "pick", "pick ms", "timed", "when (UTC)"])


def cmd_show(entries: list[Entry]) -> str:
    parts = []
    for e in entries:
        # Full measurements first (the pick among them), then the screening rounds, then failures.
        order = sorted(e.candidates, key=lambda c: ("full", "screening", "-").index(_round(c)))
        rows = [[c["config"], _fmt(c["ms"]), _round(c), c["failure"] or "", "*" if c["config"] == e.pick else ""]
                for c in order]
        source = _source(e)
        twins = {_source(o) for o in entries if (o.kind, o.name, o.key) == (e.kind, e.name, e.key)} - {None}
        parts.append(f"{e.kind} {e.name}  key={e.key}\n  file: {e.path}\n"
                     + (f"  source: {source} (entries of this name and key were tuned from {len(twins)} different "
                        "sources)\n" if source and len(twins) > 1 else "")
                     + _table(rows, ["candidate", "ms", "round", "failure", "pick"]))
    if any(_round(c) == "screening" for e in entries for c in e.candidates):
        parts.append("round: full = the p50 of a full measurement; screening = the p50 of the short round that "
                     "dropped the candidate, not comparable with a full measurement")
    return "\n\n".join(parts)


def cmd_export(entries: list[Entry], fmt: str) -> str:
    """``best_ms`` is the pick's own full measurement; each candidate says its ``round``."""
    if fmt == "json":
        items = [{**{k: v for k, v in asdict(e).items() if k != "restore"}, "best_ms": _pick_ms(e),
                  "candidates": [{**c, "measured": _round(c) == "full", "round": _round(c)} for c in e.candidates],
                  **e.restore} for e in entries]
        return json.dumps(items, indent=2, default=str)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["kind", "name", "key", "pick", "best_ms", "when", "path", "measured_fully", "screened"])
    for e in entries:
        best = _pick_ms(e)
        rounds = [_round(c) for c in e.candidates]
        writer.writerow([e.kind, e.name, e.key, e.pick, "" if best is None else best, e.when, e.path,
                         rounds.count("full"), rounds.count("screening")])
    return buf.getvalue()


def _write(path: str, text: str, command: str) -> bool:
    """Write an output file; a path that cannot be written is one line, not a traceback."""
    if not path:
        print(f"{PROG} {command}: -o needs a file name", file=sys.stderr)
        return False
    try:
        Path(path).write_text(text, errors="backslashreplace")
        return True
    except OSError as exc:
        print(f"{PROG} {command}: cannot write {path}: {exc.strerror or exc}; give a path in an existing, "
              "writable directory", file=sys.stderr)
        return False


PROG = "triton-dist-tune"
#: the commands that read the entries: each takes NAME, --exact and --kernels/--functions
ENTRY_COMMANDS = (("list", "list the entries (every one, or those matching NAME)"),
                  ("show", "every candidate of the entries matching NAME"),
                  ("export", "write a manifest of the matching entries"),
                  ("clear", "delete the matching entries, naming each (-n: only name them)"),
                  ("report", "write one self-contained HTML page with a chart per entry"))


def _plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``1 entry``, ``2 entries``, ``0 entries``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def _matches(name: str, pattern: Optional[str], exact: bool) -> bool:
    """``pattern`` is part of ``name`` (``exact``: is ``name``); no pattern keeps everything."""
    return pattern is None or (name == pattern if exact else pattern in name)


def _looked_in() -> str:
    return (f"looked in {cache.cache_root()}, {cache.kernel_base() / persist.DIRECTORY} and "
            f"{kernel_cache_root()}")


def _no_match(command: str, pattern: str, exact: bool, anything: bool, what: str = "entry",
              hint: str = f"run '{PROG} list' to see what exists") -> int:
    """A NAME given that matches nothing: one line on standard error, and status 1."""
    matched = f"is named {pattern!r}" if exact else f"matches {pattern!r}"
    why = hint if anything else f"nothing tuned yet ({_looked_in()})" if what == "entry" else \
        f"none recorded (looked in {cache.cache_root() / untuned.MISSES})"
    print(f"{PROG} {command}: no {what} {matched}; {why}", file=sys.stderr)
    return 1


def cmd_misses(name: Optional[str], exact: bool = False) -> Optional[str]:
    """The misses table; None when ``name`` matches none of the recorded misses."""
    seen: dict = {}
    recorded = untuned.misses()
    for item in recorded:
        if not _matches(item["kernel"], name, exact):
            continue
        row = seen.setdefault((item["kernel"], item["key"]), {"count": 0, "why": set(), "last": ""})
        row["count"] += 1
        row["why"].add(str(item.get("why", "")))
        row["last"] = max(row["last"], str(item.get("timestamp", "")))
    if not seen:
        if name is not None:
            return None
        return f"no misses recorded (looked in {cache.cache_root() / untuned.MISSES})"
    rows = [[k, key, str(r["count"]), ", ".join(sorted(r["why"])), r["last"][:19]] for (k, key), r in seen.items()]
    return _table(rows, ["kernel", "key", "misses", "during", "last (UTC)"])


def _remove(e: Entry) -> Optional[str]:
    """Delete one entry's file and what the store keeps beside it; why it could not be, or None."""
    log = Path(e.path).with_suffix(".log")
    try:
        os.unlink(e.path)  # unlink removes a link itself, never its target
    except FileNotFoundError:
        pass  # gone already
    except OSError as exc:
        return exc.strerror or str(exc)
    for path in (log, Path(e.path + ".lock"), Path(f"{log}.lock")):
        filestore.with_suppress(os.unlink, path)
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Look at, export, move and clear what the plugin tuned.",
        epilog="NAME keeps the entries whose name contains it (--exact: whose name is it). A NAME that matches "
               "nothing is an error (status 1).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, helptext in ENTRY_COMMANDS:
        p = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.add_argument("name", nargs="?" if name != "show" else None, default=None, metavar="NAME",
                       help="only entries whose name contains this (with --exact: whose name is this)")
        p.add_argument("--exact", action="store_true", help="NAME is the whole name, not a part of it")
        group = p.add_mutually_exclusive_group()
        group.add_argument("--kernels", action="store_true", help="only kernel-level (Triton) entries")
        group.add_argument("--functions", action="store_true", help="only function-level entries")
        if name == "export":
            p.add_argument("--format", choices=("json", "csv"), default="json")
        if name in ("export", "report"):
            p.add_argument("-o", "--output", required=name == "report",
                           help="file to write" + (" (default: standard output)" if name == "export" else ""))
        if name == "clear":
            p.add_argument("--all", action="store_true", help="required to clear everything when no NAME is given")
            p.add_argument("-n", "--dry-run", action="store_true",
                           help="list the entries that would be cleared, and clear nothing")
    p = sub.add_parser("import", help="put a manifest's picks into the cache (hardware and versions must match)")
    p.add_argument("file", help="a manifest written by triton-dist-tune export")
    p = sub.add_parser("pretune", help="tune a function's kernels over argument cases, ahead of time")
    p.add_argument("function", help="MODULE:FUNCTION that launches the kernels, called once per case (MODULE is "
                                    "looked for in the current directory first, as python -m does)")
    p.add_argument("--cases", required=True,
                   help="a JSON file (a list of keyword-argument objects) or MODULE:CALLABLE returning the cases")
    p = sub.add_parser("misses", help="keys launched untuned (frozen mode, CUDA graph capture), to tune ahead")
    p.add_argument("name", nargs="?", default=None, metavar="NAME",
                   help="only kernels and functions whose name contains this (with --exact: whose name is this)")
    p.add_argument("--exact", action="store_true", help="NAME is the whole name, not a part of it")
    return parser


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"{PROG}: warning: {message}\n"


def main(argv: Optional[list[str]] = None) -> int:
    """The console script. A user's mistake (a bad path, file, pattern or setting) is one line on
    standard error and a non-zero status, never a traceback; so are warnings, when run as the
    command."""
    if argv is not None:
        return _main(argv)
    formatwarning = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        return _main(None)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as other commands do
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        warnings.formatwarning = formatwarning


def _main(argv: Optional[list[str]]) -> int:
    args = _parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # text from a stored file prints, whatever it holds
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        settings.validate()
    except settings.SettingError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.command == "misses":
        text = cmd_misses(args.name, args.exact)
        if text is None:
            return _no_match("misses", args.name, args.exact, bool(untuned.misses()), "miss",
                             f"run '{PROG} misses' to see every one")
        print(text)
        return 0
    if args.command == "import":
        try:
            written, present, skipped = manifest.import_file(Path(args.file))
        except ValueError as exc:
            print(f"{PROG} import: {exc}", file=sys.stderr)
            return 1
        for reason in skipped:
            print(f"{PROG} import: skipped {reason}", file=sys.stderr)
        print(f"imported {_plural(written, 'entry', 'entries')} into {cache.cache_root()} and "
              f"{cache.kernel_base() / persist.DIRECTORY}; {present} {'was' if present == 1 else 'were'} already "
              f"there, {len(skipped)} skipped")
        return 0
    if args.command == "pretune":
        from . import pretune

        try:
            return pretune.main(args.function, args.cases)
        except (ValueError, ImportError, AttributeError, RuntimeError, TypeError) as exc:
            print(f"{PROG} pretune: {exc}", file=sys.stderr)
            return 1

    every = ([] if args.kernels else function_entries()) + (
        [] if args.functions else persisted_kernel_entries() + kernel_entries())
    entries = [e for e in every if _matches(e.name, args.name, args.exact)]
    if args.name is not None and not entries:
        return _no_match(args.command, args.name, args.exact, bool(every))
    if args.command == "list":
        print(cmd_list(entries))
    elif args.command == "show":
        print(cmd_show(entries))
    elif args.command == "export":
        text = cmd_export(entries, args.format)
        if args.output is not None:
            if not _write(args.output, text, "export"):
                return 1
            print(f"wrote {_plural(len(entries), 'entry', 'entries')} to {args.output}")
        else:
            print(text)
        if not entries:
            print(f"{PROG} export: nothing tuned yet ({_looked_in()}); the manifest is empty", file=sys.stderr)
    elif args.command == "report":
        from ..reporting import html_report

        if not _write(args.output, html_report.render(entries), "report"):
            return 1
        print(f"wrote a report of {_plural(len(entries), 'entry', 'entries')} to {args.output}")
        if not entries:
            print(f"{PROG} report: nothing tuned yet ({_looked_in()}); the report is empty", file=sys.stderr)
    elif args.command == "clear":
        return _clear(args, entries)
    return 0


def _clear(args: argparse.Namespace, entries: list[Entry]) -> int:
    if not args.name and not args.all and not args.kernels and not args.functions:
        print(f"{PROG} clear: refusing to clear everything: name a function or kernel, or pass --all "
              "(--dry-run lists what would go)", file=sys.stderr)
        return 2
    verb = "would clear" if args.dry_run else "cleared"
    failed = 0
    for e in entries:
        why = None if args.dry_run else _remove(e)
        if why is not None:
            print(f"{PROG} clear: cannot remove {e.path}: {why}", file=sys.stderr)
            failed += 1
            continue
        print(f"{verb} {e.kind} {e.name}  key={e.key}")
    if args.all and not args.dry_run:  # and what the store left: temporaries of writers that died, every lock file
        filestore.sweep(cache.cache_root(), root=cache.cache_root())
        kernels = cache.kernel_base() / persist.DIRECTORY
        if kernels.is_dir():
            filestore.sweep(kernels, root=cache.kernel_root())
    if not entries:
        print(f"nothing to clear ({_looked_in()})")
        return 0
    names = sorted({e.name for e in entries})
    line = f"{verb} {_plural(len(entries) - failed, 'entry', 'entries')}"
    if args.name and not args.exact and names != [args.name]:
        line += f" of {_plural(len(names), 'name')} containing {args.name!r}"
        if args.name in names:
            line += f" (--exact: only those named {args.name!r})"
    if args.dry_run:
        line += "; nothing was removed (dry run)"
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
