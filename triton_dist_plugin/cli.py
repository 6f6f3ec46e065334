"""``triton-dist-tune``: look at, export and clear what was tuned.

    triton-dist-tune list                       every function-level and kernel-level entry
    triton-dist-tune show NAME                  every candidate of the entries whose name contains NAME
    triton-dist-tune export [-o F] [--format json|csv]
    triton-dist-tune clear [NAME] [--kernels] [--all]
    triton-dist-tune report -o FILE [NAME]      one HTML page: a chart of every candidate per entry
    triton-dist-tune import FILE                the picks of an exported manifest, into the cache
    triton-dist-tune misses [NAME]              keys launched untuned (frozen mode, CUDA graph capture)
    triton-dist-tune pretune MODULE:FUNCTION --cases FILE.json|MODULE:CALLABLE

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
import csv
import io
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from . import cache, filestore, fingerprint, manifest, persist, records, settings, untuned


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
    return {"config": ", ".join(f"{k}={v}" for k, v in {**kwargs, **opts}.items()), "ms": _ms(timing),
            "failure": None if _ms(timing) is not None else "inf"}


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    widths = [min(w, 100) for w in widths]
    line = lambda r: "  ".join(str(x)[:w].ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fmt(ms: Optional[float]) -> str:
    return f"{ms:.4f}" if ms is not None else "-"


def cmd_list(entries: list[Entry]) -> str:
    if not entries:
        return (f"nothing tuned yet (looked in {cache.cache_root()}, {cache.kernel_base() / persist.DIRECTORY} and "
                f"{kernel_cache_root()})")
    rows = [[e.kind, e.name, e.key, e.pick, _fmt(e.best_ms), e.when[:19]] for e in entries]
    return _table(rows, ["kind", "name", "key", "pick", "best ms", "when (UTC)"])


def cmd_show(entries: list[Entry]) -> str:
    parts = []
    for e in entries:
        rows = [[c["config"], _fmt(c["ms"]), c["failure"] or "", "*" if c["config"] == e.pick else ""]
                for c in e.candidates]
        parts.append(f"{e.kind} {e.name}  key={e.key}\n  file: {e.path}\n"
                     + _table(rows, ["candidate", "ms", "failure", "pick"]))
    return "\n\n".join(parts)


def cmd_misses(name: Optional[str]) -> str:
    seen: dict = {}
    for item in untuned.misses():
        if name and name not in item["kernel"]:
            continue
        row = seen.setdefault((item["kernel"], item["key"]), {"count": 0, "why": set(), "last": ""})
        row["count"] += 1
        row["why"].add(str(item.get("why", "")))
        row["last"] = max(row["last"], str(item.get("timestamp", "")))
    if not seen:
        return f"no misses recorded (looked in {cache.cache_root() / untuned.MISSES})"
    rows = [[k, key, str(r["count"]), ", ".join(sorted(r["why"])), r["last"][:19]] for (k, key), r in seen.items()]
    return _table(rows, ["kernel", "key", "misses", "during", "last (UTC)"])


def cmd_export(entries: list[Entry], fmt: str) -> str:
    if fmt == "json":
        items = [{**{k: v for k, v in asdict(e).items() if k != "restore"}, **e.restore} for e in entries]
        return json.dumps(items, indent=2, default=str)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["kind", "name", "key", "pick", "best_ms", "when", "path"])
    for e in entries:
        writer.writerow([e.kind, e.name, e.key, e.pick, "" if e.best_ms is None else e.best_ms, e.when, e.path])
    return buf.getvalue()


def _write(path: str, text: str, command: str) -> bool:
    """Write an output file; a path that cannot be written is one line, not a traceback."""
    try:
        Path(path).write_text(text, errors="backslashreplace")
        return True
    except OSError as exc:
        print(f"triton-dist-tune {command}: cannot write {path}: {exc.strerror or exc}; give a path in an existing, "
              "writable directory", file=sys.stderr)
        return False


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="triton-dist-tune", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("list", "list every entry"), ("show", "every candidate of matching entries"),
                           ("export", "write a manifest"), ("clear", "delete entries"),
                           ("report", "write one self-contained HTML page with a chart per entry")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("name", nargs="?" if name != "show" else None, default=None,
                       help="only entries whose name contains this")
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
    p = sub.add_parser("import", help="put a manifest's picks into the cache (hardware and versions must match)")
    p.add_argument("file", help="a manifest written by `triton-dist-tune export`")
    p = sub.add_parser("pretune", help="tune a function's kernels over argument cases, ahead of time")
    p.add_argument("function", help="MODULE:FUNCTION that launches the kernels, called once per case")
    p.add_argument("--cases", required=True,
                   help="a JSON file (a list of keyword-argument objects) or MODULE:CALLABLE returning the cases")
    p = sub.add_parser("misses", help="keys launched untuned (frozen mode, CUDA graph capture), to tune ahead")
    p.add_argument("name", nargs="?", default=None, help="only kernels whose name contains this")
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # text from a stored file prints, whatever it holds
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        settings.validate()
    except settings.SettingError as exc:
        print(f"triton-dist-tune: {exc}", file=sys.stderr)
        return 2
    if args.command == "misses":
        print(cmd_misses(args.name))
        return 0
    if args.command == "import":
        try:
            written, present, skipped = manifest.import_file(Path(args.file))
        except ValueError as exc:
            print(f"triton-dist-tune import: {exc}", file=sys.stderr)
            return 1
        for reason in skipped:
            print(f"triton-dist-tune import: skipped {reason}", file=sys.stderr)
        print(f"imported {written} entries into {cache.cache_root()} and {cache.kernel_base() / persist.DIRECTORY}; "
              f"{present} were already there, "
              f"{len(skipped)} skipped")
        return 0
    if args.command == "pretune":
        from . import pretune

        try:
            return pretune.main(args.function, args.cases)
        except (ValueError, ImportError, AttributeError, RuntimeError) as exc:
            print(f"triton-dist-tune pretune: {exc}", file=sys.stderr)
            return 1

    entries = ([] if args.kernels else function_entries()) + (
        [] if args.functions else persisted_kernel_entries() + kernel_entries())
    if args.name:
        entries = [e for e in entries if args.name in e.name]
    if args.command == "list":
        print(cmd_list(entries))
    elif args.command == "show":
        if not entries:
            print(f"no entry matches {args.name!r}; `triton-dist-tune list` shows what exists", file=sys.stderr)
            return 1
        print(cmd_show(entries))
    elif args.command == "export":
        text = cmd_export(entries, args.format)
        if args.output:
            if not _write(args.output, text, "export"):
                return 1
            print(f"wrote {len(entries)} entries to {args.output}")
        else:
            print(text)
    elif args.command == "report":
        from . import html_report

        if not _write(args.output, html_report.render(entries), "report"):
            return 1
        print(f"wrote a report of {len(entries)} entries to {args.output}")
    elif args.command == "clear":
        if not args.name and not args.all and not args.kernels and not args.functions:
            print("refusing to clear everything: name a function or kernel, or pass --all", file=sys.stderr)
            return 2
        if args.name and not entries:
            print(f"no entry matches {args.name!r}; `triton-dist-tune list` shows what exists", file=sys.stderr)
            return 1
        for e in entries:
            log = Path(e.path).with_suffix(".log")
            for path in (Path(e.path), log, Path(e.path + ".lock"), Path(f"{log}.lock")):
                filestore.with_suppress(os.unlink, path)  # unlink removes a link itself, never its target
        if args.all:  # and what the store left: temporaries of writers that died, every lock file
            filestore.sweep(cache.cache_root(), root=cache.cache_root())
            kernels = cache.kernel_base() / persist.DIRECTORY
            if kernels.is_dir():
                filestore.sweep(kernels, root=cache.kernel_root())
        print(f"cleared {len(entries)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
