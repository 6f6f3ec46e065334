"""Every command of ``triton-dist-tune`` has a one-line help in ``triton-dist-tune --help`` and a
description in its own ``--help``, and every option a help text: the parser is walked, so a
command or option added without them fails here."""

import argparse

import pytest
from helpers import run_cli

from triton_dist_plugin.cli import parser as cli_parser


def _walk(parser: argparse.ArgumentParser, path: str = ""):
    """(where, action) for every action of ``parser`` and of its subcommands' parsers, at any
    depth (a group of subcommands is an action too)."""
    path = path or parser.prog
    for action in parser._actions:
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")


def _subcommands(parser: argparse.ArgumentParser):
    """(command, its parser, its one-line help or None) for every subcommand, at any depth."""
    for path, action in _walk(parser):
        if isinstance(action, argparse._SubParsersAction):
            listed = {a.dest: a.help for a in action._choices_actions}  # only those given help= are listed
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub, listed.get(name)


def _lacking(text) -> bool:
    return text is None or text == argparse.SUPPRESS or not str(text).strip()


def test_every_subcommand_has_a_one_line_help_and_a_description():
    commands = list(_subcommands(cli_parser.build()))
    assert len(commands) == len(cli_parser.ENTRY_COMMANDS) + len(cli_parser.OTHER_COMMANDS)
    missing = [f"{where}: no help in the list" for where, _, helptext in commands if _lacking(helptext)]
    missing += [f"{where}: no description" for where, sub, _ in commands if _lacking(sub.description)]
    missing += [f"{where}: help is not one line" for where, _, helptext in commands
                if not _lacking(helptext) and "\n" in helptext]
    assert not missing, missing


def test_every_option_and_argument_has_a_help_text():
    missing = [f"{where}: {'/'.join(action.option_strings) or action.metavar or action.dest}"
               for where, action in _walk(cli_parser.build()) if _lacking(action.help)]
    assert not missing, missing


def test_the_walk_sees_what_lacks_help():
    # The check itself, on a parser with a subcommand and an option given no help.
    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers(dest="command", help="a command")
    sub.add_parser("listed", help="has help", description="Has help.").add_argument("--bare")
    sub.add_parser("unlisted")
    assert [(w, h) for w, _, h in _subcommands(parser)] == [("p listed", "has help"), ("p unlisted", None)]
    assert [(w, a.dest) for w, a in _walk(parser) if _lacking(a.help)] == [("p listed", "bare")]


@pytest.mark.parametrize("columns", ["80", "100"])
def test_triton_dist_tune_help_lists_every_command_on_one_line(columns):
    shown = run_cli("--help", env={"COLUMNS": columns})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    helps = dict(cli_parser.ENTRY_COMMANDS) | {name: h for name, (h, _) in cli_parser.OTHER_COMMANDS.items()}
    for name, helptext in helps.items():
        (line,) = [i for i, text in enumerate(lines) if text.split()[:1] == [name]]
        assert lines[line].split(None, 1)[1] == helptext, lines[line]
        after = lines[line + 1].split()[:1]
        assert after == [] or after[0] in helps, f"the help of {name} runs onto a second line: {lines[line + 1]}"
