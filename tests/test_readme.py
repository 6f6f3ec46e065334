"""The README's Python snippets run as written, in order, as one script file (on the CPU here,
under ``TRITON_INTERPRET=1``, as the README says; ``@triton.jit`` needs the source on disk)."""

import os
import re

import pytest
from helpers import ROOT, python


@pytest.mark.timeout(660)  # the script's own limit (600 s) decides
def test_the_readme_snippets_run_in_order(tmp_path):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 5
    script = tmp_path / "readme_snippets.py"
    script.write_text("\n".join(blocks) + "\nprint('readme ok')\n")
    result = python(script, cwd=tmp_path, env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("readme ok")
    assert "add_kernel (1000," in result.stdout  # the plugin's log line for the new key
