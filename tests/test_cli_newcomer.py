"""The installed ``triton-dist-tune`` as a newcomer meets it: one-line errors, one behaviour when a
pattern matches nothing, ``clear`` that says what goes, plural forms, help without markup, and
docs that agree with the code. Real tunings of the add kernel and of function-level tuners under
the interpreter, the console script in real subprocesses."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, ROOT, listed, run_cli

from kernels import KERNELS
from triton_dist_plugin.tune import autotune

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"
ADD = KERNELS["add"]
COMMANDS = ("list", "show", "export", "clear", "report", "import", "misses", "pretune")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Empty cache directories of this test's own, which the subprocesses inherit."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "tdp"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path


@pytest.fixture
def tuned(dirs):
    """Five entries of three names that all contain ``add``: the add kernel for two sizes, a
    function-level ``add`` for two shapes and an ``add_twice`` for one."""
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    for n in (300, 500):
        x = torch.randn(n, device=DEVICE)
        torch.testing.assert_close(ADD.launch(kernel, x, x), 2 * x)

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def add(x, factor):
        return x + x * (factor - 1)

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def add_twice(x, factor):
        return x + x * factor

    add(torch.ones(4)), add(torch.ones(8)), add_twice(torch.ones(4))
    return dirs


def cli(*args, cwd=ROOT, env=None):
    return run_cli(*args, cwd=cwd, env=env)


def names_listed(result) -> list:
    return sorted(entry["name"] for entry in listed(result.stdout))


def assert_one_line_error(result, *fragments):
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("triton-dist-tune"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- item 4: no traceback for a user's mistake, whichever command -------------------------------

MODULES = {
    "syntax_error.py": "def step(n:\n",
    "raises_on_import.py": "x = 1 / 0\n",
    "imports_missing.py": "import no_such_module_anywhere\n",
    "fine.py": "def step(n):\n    return n\n\nVALUE = 7\n\ndef failing_cases():\n    raise KeyError('n')\n\n"
               "def not_a_list():\n    return 5\n",
}


@pytest.mark.parametrize("args, fragments", [
    (["export", "-o", "{tmp}/missing/out.json"], ["cannot write"]),
    (["export", "-o", ""], ["-o needs a file name"]),
    (["report", "-o", "{tmp}"], ["cannot write"]),
    (["import", "{tmp}/missing.json"], ["cannot read the manifest"]),
    (["import", "{tmp}"], ["cannot read the manifest"]),
    (["import", "{tmp}/binary.json"], ["cannot read the manifest"]),
    (["import", "{tmp}/object.json"], ["is not a manifest"]),
    (["pretune", "no_colon", "--cases", "{tmp}/cases.json"], ["MODULE:NAME"]),
    (["pretune", "syntax_error:step", "--cases", "{tmp}/cases.json"], ["SyntaxError", "syntax_error.py"]),
    (["pretune", "raises_on_import:step", "--cases", "{tmp}/cases.json"],
     ["ZeroDivisionError", "raises_on_import.py:1"]),
    (["pretune", "imports_missing:step", "--cases", "{tmp}/cases.json"], ["no_such_module_anywhere"]),
    (["pretune", "not_here:step", "--cases", "{tmp}/cases.json"], ["cannot import not_here"]),
    (["pretune", "fine:nope", "--cases", "{tmp}/cases.json"], ["has no attribute 'nope'"]),
    (["pretune", "fine:VALUE", "--cases", "{tmp}/cases.json"], ["is not a function"]),
    (["pretune", "fine:step", "--cases", "{tmp}/no_cases.json"], ["cannot read cases"]),
    (["pretune", "fine:step", "--cases", "{tmp}/binary.json"], ["cannot read cases"]),
    (["pretune", "fine:step", "--cases", "fine:failing_cases"], ["KeyError", "fine.py:7"]),
    (["pretune", "fine:step", "--cases", "fine:not_a_list"], ["expected a list of cases"]),
    (["pretune", "fine:step", "--cases", "{tmp}/bad_case.json"], ["case 0", "TypeError"]),
])
def test_a_users_mistake_is_one_line_and_a_non_zero_status_never_a_traceback(dirs, args, fragments):
    for name, text in MODULES.items():
        (dirs / name).write_text(text)
    (dirs / "cases.json").write_text('[{"n": 1}]')
    (dirs / "bad_case.json").write_text('[{"m": 1}]')
    (dirs / "binary.json").write_bytes(b"\xff\xfe\x00")
    (dirs / "object.json").write_text('{"not": "a list"}')
    result = cli(*(a.replace("{tmp}", str(dirs)) for a in args), cwd=dirs)
    assert_one_line_error(result, *fragments)


def test_a_bad_setting_and_an_unreadable_cache_file_are_one_line_each(tuned):
    result = cli("list", env={"TRITON_BENCH_METHOD": "fastest"})
    assert_one_line_error(result, "TRITON_BENCH_METHOD='fastest'")
    (entry,) = list((tuned / "tdp" / "kernels" / "add_kernel").glob("*.json"))[:1]
    entry.write_bytes(b"{not json")
    result = cli("list")
    assert result.returncode == 0
    warned = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warned) == 2 and warned[0].startswith(f"triton-dist-tune: warning: skipping {entry}: not JSON"), \
        result.stderr  # the entry, and why; then the count
    assert warned[1].startswith("triton-dist-tune: warning: 1 entry could not be read"), result.stderr


# -- item 5: a pattern that matches nothing: one behaviour --------------------------------------

@pytest.mark.parametrize("command", ["list", "show", "export", "report", "clear", "misses"])
@pytest.mark.parametrize("pattern", [["no_such_name"], ["add", "--exact"]], ids=["substring", "exact"])
def test_a_pattern_that_matches_nothing_is_an_error_naming_it_for_every_command(tuned, command, pattern):
    page = tuned / "page.html"
    extra = ["-o", str(page)] if command == "report" else []
    result = cli(command, *pattern, *extra)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert_one_line_error(result, f"triton-dist-tune {command}: no ", repr(pattern[0]))
    assert not page.exists()
    assert len(names_listed(cli("list"))) == 5  # clear removed nothing


def test_with_no_pattern_and_nothing_tuned_every_command_says_so_and_succeeds(dirs):
    result = cli("list")
    assert result.returncode == 0 and result.stdout.startswith("nothing tuned yet (looked in ")
    exported = cli("export")
    assert exported.returncode == 0 and json.loads(exported.stdout) == []
    assert "nothing tuned yet" in exported.stderr
    page = dirs / "page.html"
    report = cli("report", "-o", str(page))
    assert report.returncode == 0 and page.exists() and "nothing tuned yet" in report.stderr
    cleared = cli("clear", "--all")
    assert cleared.returncode == 0 and cleared.stdout.startswith("nothing to clear")
    missed = cli("misses")
    assert missed.returncode == 0 and missed.stdout.startswith("no misses recorded")
    only_kernels = cli("list", "--kernels")
    assert only_kernels.returncode == 0 and only_kernels.stdout.startswith("no kernel-level picks (looked in ")
    places = only_kernels.stdout.split("(looked in ", 1)[1].rstrip(")\n").replace(" and ", ", ").split(", ")
    assert str(dirs / "tdp") not in places and len(places) == 2, places  # not the function-level place


# -- item 8: clear says what goes, matches exactly on request, and can dry-run ------------------

def test_clear_names_what_goes_and_offers_a_dry_run_and_an_exact_match(tuned):
    dry = cli("clear", "add", "-n")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert sum(line.startswith("would clear kernel add_kernel  key=(300,") for line in lines) == 1
    assert sum(line.startswith("would clear function ") for line in lines) == 3
    assert lines[-1] == "would clear 5 entries of 3 names containing 'add'; nothing was removed (dry run)"
    assert len(names_listed(cli("list"))) == 5

    exact = cli("clear", "add_kernel", "--exact", "--dry-run")
    assert exact.stdout.splitlines()[-1] == "would clear 2 entries; nothing was removed (dry run)"
    cleared = cli("clear", "add_kernel", "--exact")
    assert cleared.returncode == 0
    assert [line.split()[:3] for line in cleared.stdout.splitlines()[:-1]] == [["cleared", "kernel", "add_kernel"]] * 2
    assert cleared.stdout.splitlines()[-1] == "cleared 2 entries"
    left = names_listed(cli("list"))
    assert len(left) == 3 and "add_kernel" not in left

    one = cli("clear", "add_twice")
    assert one.returncode == 0 and one.stdout.splitlines()[-1] == "cleared 1 entry of 1 name containing 'add_twice'"


# -- the smaller items: plural forms, help without markup, docs that agree ----------------------

def test_counts_use_the_singular_for_one(dirs):
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    ADD.launch(kernel, *ADD.make_inputs("tiny", DEVICE))
    manifest = dirs / "m.json"
    assert cli("export", "-o", str(manifest)).stdout.strip() == f"wrote 1 entry to {manifest}"
    page = dirs / "page.html"
    assert cli("report", "-o", str(page)).stdout.strip() == f"wrote a report of 1 entry to {page}"
    again = cli("import", str(manifest))
    assert again.returncode == 0 and "imported 0 entries" in again.stdout and "1 was already there" in again.stdout
    there = cli("import", str(manifest), env={"TRITON_DIST_AUTOTUNE_DIR": str(dirs / "there")})
    assert "imported 1 entry into" in there.stdout and "0 were already there" in there.stdout


def test_help_shows_no_markup():
    texts = [cli("--help").stdout] + [cli(command, "--help").stdout for command in COMMANDS]
    assert all(texts) and not [t for t in texts if "`" in t], [t for t in texts if "`" in t]
    assert "Look at, export, move and clear" in texts[0]


def _options_table() -> dict:
    """docs/cli.md's table of which command takes which option: {option row: {command: yes/no}}."""
    text = (ROOT / "docs" / "cli.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    header = next(r for r in rows if r.startswith("| option |"))
    commands = [c.strip(" `") for c in header.strip("|").split("|")[1:]]
    table = {}
    for row in rows[rows.index(header) + 1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != len(commands) + 1:
            break
        table[cells[0]] = {c: cell.startswith("yes") for c, cell in zip(commands, cells[1:])}
    return table


def test_the_docs_say_exactly_which_command_takes_which_option():
    table = _options_table()
    assert set(table) == {"`NAME`, `--exact`", "`--kernels`, `--functions`"}
    for row, option in (("`NAME`, `--exact`", "--exact"), ("`--kernels`, `--functions`", "--kernels")):
        assert set(table[row]) == set(COMMANDS)
        for command, takes in table[row].items():
            shown = cli(command, "--help").stdout
            assert (option in shown) == takes, (command, option)
    refused = cli("misses", "--kernels")
    assert refused.returncode == 2 and "unrecognized arguments: --kernels" in refused.stderr


def _contents() -> list:
    """docs/index.md's contents: (number or None, text) per item, an item being a line that opens
    with a link to a page and a colon, with the lines after it that do not."""
    items: list = []
    for line in (ROOT / "docs" / "index.md").read_text().split("## Contents\n", 1)[1].splitlines():
        item = re.match(r"\s*(?:(\d+)\. )?(\[[^\]]+\]\([\w.-]+\.md\):.*)", line)
        if item:
            items.append((int(item[1]) if item[1] else None, item[2]))
        elif line.strip() and items:
            items[-1] = (items[-1][0], items[-1][1] + " " + line.strip())
    return items


def test_the_docs_contents_are_numbered_one_by_one():
    items = _contents()
    assert len(items) >= 14 and [n for n, _ in items] == list(range(1, len(items) + 1)), \
        [f"{n}. {text[:40]}" for n, text in items]


def test_the_docs_name_every_command_and_the_same_supported_versions():
    (command_text,) = [text for _, text in _contents() if text.startswith("[`triton-dist-tune`](cli.md)")]
    assert all(f"`{c}`" in command_text for c in COMMANDS), command_text
    claim = "`triton` 3.2 and 3.4 to 3.9"
    texts = {name: re.sub(r"\s+", " ", (ROOT / name).read_text())
             for name in ("README.md", "docs/index.md", "docs/versions.md")}
    for name, text in texts.items():
        assert claim in text, name
        assert "3.4+," not in text and "3.2 to 3.9" not in text, name
