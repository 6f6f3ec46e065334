"""triton-dist-tune: look at, export, move and clear what was tuned.

    triton-dist-tune list   [NAME]              every function-level and kernel-level entry
    triton-dist-tune show   NAME                every candidate of the entries whose name contains NAME
    triton-dist-tune export [NAME] [-o FILE] [--format json|csv]
    triton-dist-tune clear  [NAME] [--all] [-n]  delete entries (-n: list what would go, delete nothing)
    triton-dist-tune report -o FILE [NAME]      one HTML page: a chart of every candidate per entry
    triton-dist-tune import FILE                the picks of an exported manifest, into the cache
    triton-dist-tune misses [NAME]              keys launched untuned (frozen mode, CUDA graph capture)
    triton-dist-tune pretune MODULE:FUNCTION --cases FILE.json|MODULE:CALLABLE
    triton-dist-tune index                      index kernel-level entries copied in by hand, now

The commands that take ``NAME`` keep the entries whose name contains it (``--exact``: whose name
is it); a ``NAME`` that matches nothing is one line on standard error and status 1. ``list``,
``show``, ``export``, ``clear`` and ``report`` also take ``--kernels`` or ``--functions``; each
names every entry it cannot read on standard error, with a count at the end.

The commands and options, each with its help, are ``parser``; finding and loading the entries
(and which are skipped) is ``entries``; what each command prints is ``views``. This module runs
the commands, writes their output files and turns a user's mistake into one line on standard
error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Iterator, Optional

from .. import frozen, settings
from ..store import cache, filestore, manifest, persist
from .entries import Entry, Reader, looked_in, matches, remove
from .parser import PROG, build
from .views import cmd_export, cmd_misses, cmd_show, list_lines


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


def _plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``1 entry``, ``2 entries``, ``0 entries``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def _no_match(command: str, pattern: str, exact: bool, anything: bool, what: str = "entry",
              hint: str = f"run '{PROG} list' to see what exists") -> int:
    """A NAME given that matches nothing: one line on standard error, and status 1."""
    matched = f"is named {pattern!r}" if exact else f"matches {pattern!r}"
    why = hint if anything else f"nothing tuned yet ({looked_in()})" if what == "entry" else \
        f"none recorded (looked in {cache.cache_root() / frozen.MISSES})"
    print(f"{PROG} {command}: no {what} {matched}; {why}", file=sys.stderr)
    return 1


def _nothing(args) -> str:
    """That nothing was found, of the kind asked for (``--functions``, ``--kernels``), and where it
    was looked for."""
    what = "no function-level picks" if args.functions else "no kernel-level picks" if args.kernels else \
        "nothing tuned yet"
    return f"{what} ({looked_in(functions=not args.kernels, kernels=not args.functions)})"


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
    args = build().parse_args(argv)
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
            return _no_match("misses", args.name, args.exact, bool(frozen.misses()), "miss",
                             f"run '{PROG} misses' to see every one")
        print(text)
        return 0
    if args.command in ("import", "index"):  # a root that cannot hold entries is said, once
        for root in {cache.cache_root(), cache.kernel_root()}:
            cache.blocked(root)
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
    if args.command == "index":
        return _index()
    if args.command == "pretune":
        from . import pretune

        try:
            return pretune.main(args.function, args.cases)
        except (ValueError, ImportError, AttributeError, RuntimeError, TypeError) as exc:
            print(f"{PROG} pretune: {exc}", file=sys.stderr)
            return 1

    for root in {cache.cache_root(), cache.kernel_root()}:  # a root that cannot hold entries is said, once
        cache.blocked(root)
    reader = Reader()
    every = reader.entries(functions=not args.kernels, kernels=not args.functions)
    matching = (e for e in every if matches(e.name, args.name, args.exact))
    try:
        return _run(args, reader, matching)
    finally:
        summary = reader.summary()  # after any output: the count of the entries named as unreadable
        if summary:
            print(summary, file=sys.stderr)


def _run(args: argparse.Namespace, reader: Reader, matching: Iterator[Entry]) -> int:
    """One of the commands that read the entries (``ENTRY_COMMANDS``)."""
    if args.command == "clear" and not (args.name or args.all or args.kernels or args.functions):
        print(f"{PROG} clear: refusing to clear everything: name a function or kernel, or pass --all "
              "(--dry-run lists what would go)", file=sys.stderr)
        return 2
    if args.command == "list":  # each row printed as its entry is read
        printed = False
        for line in list_lines(matching):
            print(line)
            printed = True
        if printed:
            return 0
        if args.name is not None:
            return _no_match(args.command, args.name, args.exact, bool(reader.found or reader.unreadable))
        print(f"{_nothing(args)}")
        return 0
    entries = list(matching)
    if args.name is not None and not entries:
        return _no_match(args.command, args.name, args.exact, bool(reader.found or reader.unreadable))
    if args.command == "show":
        print(cmd_show(entries))
    elif args.command == "cover":
        from .cover import render

        print(render(entries, args.k) or _nothing(args))
    elif args.command == "export":
        text = cmd_export(entries, args.format)
        if args.output is not None:
            if not _write(args.output, text, "export"):
                return 1
            print(f"wrote {_plural(len(entries), 'entry', 'entries')} to {args.output}")
        else:
            print(text)
        if not entries:
            print(f"{PROG} export: {_nothing(args)}; the manifest is empty", file=sys.stderr)
    elif args.command == "report":
        from ..reporting import html_report

        if not _write(args.output, html_report.render(entries), "report"):
            return 1
        print(f"wrote a report of {_plural(len(entries), 'entry', 'entries')} to {args.output}")
        if not entries:
            print(f"{PROG} report: {_nothing(args)}; the report is empty", file=sys.stderr)
    elif args.command == "clear":
        return _clear(args, entries)
    return 0


def _index() -> int:
    """Bring every kernel folder's index up to date (``store.index.update``), naming each entry
    it cannot index, with a count."""
    from ..store import index

    base = cache.kernel_base() / persist.DIRECTORY
    try:
        folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()) if base.is_dir() else []
    except OSError as exc:
        print(f"{PROG} index: cannot list {base}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    failed, unusable = 0, 0
    for folder in folders:
        try:
            left = index.update(folder, cache.kernel_root())
        except OSError as exc:
            print(f"{PROG} index: {exc}", file=sys.stderr)
            failed += 1
            continue
        for name in left:
            print(f"{PROG} index: skipping {folder / name}: not an entry this version can use (damaged, cut "
                  "short, or of another layout); delete it, or copy it again", file=sys.stderr)
        unusable += len(left)
    print(f"indexed {_plural(len(folders) - failed, 'kernel folder')} under {base}"
          + (f"; {_plural(unusable, 'entry', 'entries')} could not be indexed" if unusable else ""))
    return 1 if failed else 0


def _clear(args: argparse.Namespace, entries: list[Entry]) -> int:
    verb = "would clear" if args.dry_run else "cleared"
    failed = 0
    for e in entries:
        why = None if args.dry_run else remove(e)
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
        print(f"nothing to clear ({looked_in()})")
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
