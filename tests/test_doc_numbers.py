"""Every measured number README.md and docs/*.md state comes from a results file in benchmarks/results/.

The rule, as these tests apply it:

- **A stated number** is a number followed directly by a unit: a time (``ns``, ``µs``, ``us``, ``ms``,
  ``s``, ``min``, ``minutes``, ``seconds``), a ratio (``x`` or ``×`` not followed by a digit, so that
  ``4096x4096`` is a shape, not a ratio), a percentage (``%``) or a size (``KB``, ``MB``, ``GB``,
  ``KiB``, ``MiB``, ``GiB``). Only prose and tables count: fenced code blocks, inline code
  (``` `...` ```), HTML comments and docs/settings.md's generated table (every setting's default,
  generated from the code) are left out.
- **Its source** is a markdown link whose target is a file under ``benchmarks/results/``. A block (a
  paragraph, one list item with its continuation lines, or a whole table) that states a number must
  hold such a link, or its section must (the text from its heading, of any level, to the next
  heading): that is the whole test of (a) below.
- **Not a measurement**: a setting's default, a limit or a count the code fixes, a cost planted in
  an example. Those are listed in ``NOT_MEASURED`` below, each by a phrase around the number in its
  document, with why it is not a measurement. A number in a block and section without a source
  must lie inside one of its document's phrases; a phrase no longer found fails too, so the list
  cannot go stale.
- **The citation**: every results file a document links is cited at least once in that document
  with its date and the command that wrote it, written ``[...](PATH) (YYYY-MM-DD, `COMMAND`)``, the
  command naming a script of ``benchmarks/`` that exists (the files record neither: the date is
  the day the file was committed); every ``benchmarks/results/`` path a document names, in a link,
  in code or in prose, exists.
- **The headlines**: the numbers a newcomer reads first (the tuned launch against a direct one, the
  48-config first call and its ratio, the 1,152-config first call, ...) are recomputed here from
  their results files and must agree with the text at the precision it states. Each is found by
  the sentence around it: rewording one means rewording its pattern here too.

Everything is read from the checkout; nothing is written, nothing runs on a device.
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: A number with a unit (see the module docstring). ``x``/``×`` followed by a digit is a shape.
NUMBER = re.compile(
    r"(?<![\w.,])[-+−]?\d+(?:,\d{3})*(?:\.\d+)?\s?"
    r"(?:(?:ns|µs|us|ms|s|min|minutes|seconds|KB|MB|GB|KiB|MiB|GiB)(?![\w])|%|(?:x|×)(?![\w\d]|\s?\d))")
#: A markdown link and its target.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: A full citation: the link, then its date and command.
CITATION = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)\s*\((\d{4}-\d{2}-\d{2}),\s*`([^`]+)`")
#: A path under benchmarks/results/ named anywhere.
RESULTS_PATH = re.compile(r"(?:benchmarks/)?results/([\w.\-]+\.(?:json|log))")
GENERATED_SETTINGS = "<!-- settings table: generated -->"

#: Numbers that are not measurements, by document: {phrase around the number: why}.
NOT_MEASURED: dict[str, dict[str, str]] = {
    "docs/ascend.md": {
        "Ascend950 have 256 KB": "the unified buffer the hardware model assumes per chip name",
        "310B have 192 KB": "the same",
        "the 256 KB / 192 KB unified-buffer model": "the same",
    },
    "docs/cli.md": {"larger than 32 MB": "the size above which an entry file is refused unread"},
    "docs/security.md": {"larger than 32 MB": "the same limit"},
    "docs/production.md": {"by over 0.5% on average": "store/predict.MARGIN, the held-out check's margin"},
    "docs/contextual.md": {
        "| rank 0 | 10 ms | 60 ms | 40 ms |": "costs a test plants per rank, to show the reduction",
        "| rank 1 | 70 ms | 20 ms | 30 ms |": "the same",
        "| MAX | 70 ms | 60 ms | **40 ms** |": "the same",
    },
    "docs/distributed.md": {
        "| rank 0 | 1 ms | 3 ms | 4 ms |": "a worked example of the MAX reduction",
        "| rank 1 | 5 ms | 2 ms | 1 ms |": "the same",
        "| MAX | 5 ms | **3 ms** | 4 ms |": "the same",
        "at 1, 9 and 5 ms": "another worked example",
        "at 8, 2 and 6 ms": "the same",
    },
    "docs/plugins.md": {"(5 ms) of runs each": "how long a settling round runs (policy)"},
    "docs/search.md": {
        "(about 5 ms of runs each, 25 to 100 runs: a short kernel's runs scatter by a percent or two, which a "
        "median of 25 leaves at a few tenths of a percent": "a settling round's length (policy); the scatter is "
        "the measured one the next section cites",
        "about 25 ms of calls each": "how long the full measurement runs (policy)",
        "(and over 10 s)": "the straggler setting's floor",
        "(within 15% of the best, at most a tenth)": "screening's cut (policy)",
        "at least 3% for the screening round (5 runs) and 2% for the second (25 runs)": "the rounds' noise floors",
        "(within 15%, at most a tenth of the candidates": "screening's cut",
        "(1%, or their measured spread where wider, up to 5%; 2% for a timer": "the settling rounds' tie",
        "Those still within 1%": "the tie",
        "(2% at most)": "the tie's ceiling",
        "about 10 ms each in the full measurement": "the quick effort's rounds",
        "about 100 ms each": "the full effort's rounds",
        "3 settling rounds of about 2 ms each": "the quick effort's settling rounds",
        "10 settling rounds of about 20 ms each": "the full effort's settling rounds",
    },
    "docs/tiling.md": {
        "(227 KB on an H200; 48 KB if torch reports none) | 64 KB | 192 KB unified buffer":
            "each backend's on-chip memory as the hardware model takes it",
        "(192 KB unified buffer": "the same",
        "at most 50%": "a generation rule",
        "at most 100%": "the definition of busy cores",
        "padding of at most 25%": "a ranking rule",
        "300 s), leaves": "the compile timeout's default",
        "within 15% of the best screening time": "screening's cut",
        "within 15%, the 3 best": "the same",
        "about 25 ms of calls each": "how long the full measurement runs (policy)",
        "about 0.2 ms per timed call": "the device-side sleep the screening queues behind",
    },
    "docs/timing.md": {
        "the benchmarker's 25 + 100 ms": "upstream do_bench's default warm-up and repetition budgets",
        "take about 25 ms by their earlier rounds": "how long the full measurement runs (policy)",
        "runs for about 25 ms, untimed": "the warm-up before the longer rounds (policy)",
        "screened under 0.1 ms": "below which a short kernel's later rounds are profiled (policy)",
        "at most 200 times, not about 25 ms": "the profiled full measurement's cap (policy)",
    },
}


# -- reading the documents ---------------------------------------------------------------------


def _prose(text: str) -> str:
    """``text`` less HTML comments and inline code (each code span blanked to its length)."""
    text = re.sub(r"<!--.*?-->", lambda m: " " * len(m.group()), text, flags=re.S)
    return re.sub(r"`[^`]+`", lambda m: " " * len(m.group()), text)


def blocks(path: Path) -> list[tuple[int, str]]:
    """``(section number, block text)`` for every paragraph, list item and table outside code; each
    heading starts a section (and is a block of its own, empty)."""
    text = path.read_text()
    if path.name == "settings.md":
        text = text.split(GENERATED_SETTINGS)[0]
    out: list[tuple[int, str]] = []
    section, current, fenced = 0, [], False

    def close() -> None:
        if current:
            out.append((section, "\n".join(current)))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("#"):
            close()
            section += 1
            out.append((section, ""))
            continue
        is_table = stripped.startswith("|")
        starts_item = re.match(r"\s*(?:[-*+]|\d+\.)\s", line) is not None
        in_table = bool(current) and current[-1].strip().startswith("|")
        if not stripped or starts_item or is_table != in_table:
            close()
        if stripped:
            current.append(line)
    close()
    return out


def sections(path: Path) -> dict[int, str]:
    """Each section's whole text (its blocks joined), by its number."""
    joined: dict[int, list[str]] = {}
    for section, block in blocks(path):
        joined.setdefault(section, []).append(block)
    return {h: "\n".join(b) for h, b in joined.items()}


def results_links(path: Path, text: str) -> list[Path]:
    """The files under benchmarks/results/ that ``text``'s links point to (resolved from ``path``)."""
    found = []
    for target in LINK.findall(text):
        resolved = (path.parent / target.split("#")[0]).resolve()
        if RESULTS.resolve() in resolved.parents:
            found.append(resolved)
    return found


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- (a) every stated number has a source, or is listed as no measurement ------------------------


def unsourced(path: Path) -> list[tuple[str, str]]:
    """``(number, the block's first words)`` for each number of ``path`` with no source and no phrase."""
    allowed = NOT_MEASURED.get(_name(path), {})
    whole = sections(path)
    missing = []
    for section, block in blocks(path):
        if not block or results_links(path, block) or results_links(path, whole[section]):
            continue
        flat = " ".join(_prose(block).split())
        spans = [(m.start(), m.end()) for phrase in allowed for m in re.finditer(re.escape(phrase), flat)]
        for m in NUMBER.finditer(flat):
            if not any(a <= m.start() and m.end() <= b for a, b in spans):
                missing.append((m.group(), flat[:90]))
    return missing


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_stated_number_has_a_source_or_is_listed_as_no_measurement(path):
    missing = unsourced(path)
    assert not missing, (f"{_name(path)}: numbers with no link to benchmarks/results/ in their block or "
                         f"section, and not in NOT_MEASURED: {missing}")


def test_every_phrase_listed_as_no_measurement_is_still_there():
    for name, phrases in NOT_MEASURED.items():
        flat = " ".join(" ".join(_prose(b).split()) for _, b in blocks(ROOT / name))
        gone = [p for p in phrases if p not in flat]
        assert not gone, f"{name}: phrases of NOT_MEASURED no longer in the text: {gone}"


# -- (b) every cited results file exists, with its date and command --------------------------------


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_results_file_named_exists(path):
    text = path.read_text()
    named = set(RESULTS_PATH.findall(text)) | {p.name for p in results_links(path, text)}
    absent = sorted(n for n in named if not (RESULTS / n).is_file())
    assert not absent, f"{_name(path)} names results files that do not exist: {absent}"


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_results_file_linked_is_cited_with_its_date_and_command(path):
    text = path.read_text()
    cited = {}
    for target, date, command in CITATION.findall(text):
        resolved = (path.parent / target).resolve()
        if RESULTS.resolve() in resolved.parents:
            cited[resolved.name] = (datetime.date.fromisoformat(date), command)  # a real date
            scripts = re.findall(r"benchmarks/[\w/]+\.py", command)
            assert scripts and all((ROOT / s).is_file() for s in scripts), (
                f"{_name(path)}: the command cited for {resolved.name} names no script of benchmarks/: {command}")
    linked = {p.name for p in results_links(path, text)}
    uncited = sorted(linked - set(cited))
    assert not uncited, (f"{_name(path)} links results files never cited with their date and command "
                         f"(`[...](PATH) (YYYY-MM-DD, \\`COMMAND\\`)`): {uncited}")


def test_the_rule_finds_numbers_and_tells_shapes_and_code_apart():
    found = [m.group() for m in NUMBER.finditer(
        _prose("0.99x and 1.48× a launch, 2.79 s, 41.1s, 0.864 µs, 614 MiB, +2.4%, 1,152 ms; "
               "4096x4096, 128×256, 8 x 2 shapes, version 3.2.0, `TIMEOUT=3s` and BLOCK_K 64"))]
    assert found == ["0.99x", "1.48×", "2.79 s", "41.1s", "0.864 µs", "614 MiB", "+2.4%", "1,152 ms"]


# -- (c) the headlines agree with their results files -----------------------------------------------


def load(name: str):
    return json.loads((RESULTS / name).read_text())


def agrees(stated: str, value: float) -> bool:
    """``stated`` (a decimal as written) is ``value`` rounded to the digits it shows."""
    digits = len(stated.split(".")[1]) if "." in stated else 0
    return abs(float(stated) - value) <= 0.5 * 10 ** -digits + 1e-9


def stated(path: str, pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern``'s one match in ``path``'s text (whitespace flattened)."""
    flat = " ".join((ROOT / path).read_text().split())
    found = re.findall(pattern, flat)
    assert len(found) == 1, f"{path}: expected one match of {pattern!r}, found {found}"
    return found[0] if isinstance(found[0], tuple) else (found[0],)


def check(path: str, pattern: str, expected: list[float]) -> None:
    """Each number ``pattern`` captures in ``path`` agrees with ``expected``, in order."""
    got = stated(path, pattern)
    assert len(got) == len(expected)
    wrong = [(s, round(v, 4)) for s, v in zip(got, expected) if not agrees(s, v)]
    assert not wrong, f"{path}: stated against the results file (stated, computed): {wrong}"


N = r"(\d+(?:\.\d+)?)"  # one stated number, captured


def test_the_tuned_launch_against_a_direct_one():
    data = load("foundation_dispatch_h200_issue35_final.json")
    plugin, upstream = data["plugin"], data["upstream"]
    p_us, u_us = plugin["dispatch_median_us"], upstream["dispatch_median_us"]
    ratios = [plugin["dispatch_median_ratio"], upstream["dispatch_median_ratio"]]
    assert len(plugin["dispatch"]) == len(upstream["dispatch"]) == 31  # "the medians of 31 interleaved rounds"
    check("README.md", rf"on an H200: {N}x a direct launch of the same compiled kernel, where upstream's "
                       rf"autotuner is {N}x", ratios)
    check("README.md", rf"host time: {N}x a direct launch of the same compiled kernel with a tuple grid \({N} us "
                       rf"against {N} us\), against upstream's {N}x \({N} us against {N} us\)",
          [ratios[0], p_us["tuned_us"], p_us["direct_us"], ratios[1], u_us["tuned_us"], u_us["direct_us"]])
    check("docs/index.md", rf"\({N}x on an H200; upstream's autotuner {N}x", ratios)
    check("docs/activation.md", rf"was {N}x a direct launch of the same compiled kernel with a tuple grid \({N} us "
                                rf"against {N} us; upstream's autotuner, in a process of its own, {N}x: {N} us "
                                rf"against {N} us\), and {N} us with the direct launch off",
          [ratios[0], p_us["tuned_us"], p_us["direct_us"], ratios[1], u_us["tuned_us"], u_us["direct_us"],
           p_us["tuned_direct_launch_off_us"]])


def test_the_48_config_first_call_and_its_ratio():
    data = load("search_first_h200_issue35_final.json")
    upstream = data["first_upstream"]["first_call_s"]
    plugin = [data["first_plugin"]["first_call_s"], data["first_plugin_again"]["first_call_s"]]
    ratios = [upstream / s for s in plugin]
    check("README.md", rf"upstream {N} s, the plugin {N} s and {N} s in the runs before and after it "
                       rf"\({N}x and {N}x\)", [upstream, *plugin, *ratios])
    check("docs/tiling.md", rf"\| first call \| {N} s \| {N} s and {N} s \({N}× and {N}× less\) \|",
          [upstream, *plugin, *ratios])
    check("docs/search.md", rf"\*\*First call: {N}x and {N}x upstream.\*\*", ratios)
    check("docs/index.md", rf"first call took {N}-{N} s on an H200 where upstream took {N} s",
          [min(plugin), max(plugin), upstream])
    # "all three picking the same config, the exhaustive ground truth's best"
    best = load("search_truth_h200.json")["best"]
    assert {data[k]["pick"] for k in ("first_plugin", "first_upstream", "first_plugin_again")} == {best}
    assert {data[k]["compiled"] for k in ("first_plugin", "first_plugin_again")} == {16}


def test_the_1152_config_first_call():
    large = load("model_h200.json")["large"]["model"]
    assert len(large) == 1  # "one run"
    run = large[0]
    check("README.md", rf"a 1,152-config matmul space at 4096³: {N} s, {N} configs compiled, the pick {N}% "
                       rf"slower than the exhaustive best", [run["first_call_s"], run["compiled"],
                                                           100 * run["pick_vs_best"]])
    search = load("search_h200.json")
    check("README.md", rf"`halving` alone took {N} s, compiling {N}, and picked the exhaustive best, and a second "
                       rf"shape warm-started from it took {N} s against {N} s cold",
          [search["large_halving"]["first_call_s"], search["large_halving"]["compiled"],
           search["large_second_warm"]["first_call_s"], search["large_second_cold"]["first_call_s"]])
    assert search["large_halving"]["pick"] == load("search_truth_h200.json")["best"]
    no_warmup = [r["first_call_s"] for r in load("model_h200_no_warmup.json")["large"]["model"]]
    check("docs/search.md", rf"\*\*The large space: {N} s\*\* \({N}-{N} s without the warm-up\)",
          [run["first_call_s"], min(no_warmup), max(no_warmup)])


def test_the_cost_models_first_call_ratios():
    def median_ratio(name: str) -> float:
        first = load(name)["first"]
        return (statistics.median(r["first_call_s"] for r in first["upstream"])
                / statistics.median(r["first_call_s"] for r in first["model"]))

    check("docs/search.md", rf"\*\*First call: {N}x upstream\*\* \(medians {N} s and {N} s\), and {N}x in the run "
                            rf"without the warm-up \({N} s and {N} s\)",
          [median_ratio("model_h200.json"),
           statistics.median(r["first_call_s"] for r in load("model_h200.json")["first"]["upstream"]),
           statistics.median(r["first_call_s"] for r in load("model_h200.json")["first"]["model"]),
           median_ratio("model_h200_no_warmup.json"),
           statistics.median(r["first_call_s"] for r in load("model_h200_no_warmup.json")["first"]["upstream"]),
           statistics.median(r["first_call_s"] for r in load("model_h200_no_warmup.json")["first"]["model"])])


def test_generated_candidates_against_expert_spaces():
    quality = load("tiling_quality_h200_model.json")["quality"]
    generated = [q["generated_candidates"] for q in quality]
    gaps = [q["gap_pct"] for q in quality]
    check("README.md", rf"{N} to {N} generated candidates timed, picks between {N}% faster and {N}% slower",
          [min(generated), max(generated), -min(gaps), max(gaps)])


def test_real_libraries_first_calls_and_steady_state():
    data = load("real_libs_h200_issue35_final.json")
    ops = data["per_op"]
    modes = ("before", "after")
    speedups = [o["modes"]["disabled"]["first_call_s"] / o["modes"][m]["first_call_s"]
                for o in ops.values() for m in modes]
    mlp = ops["liger_swiglu_mlp"]["modes"]
    close = [op for op, o in ops.items() if all(abs(o["modes"][m]["steady_ratio"] - 1) <= 0.03 for m in modes)]
    check("README.md", rf"first calls {N}x to {N}x faster \(Liger's TMA SwiGLU MLP: {N} s to {N}-{N} s\); steady "
                       rf"state within 3% of upstream's for {N} of {N} ops",
          [min(speedups), max(speedups), mlp["disabled"]["first_call_s"],
           min(mlp[m]["first_call_s"] for m in modes), max(mlp[m]["first_call_s"] for m in modes),
           len(close), len(ops)])
    assert all(o["outputs"][m]["equal"] for o in ops.values() for m in modes)  # "bitwise equal"


def test_short_kernel_timing_and_the_contextual_step():
    short = {side: load("foundation_h200x2host.json")[side]["short_kernel"] for side in ("upstream", "plugin")}
    cupti = [1e3 * s["cupti_ms"] for s in short.values()]
    events = [1e3 * s["event_ms"] for s in short.values()]
    check("README.md", rf"an add kernel of {N}-{N} us \(CUPTI's kernel time\) timed with `TRITON_BENCH_METHOD="
                       rf"profiler`: {N} us, where device events read {N}-{N} us",
          [min(cupti), max(cupti), 1e3 * short["plugin"]["plugin_profiler_ms"], min(events), max(events)])
    context = load("contextual_h200.json")
    check("README.md", rf"and the step {N}% slower with the in-context picks", [-context["context_speedup_pct"]])


def test_the_same_pick_in_every_process():
    summary = load("steady14_h200_s53.json")["summary"]
    plugin, upstream = summary["plugin"], summary["upstream"]
    assert summary["plugin"]["cases"] == 14  # "over 14 kernels and shapes"
    check("docs/index.md", rf"the plugin's flip rate was {N} against upstream's {N}, its\s+picks {N}% from the best "
                           rf"on average and {N}% at worst",
          [plugin["flip_rate"], upstream["flip_rate"], plugin["mean_pct"], plugin["worst_of_all_pct"]])
