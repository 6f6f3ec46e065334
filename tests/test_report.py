"""``triton-dist-tune report``: the HTML page rendered in a real headless Chromium (Debian's
package, which ``.ci/run`` installs), checked for what the rendered page shows: every box laid
out, measured from inside the browser."""

import datetime as dt
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, python

from kernels import KERNELS
from triton_dist_plugin.policy import Policy
from triton_dist_plugin.store import persist
from triton_dist_plugin.tune import autotune

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Run in the rendered page (a copy of the report with this script added: the report itself has
# none): what each entry's boxes show and where the browser laid them out.
PROBE = """<script>
const out = {sections: [], overflow: document.documentElement.scrollWidth > window.innerWidth};
const width = document.documentElement.clientWidth;
for (const s of document.querySelectorAll("section.entry")) {
  const q = sel => [...s.querySelectorAll(sel)];
  const text = sel => (s.querySelector(sel) || {}).innerText || "";
  const cut = el => el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().left < -0.5 ||
                    el.getBoundingClientRect().right > width + 0.5;
  const charts = {};
  for (const c of q(".chart")) {
    charts[c.classList.contains("full") ? "full" : "screening"] = {
      max: parseFloat(c.querySelector(".axis").dataset.max),
      bars: [...c.querySelectorAll(".track")].map(t => ({
        ms: parseFloat(t.dataset.ms), pick: t.classList.contains("pick"), label: t.previousElementSibling.innerText,
        share: t.querySelector(".bar").getBoundingClientRect().width / t.getBoundingClientRect().width,
        spread: t.querySelector(".spread") ? t.querySelector(".spread").getBoundingClientRect().width : 0}))};
  }
  out.sections.push({
    title: s.querySelector("h2").innerText, source: s.dataset.source || "", why: text(".why"),
    origin: text(".origin"), same: text(".same"),
    text: s.innerText, charts,
    cut: q(".chart .label, .chart .value, h2, .why, .origin, table.heatmap th, svg text").filter(cut)
         .map(e => e.textContent),
    cells: q("table.heatmap td").map(td => ({cls: td.className, bg: getComputedStyle(td).backgroundColor,
                                            text: td.innerText})),
    phases: q(".phases .phase").map(p => ({cls: p.className, width: p.getBoundingClientRect().width}))});
}
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("needs Chromium (Debian package chromium; .ci/run installs it)")
    profile = tmp_path / "profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1100,900", *args],
                          capture_output=True, text=True, timeout=120)


def cli(*args) -> subprocess.CompletedProcess:
    done = python(SCRIPT, *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


@triton.jit
def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    # The name of kernels/add.py's kernel, another source (as after an edit): its own entries.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(o_ptr + offs, tl.load(y_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """Real tunings: kernels/add.py's kernel over BLOCK x num_warps (a screening round drops
    some, one fails), a kernel of the same name and key from another source (imported from a
    manifest of a day before), and a function-level entry with long candidate descriptions."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_MODEL", "0")  # every candidate screened, the failing one too
    add = KERNELS["add"]
    x, y = add.make_inputs("tiny", DEVICE)
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128, 256, 512) for w in (1, 2)]
    add.launch(triton.autotune(configs=configs + [triton.Config({"BLOCK": 96}, num_warps=1)], key=add.key)(add.jit),
               x, y)
    add.launch(triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (256, 512)], key=add.key)(add_kernel),
               x, y)

    @autotune(config_space=[{"layout": layout, "factor": f} for layout in ("multiply-by-a-python-float-each-call",
                                                                          "multiply-by-a-cached-scalar-tensor")
                            for f in (1, 2)], key_fn=lambda v: tuple(v.shape))
    def scaled(v, layout, factor):
        return v * (torch.tensor(float(factor)) if "tensor" in layout else float(factor))

    scaled(torch.ones(8))
    # The second kernel's pick leaves, and comes back through a manifest made a day after its tuning.
    manifest = tmp_path / "picks.json"
    cli("export", "--kernels", "-o", str(manifest))
    items = [i for i in json.loads(manifest.read_text()) if i["record"]["source"] == persist.source_digest(add_kernel)]
    assert len(items) == 1
    Path(items[0]["path"]).unlink()
    stamp = dt.datetime.fromisoformat(items[0]["record"]["timestamp"]) - dt.timedelta(days=1)
    items[0]["record"]["timestamp"] = stamp.isoformat()
    manifest.write_text(json.dumps(items))
    assert "imported 1 entr" in cli("import", str(manifest)).stdout
    return tmp_path


def _against_the_full_measurement(why: str) -> bool:
    """The box weighs the pick against the full measurement: the runner-up's margin and the p20-p80
    spreads, or, where another finalist was faster there (the real wall clock can make one), why
    the interleaved rounds after it still gave the pick."""
    if "Not the fastest shown" in why:
        return "In the full measurement" in why and "interleaved rounds" in why
    if "interleaved rounds" in why:  # the rounds decided: their margin, said as theirs
        return "runner-up" in why and "over the rounds" in why
    return "runner-up" in why and "p20" in why


def test_the_report_answers_why_this_pick_in_a_rendered_page(tuned, tmp_path):
    page = tmp_path / "report.html"
    made = cli("report", "-o", str(page))
    assert "wrote a report of 3 entries" in made.stdout
    text = page.read_text()
    assert "<script" not in text  # nothing runs
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp_path, "--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    shown = json.loads(html.unescape(found.group(1)))
    assert not shown["overflow"]  # nothing wider than the window
    sections = shown["sections"]
    assert len(sections) == 3 and all(not s["cut"] for s in sections), [s["cut"] for s in sections]
    kernels = [s for s in sections if s["title"].startswith("kernel add_kernel")]
    screened = next(s for s in kernels if "screening" in s["charts"])
    other = next(s for s in kernels if s is not screened)

    # Full measurements and screening rounds on axes of their own; every bar drawn to its axis. The
    # finalists are the policy's final_count, or up to final_most where the wall clock left some tied.
    full, rounds = screened["charts"]["full"], screened["charts"]["screening"]
    policy = Policy()
    assert policy.final_count <= len(full["bars"]) <= policy.final_most, full["bars"]
    assert len(full["bars"]) + len(rounds["bars"]) == 10 and sum(b["pick"] for b in full["bars"]) == 1
    assert max(b["ms"] for b in full["bars"]) <= full["max"] < rounds["max"]
    for chart in (full, rounds):
        for bar in chart["bars"]:
            assert abs(bar["share"] - bar["ms"] / chart["max"]) < 0.02
    assert all(b["spread"] > 0 for b in full["bars"])  # the p20-p80 whiskers
    # Labels in full: the parameters that differ, the shared ones once; nothing clipped (above).
    assert {b["label"] for b in full["bars"] + rounds["bars"]} == {
        f"BLOCK={b}, num_warps={w}" for b in (32, 64, 128, 256, 512) for w in (1, 2)}
    assert "every candidate: num_ctas=1, num_stages=3" in screened["text"]
    # Why this pick: the margin to the runner-up against the p20-p80 noise.
    assert _against_the_full_measurement(screened["why"]) and "noise" in screened["why"]
    pick = next(b for b in full["bars"] if b["pick"])
    assert f"{pick['ms']:.4f} ms" in screened["why"]
    # The heatmap: BLOCK x num_warps, the failed candidate marked, the pick outlined, coloured by time.
    assert "BLOCK × num_warps" in screened["text"]
    assert len(screened["cells"]) == 12 and sum("pick" in c["cls"] for c in screened["cells"]) == 1
    assert sum(c["text"] == "×" for c in screened["cells"]) == 1  # BLOCK=96: failed
    assert len({c["bg"] for c in screened["cells"] if "empty" not in c["cls"]}) >= 4
    assert "power of 2" in screened["text"]  # the failure's reason
    # How the pick was decided among the finalists, said once, in the box (test_model.py: how the cost
    # model did): the full measurement, or the interleaved rounds after it.
    assert ("The full measurement decided" in screened["why"]) != ("interleaved rounds" in screened["why"]), \
        screened["why"]
    assert "Decision: " not in screened["text"]
    # How long each step took.
    assert {p["cls"].split()[1] for p in screened["phases"]} >= {"screening", "measuring"}
    assert all(p["width"] > 0 for p in screened["phases"])
    # Two kernels of one name and key, told apart by their source, and where each pick came from.
    assert screened["source"] != other["source"] and other["source"] == persist.source_digest(add_kernel)
    assert other["source"][:16] in screened["same"] and screened["source"][:16] in other["same"]
    assert screened["origin"].startswith("From: tuned here") and other["origin"].startswith("From: imported")
    assert "1.0 days later" in other["origin"]
    assert "only" not in other["why"] and _against_the_full_measurement(other["why"])  # 2, both measured fully
    function = next(s for s in sections if s["title"].startswith("function"))
    labels = {b["label"] for b in function["charts"]["full"]["bars"]}
    assert "layout='multiply-by-a-cached-scalar-tensor', factor=2" in labels  # long labels wrap, in full

    shot = tmp_path / "report.png"
    drawn = chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert drawn.returncode == 0 and shot.stat().st_size > 10_000, drawn.stderr[-2000:]


def test_a_tie_timed_by_a_plugin_is_told_one_way_in_a_rendered_page(plugins, tmp_path, monkeypatch):
    """The pick of a tie is slower in the chart than another finalist: the page says why in the box,
    the chart's title does not claim it fastest, each margin carries its sign in words, the noise is
    said once (assumed: the plugin's timer gives one number), and the plugin is named as the timer."""
    from test_pick_reason import ADD, FirstSlower, _launch

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    configs = ADD.configs(DEVICE)
    plugins(FirstSlower(configs[0]), name="first-slower")
    _launch(configs)
    page = tmp_path / "report.html"
    cli("report", "-o", str(page))
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp_path, "--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    (section,) = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S).group(1)))[
        "sections"]
    why, text = section["why"], section["text"]
    assert not section["cut"], section["cut"]
    assert "Not the fastest shown" in why and "a tie goes to the first in the configs' order" in why, why
    assert "(0.6% slower)" in why and "noise not measured, 2.0% assumed" in why, why
    assert "the pick is not the fastest of these: see why above" in text and "is the fastest of these" not in text
    assert "noise not recorded" not in text and re.search(r"[-+]-\d|took -\d", text) is None, text
    assert "timed by plugin 'first-slower'" in text and "timing: wall" not in text, text
    assert sorted(b["ms"] for b in section["charts"]["full"]["bars"]) == [1.0, 1.0, 1.006]
