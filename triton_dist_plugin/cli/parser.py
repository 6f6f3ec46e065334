"""The arguments of ``triton-dist-tune``: every command with a one-line help (the list that
``triton-dist-tune --help`` shows) and a description (its own ``--help``), and every option with
a help text. ``tests/test_cli_help.py`` walks the parser and fails on one that lacks either."""

from __future__ import annotations

import argparse

PROG = "triton-dist-tune"
#: the commands that read the entries: each takes NAME, --exact and --kernels/--functions
ENTRY_COMMANDS = (("list", "list the entries (every one, or those matching NAME)"),
                  ("show", "show every candidate of the entries matching NAME"),
                  ("export", "write a manifest of the matching entries"),
                  ("clear", "delete the matching entries, naming each (-n: only name them)"),
                  ("report", "write one self-contained HTML page with a chart per entry"),
                  ("cover", "the K configs that serve each matching kernel's tuned keys best"))
#: the other commands: (one-line help, description)
OTHER_COMMANDS = {
    "import": ("copy the picks of an exported manifest into the cache",
               f"Write the picks of a manifest from '{PROG} export' into this machine's cache, each at the place "
               "it had where it was exported. An entry already there stays; one measured on other hardware or "
               "under other versions, or edited after export, is skipped with a line on standard error saying "
               "what differs."),
    "pretune": ("tune a function's kernels over argument cases, ahead of time",
                "Import MODULE:FUNCTION and call it once per case, so that every kernel key those calls meet is "
                "tuned and stored on disk now (a later process times nothing for them). Prints each kernel key "
                "with its pick, and whether it was tuned now or found on disk."),
    "index": ("index the kernel entries copied into the cache by hand, now",
              "Bring every kernel folder's index of its stored keys up to date now, reading each entry it lacks: "
              "for entries copied into the cache by hand or written by an older release, which new keys would "
              "otherwise index a few at a time."),
    "misses": ("list the keys launched untuned, to tune them ahead",
               "List, once each, every key launched without a pick (in frozen mode, or during a CUDA graph "
               "capture with TRITON_DIST_AUTOTUNE_ON_CAPTURE=fallback), with how often, in which situation and "
               "when last: the keys to tune ahead."),
}
_NAME_HELP = "only entries whose name contains this (with --exact: whose name is this)"
_EXACT_HELP = "NAME is the whole name, not a part of it"


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def build() -> argparse.ArgumentParser:
    """The parser of every command and option."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Look at, export, move and clear what the plugin tuned.",
        epilog="NAME keeps the entries whose name contains it (--exact: whose name is it). A NAME that matches "
               "nothing is an error (status 1).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help=f"one of these; '{PROG} COMMAND --help' says more")
    for name, helptext in ENTRY_COMMANDS:
        p = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.add_argument("name", nargs="?" if name != "show" else None, default=None, metavar="NAME", help=_NAME_HELP)
        p.add_argument("--exact", action="store_true", help=_EXACT_HELP)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--kernels", action="store_true", help="only kernel-level (Triton) entries")
        group.add_argument("--functions", action="store_true", help="only function-level entries")
        if name == "export":
            p.add_argument("--format", choices=("json", "csv"), default="json",
                           help="json (the default): a list of the entries with their candidates, which import "
                                "reads back; csv: one row per entry, without candidates")
        if name in ("export", "report"):
            p.add_argument("-o", "--output", required=name == "report", metavar="FILE",
                           help="file to write" + (" (default: standard output)" if name == "export" else ""))
        if name == "cover":
            p.add_argument("-k", type=_at_least_one, default=4, metavar="K",
                           help="how many configs to choose (default 4); each key is served by the best of them "
                                "measured there")
        if name == "clear":
            p.add_argument("--all", action="store_true",
                           help="required to clear everything when no NAME is given (--kernels or --functions "
                                "alone clears that kind); also removes the temporaries and locks left behind")
            p.add_argument("-n", "--dry-run", action="store_true",
                           help="list the entries that would be cleared, and clear nothing")
    others = {name: sub.add_parser(name, help=helptext, description=description)
              for name, (helptext, description) in OTHER_COMMANDS.items()}
    others["import"].add_argument("file", metavar="FILE", help=f"a manifest written by {PROG} export")
    others["pretune"].add_argument(
        "function", metavar="MODULE:FUNCTION", help="the function that launches the kernels, called once per "
                                                    "case (MODULE is looked for in the current directory first, "
                                                    "as python -m does)")
    others["pretune"].add_argument(
        "--cases", required=True, metavar="FILE.json|MODULE:CALLABLE",
        help="a JSON file (a list of keyword-argument objects) or MODULE:CALLABLE returning the cases")
    others["misses"].add_argument("name", nargs="?", default=None, metavar="NAME",
                                  help="only kernels and functions whose name contains this (with --exact: whose "
                                       "name is this)")
    others["misses"].add_argument("--exact", action="store_true", help=_EXACT_HELP)
    return parser
