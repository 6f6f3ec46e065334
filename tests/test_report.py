"""``triton-dist-tune report``: the HTML page rendered in a real headless Chromium (Debian's
package, which ``.ci/run`` installs), checked for what it shows."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, ROOT

from kernels import KERNELS
from triton_dist_plugin.tune import autotune

SCRIPT = Path(sys.executable).parent / "triton-dist-tune"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("needs Chromium (Debian package chromium; .ci/run installs it)")
    profile = tmp_path / "profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A kernel tuned over 6 blocks (so a screening round drops some) and one that fails, and a
    function-level entry."""
    monkeypatch.setenv("HOME", str(tmp_path))
    add = KERNELS["add"]
    blocks = [16, 32, 64, 128, 256, 512]
    configs = [triton.Config({"BLOCK": b}) for b in blocks] + [triton.Config({"BLOCK": 96})]
    x, y = add.make_inputs("tiny", DEVICE)
    add.launch(triton.autotune(configs=configs, key=add.key)(add.jit), x, y)

    @autotune(config_space=[{"factor": 1}, {"factor": 2}], key_fn=lambda v: tuple(v.shape))
    def scaled(v, factor):
        return v * factor

    scaled(torch.ones(8))
    return tmp_path


def test_the_report_shows_every_candidate_the_pick_screening_and_failures(tuned, tmp_path):
    page = tmp_path / "report.html"
    made = subprocess.run([str(SCRIPT), "report", "-o", str(page)], env=os.environ.copy(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and "wrote a report of 2 entries" in made.stdout, made.stderr
    assert "http" not in page.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    shown = dom.stdout
    assert shown.count('<section class="entry"') == 2
    assert "kernel add_kernel" in shown and "function" in shown and "scaled" in shown
    kernel = shown[shown.index("kernel add_kernel"):shown.index("</section>", shown.index("kernel add_kernel"))]
    assert kernel.count('class="candidate pick"') == 1
    assert kernel.count('class="candidate measured"') == 1  # the other finalist
    assert kernel.count('class="candidate screened"') == 4 and "(screening round)" in kernel
    assert "BLOCK=96" in kernel and "power of 2" in kernel  # the failing candidate, with its reason
    assert "timing: wall" in kernel and "tuned in" in kernel
    shot = tmp_path / "report.png"
    drawn = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,900", page.as_uri())
    assert drawn.returncode == 0 and shot.stat().st_size > 10_000, drawn.stderr[-2000:]
