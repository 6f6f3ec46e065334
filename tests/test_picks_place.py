"""Where picks live (docs/picks.md): kernel-level picks in Triton's cache, function-level picks in
their own directory; ``triton-dist-tune list`` names each entry's place and keeps its lines short;
and every page that says where picks are stored links to the page that explains both places.
Real kernels tuned under the interpreter, a real function-level tuner, the command in-process."""

import re

import pytest
import torch
import triton
from helpers import DEVICE, ROOT, listed, run_cli

from kernels import KERNELS
from triton_dist_plugin.tune import autotune

ADD = KERNELS["add"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The defaults but for Triton's cache, which Triton placed in the session's home when it was
    imported: ``TRITON_CACHE_DIR`` moves it here, as a user would (``HOME``/.triton/cache by default)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_DIR", raising=False)
    return tmp_path


def _tune_both():
    """One kernel key (the add kernel) and one function-level key."""
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x, y = ADD.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(ADD.launch(kernel, x, y), x + y)

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def doubled(x, factor):
        return x * 2 if factor == 1 else x + x

    torch.testing.assert_close(doubled(x), 2 * x)


def test_list_shows_each_entry_under_its_place(home):
    _tune_both()
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in listed(result.stdout)}
    assert set(rows) == {"add_kernel", f"{__name__}._tune_both.<locals>.doubled"}
    kernel, function = rows.pop("add_kernel"), rows.popitem()[1]
    kernels = home / "triton-cache" / "triton_dist" / "kernels"
    assert kernel["place"] == f"kernel-level picks, in Triton's cache: {kernels}"
    assert function["place"] == f"function-level picks, in {home / '.triton_dist' / 'autotune'}"
    assert kernel["key"].startswith("(1000, 'torch.float32'") and function["key"] == "(1000,)"
    assert kernel["pick"].startswith("BLOCK=") and "num_ctas" not in kernel["pick"]  # what varies only
    assert function["pick"] in ("factor=1", "factor=2")
    # The files are where docs/picks.md says: a kernel's folder is its name, a function's folder
    # its bare name (__name__), while the record and the listing give module.qualname.
    assert [p.parent.name for p in kernels.glob("*/*.json")] == ["add_kernel"]
    assert [p.parent.name for p in (home / ".triton_dist" / "autotune").glob("*/*.json")] == ["doubled"]


def test_a_fresh_triton_cache_resets_kernel_picks_and_keeps_function_picks(home, monkeypatch, recorder):
    _tune_both()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(home / "fresh-triton-cache"))
    rows = listed(run_cli("list").stdout)
    assert [r["place"].split(",")[0] for r in rows] == ["function-level picks"]
    recorder.records.clear()
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    ADD.launch(kernel, *ADD.make_inputs("tiny", DEVICE))
    assert [r.cache_hit for r in recorder.records] == [False]  # tuned again: its pick went with the cache


def test_the_autotune_dir_holds_both_and_list_says_so(home, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(home / "picks"))
    _tune_both()
    places = [r["place"] for r in listed(run_cli("list").stdout)]
    assert places == [f"function-level picks, in {home / 'picks'}",
                      f"kernel-level picks, in TRITON_DIST_AUTOTUNE_DIR: {home / 'picks' / 'kernels'}"]


def test_no_list_line_is_longer_than_120_characters_for_the_demos_kernels(home, capsys):
    from kernels import demo

    assert demo.main(["--out", str(home / "demo.json")]) == 0
    capsys.readouterr()
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    assert {r["name"] for r in listed(result.stdout)} == {"add_kernel", "layernorm_kernel", "matmul_kernel",
                                                         "scale_kernel", "softmax_kernel"}
    kernels = home / "triton-cache" / "triton_dist" / "kernels"
    heading = f"kernel-level picks, in Triton's cache: {kernels}"  # the one line a long directory may widen
    long = [line for line in result.stdout.splitlines() if len(line) > 120 and line != heading]
    assert not long, "\n".join(long)


# -- the docs: one page says where picks live, and every page that says so links to it ----------

PLACE = re.compile(r"\.triton_dist\b|triton_dist/kernels|\.triton/cache|TRITON_DIST_AUTOTUNE_DIR|TRITON_CACHE_DIR")


def _pages() -> dict:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_every_page_that_says_where_picks_are_stored_links_to_the_page_on_it():
    pages = _pages()
    assert pages["docs/picks.md"].startswith("# Where picks live\n")
    saying = [name for name, text in pages.items() if PLACE.search(text) and name != "docs/picks.md"]
    assert {"docs/cli.md", "docs/tune.md", "docs/production.md"} <= set(saying), saying
    unlinked = [name for name in saying + ["README.md", "docs/index.md"]
                if not re.search(r"\]\((docs/)?picks\.md(#[\w-]+)?\)", pages[name])]
    assert not unlinked, f"say where picks are stored without linking docs/picks.md: {unlinked}"


def test_no_page_puts_a_function_level_entry_in_a_module_qualname_folder():
    """The folder is the function's bare ``__name__`` (``function_level``); only the record and
    the listing carry ``module.qualname``."""
    wrong = {name: found for name, text in _pages().items()
             if (found := re.findall(r"\.triton_dist/autotune/[\w-]+\.[\w.-]+/", text))}
    assert not wrong, wrong
