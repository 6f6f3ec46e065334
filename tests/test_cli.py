"""The installed ``triton-dist-tune`` console script over real cache files."""

import csv
import io
import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import DEVICE, listed, python, run_cli

from triton_dist_plugin.tune import autotune

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    # A kernel-level entry in the format Triton's Autotuner.check_disk_cache writes
    # (it writes none under the interpreter, so this one is laid down by hand).
    kdir = tmp_path / "triton-cache" / "3f2a"
    kdir.mkdir(parents=True)
    (kdir / "matmul_kernel.autotune.json").write_text(json.dumps({
        "key": [512, 512, 512, "torch.float16"],
        "configs_timings": [[{"kwargs": {"BLOCK_M": 64}, "num_warps": 4, "num_stages": 3, "pre_hook": None},
                             [0.5, 0.4, 0.6]],
                            [{"kwargs": {"BLOCK_M": 128}, "num_warps": 8, "num_stages": 3, "pre_hook": None},
                             [0.3, 0.2, 0.4]]]}))

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda x: tuple(x.shape))
    def scaled_sum(x, factor):
        return (x * factor).sum()

    scaled_sum(torch.ones(8, device=DEVICE))
    scaled_sum(torch.ones(4, device=DEVICE))
    return tmp_path


def cli(*args):
    return run_cli(*args)


def test_console_script_is_installed():
    assert SCRIPT.exists(), "pip install -e . installs the triton-dist-tune console script"


def test_list_shows_function_and_kernel_entries(homes):
    result = cli("list")
    assert result.returncode == 0, result.stderr
    rows = listed(result.stdout)
    assert result.stdout.splitlines()[1].split() == ["name", "pick", "pick", "ms", "decided", "timed", "when", "(UTC)"]
    functions = [r for r in rows if r["place"] == f"function-level picks, in {homes / '.triton_dist' / 'autotune'}"]
    assert [r["name"].rsplit(".", 1)[-1] for r in functions] == ["scaled_sum"] * 2
    (triton_file,) = [r for r in rows if r["name"] == "matmul_kernel"]
    place = f"Triton's own tuning files (cache_results), in Triton's cache: {homes / 'triton-cache'}"
    assert triton_file["place"] == place
    assert triton_file["pick ms"] == "0.3000" and triton_file["key"] == "[512, 512, 512, 'torch.float16']"


def test_show_lists_every_candidate_and_marks_the_pick(homes):
    result = cli("show", "matmul_kernel")
    assert result.returncode == 0
    assert "BLOCK_M=64" in result.stdout and "BLOCK_M=128" in result.stdout
    picked = [line for line in result.stdout.splitlines() if line.rstrip().endswith("*")]
    assert len(picked) == 1 and "BLOCK_M=128" in picked[0]
    missing = cli("show", "nothing-like-this")
    assert missing.returncode == 1 and "triton-dist-tune list" in missing.stderr


def test_export_json_and_csv(homes, tmp_path):
    out = tmp_path / "manifest.json"
    assert cli("export", "-o", str(out)).returncode == 0
    data = json.loads(out.read_text())
    assert {d["kind"] for d in data} == {"function", "kernel"} and len(data) == 3
    rows = list(csv.DictReader(io.StringIO(cli("export", "--format", "csv", "--functions").stdout)))
    assert len(rows) == 2 and all(r["kind"] == "function" for r in rows)


def test_clear_needs_a_name_or_all(homes):
    refused = cli("clear")
    assert refused.returncode == 2 and "--all" in refused.stderr
    assert "cleared 2 entries" in cli("clear", "scaled_sum").stdout
    assert "scaled_sum" not in cli("list").stdout
    assert "cleared 1 entry" in cli("clear", "--all").stdout
    assert "nothing tuned yet" in cli("list").stdout


@pytest.mark.parametrize("bad", [{"candidates": [1, 2]}, {"candidates": "abc"}, {"timestamp": 5},
                                 {"configs_timings": "x"}, {"configs_timings": [[1, 2]]}])
def test_a_cache_file_with_wrong_field_types_is_skipped_with_a_warning(homes, bad):
    if "configs_timings" in bad:
        path = homes / "triton-cache" / "3f2a" / "bad.autotune.json"
        path.write_text(json.dumps({"key": [1], **bad}))
    else:
        good = next((homes / ".triton_dist" / "autotune").glob("*/*.json"))
        path = good.with_name("bad.json")
        path.write_text(json.dumps({**json.loads(good.read_text()), **bad}))
    for command in ("list", "show", "export"):
        result = cli(command, *(["scaled_sum"] if command == "show" else []))
        assert result.returncode == 0, result.stderr
        assert f"skipping {path}" in result.stderr
    shown = cli("list").stdout
    assert sum("scaled_sum" in line for line in shown.splitlines()) == 2  # the good entries still show


def test_list_shows_the_plugins_persisted_kernel_picks_and_clear_of_nothing_fails(homes):
    import triton

    from kernels import KERNELS

    add = KERNELS["add"]
    x, y = add.make_inputs("tiny", DEVICE)
    add.launch(triton.autotune(configs=add.configs(DEVICE), key=add.key)(add.jit), x, y)
    result = cli("list", "--kernels")
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in listed(result.stdout) if r["name"] == "add_kernel"]
    assert row["key"].startswith("(1000,") and row["place"].startswith("kernel-level picks, in Triton's cache: ")
    shown = cli("show", "add_kernel")
    assert shown.returncode == 0 and "*" in shown.stdout
    missing = cli("clear", "no_such_kernel")
    assert missing.returncode == 1 and "no entry matches" in missing.stderr
    cleared = cli("clear", "add_kernel")
    assert cleared.returncode == 0 and "cleared 1 entry" in cleared.stdout
    assert "add_kernel" not in cli("list").stdout


# A real add kernel whose device slows down as it runs: its grid grows by one program every eight
# launches (as a GPU that heats and clocks down), so the screening rounds, run first, time faster
# than the finalists' full measurement, run last: some screened-out candidate's short-round time is
# smaller than the pick's own, full one.
WARMING = """
import triton
import triton_dist_plugin as tdp
from kernels import KERNELS

add = KERNELS["add"]
x, y = (t[:256].clone() for t in add.make_inputs("tiny", "cpu"))
out, n = x.clone(), x.numel()


class Warming:
    # Each candidate runs for real; its time grows with every timing before it (a device that
    # warms up under load), so the screening rounds come out faster than the pick's full
    # measurement, whatever the machine's own load does to the interpreter.
    timed = 0

    @tdp.hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        Warming.timed += 1
        return 1.0 + 0.25 * Warming.timed


tdp.register(Warming())
kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256, 512)],
                         key=["n"])(add.jit)
kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
assert (out == x + y).all()
"""


def test_every_view_tells_full_measurements_from_screening_rounds_after_a_disk_hit(tmp_path):

    from helpers import run_python

    env = {"HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
           "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tdp"), "TRITON_PRINT_AUTOTUNING": "1"}
    tuned, hit = run_python(WARMING, env), run_python(WARMING, env)
    assert tuned.returncode == 0 and hit.returncode == 0, tuned.stderr[-3000:] + hit.stderr[-3000:]
    (path,) = (tmp_path / "tdp" / "kernels" / "add_kernel").glob("*.json")
    record = json.loads(path.read_text())
    pick = next(c for c in record["candidates"] if c["config"] == record["pick_config"])
    screened = [c for c in record["candidates"] if not c["measured"]]
    assert pick["measured"] and len(screened) == 4
    assert min(c["ms"] for c in screened) < pick["ms"]  # the case at issue: a screening round faster than the pick

    # The second process's print (a disk hit) sets the screening rounds apart, as the tuning's did.
    def screened_lines(out: str) -> list:
        tail = out.split("screened out (a short round each)")[1].split("best config selected")[0]
        return sorted(line.split("BLOCK: ")[1].split(",")[0] for line in tail.splitlines() if " ms" in line)

    assert "from the disk cache" in hit.stdout and "from the disk cache" not in tuned.stdout
    assert screened_lines(hit.stdout) == screened_lines(tuned.stdout) and len(screened_lines(hit.stdout)) == 4
    assert "measured fully" in hit.stdout.split("screened out")[0]

    def run(*args):
        done = run_cli(*args, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # list: the pick's own time, not the fastest screening round's, and how the entry was timed.
    (row,) = listed(run("list", "--kernels"))
    assert row["pick ms"] == f"{pick['ms']:.4f}" and f"{min(c['ms'] for c in screened):.4f}" not in row["row"]
    assert row["timed"] == "2 full + 4 screened"
    # show: each time with its round, the pick's a full measurement.
    rows = [line.split() for line in run("show", "add_kernel").splitlines() if line.startswith("Config(")]
    assert sorted(r[5] for r in rows) == ["full"] * 2 + ["screening"] * 4  # candidate (4 words), ms, round
    (picked,) = [r for r in rows if r[-1] == "*"]
    assert picked[4] == f"{pick['ms']:.4f}" and picked[5] == "full"
    # export: best_ms is the pick's, every candidate says its round.
    exported = json.loads(run("export", "--kernels"))[0]
    assert exported["best_ms"] == pick["ms"]
    assert sorted(c["round"] for c in exported["candidates"]) == ["full"] * 2 + ["screening"] * 4
    (row,) = csv.DictReader(io.StringIO(run("export", "--format", "csv", "--kernels")))
    assert float(row["best_ms"]) == pick["ms"] and (row["measured_fully"], row["screened"]) == ("2", "4")


def test_every_command_names_each_entry_it_cannot_read_and_counts_them(homes, tmp_path):
    """A cut-short, binary, non-JSON, invalid, too large or linked entry file: each command that
    reads entries names each on standard error, with why, and counts them at the end; the
    readable entries are still shown."""
    from triton_dist_plugin.store import filestore

    good = sorted((homes / ".triton_dist" / "autotune").glob("*/*.json"))[0]
    folder = good.parent
    victim = tmp_path / "victim.json"
    victim.write_text(good.read_text())
    bad = {"cut": good.read_bytes()[:80], "binary": b"\x00\xff\xfe" * 10, "text": b"not json at all",
           "invalid": json.dumps({**json.loads(good.read_text()), "candidates": "abc"}).encode()}
    paths = {}
    for i, (what, data) in enumerate(bad.items()):
        paths[what] = folder / f"{i:032x}.json"
        paths[what].write_bytes(data)
    paths["large"] = folder / ("e" * 32 + ".json")
    with open(paths["large"], "wb") as f:
        f.truncate(filestore.ENTRY_LIMIT + 1)  # sparse: nothing on disk
    paths["link"] = folder / ("d" * 32 + ".json")
    paths["link"].symlink_to(victim)
    why = {"cut": "not JSON, or cut short", "binary": "not UTF-8 text", "text": "not JSON",
           "invalid": "field 'candidates' is str", "large": "more than", "link": "symbolic link"}
    for args in (["list"], ["show", "scaled"], ["export"], ["report", "-o", str(tmp_path / "r.html")],
                 ["clear", "scaled", "-n"]):
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        lines = result.stderr.splitlines()
        for what, path in paths.items():
            (line,) = [line for line in lines if str(path) in line]
            assert line.startswith(f"triton-dist-tune: warning: skipping {path}: ") and why[what] in line, line
        assert lines[-1].startswith("triton-dist-tune: warning: 6 entries could not be read"), lines
        assert len(lines) == 7, lines
    assert sum("scaled_sum" in line for line in cli("list").stdout.splitlines()) == 2


def test_list_prints_each_entry_as_it_is_read():
    """The rows come out while the entries are still being read: a listing of any size holds a
    few hundred rows at most."""
    from triton_dist_plugin.cli.entries import Entry
    from triton_dist_plugin.cli.views import list_lines

    def entries():
        for i in range(1000):
            yield Entry("kernel", "k", f"({i},)", "p", 1.0, "2026-01-01T00:00:00", "x.json")
        raise RuntimeError("read past the end")

    printed = []
    with pytest.raises(RuntimeError, match="read past the end"):
        for line in list_lines(entries()):
            printed.append(line)
    assert len(printed) == 2 + 2 * 1000 and printed[0].split()[:2] == ["name", "pick"]  # a key under each row
    lazy = list_lines(iter([Entry("kernel", "k", "(1,)", "p", 1.0, "w", "x")] * 300 + [None]))
    first = [next(lazy) for _ in range(4)]  # 200 rows read to size the columns, not 301
    assert first[2].split()[:2] == ["k", "p"] and first[3] == "  key=(1,)"


def test_candidates_the_search_left_out_are_skipped_not_failed(tmp_path, monkeypatch):
    """A searched space stores every candidate; those never screened read as skipped, with the
    reason, never as failures (list's count, show's round column)."""
    import triton
    from search_space import SPACE, copy

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "picks"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_WHOLE", "4")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH_BUDGET", "6")
    space = SPACE[:12]
    kernel = triton.autotune(configs=space, key=["n"])(copy)
    x, y = torch.randn(64, device=DEVICE), torch.zeros(64, device=DEVICE)
    kernel[lambda m: (triton.cdiv(64, m["BLOCK"]),)](x, y, 64)
    result = cli("list", "copy", "--kernels")
    assert result.returncode == 0, result.stderr
    (row,) = listed(result.stdout)
    assert "6 skipped" in row["timed"] and "failed" not in row["timed"], row
    shown = cli("show", "copy", "--kernels").stdout
    assert sum(" skipped " in line and "not screened: the search left it out" in line
               for line in shown.splitlines()) == 6
    assert "skipped = left out by the search" in shown


def test_report_never_raises_on_the_numbers_a_valid_record_holds_in_its_notes(tmp_path, monkeypatch):
    """Notes are free text: a number the phases chart reads that is not one is passed over."""
    import triton

    from kernels import KERNELS
    from triton_dist_plugin.cli.commands import main
    from triton_dist_plugin.store import records

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "picks"))
    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs(DEVICE), key=add.key)(add.jit)
    x = torch.randn(512, device=DEVICE)
    add.launch(kernel, x, x)
    (entry,) = (tmp_path / "picks" / "kernels").glob("*/*.json")
    record = json.loads(entry.read_text())
    record["notes"] = ["compiled 3 candidates in 1.2.3s", "screened 3 of 3 candidates in ..s"]
    assert records.valid(record, "kernel")
    entry.write_text(json.dumps(record))
    assert main(["report", "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().count("add_kernel") >= 1


@pytest.mark.parametrize("command", ["list", "index"])
def test_a_cache_directory_that_is_a_dangling_link_is_said_at_the_command_line(tmp_path, command):
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    env = {**__import__("os").environ, "HOME": str(tmp_path), "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "gone"),
           "TRITON_CACHE_DIR": str(tmp_path / "tc")}
    result = python(SCRIPT, command, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "symbolic link" in line]
    assert len(said) == 1 and "which does not exist" in said[0], result.stderr
