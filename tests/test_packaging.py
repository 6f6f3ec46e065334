"""What a user sees of the distribution before reading any code: its metadata and ``help()``."""

import importlib.metadata
import pydoc
from pathlib import Path

import triton_dist_plugin

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_distribution_names_its_authors_and_ships_its_license():
    meta = importlib.metadata.metadata("triton-dist-plugin")
    assert meta["Author"] and meta["License"] == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_help_of_the_package_points_to_every_front_end_and_the_docs():
    text = pydoc.render_doc(triton_dist_plugin, renderer=pydoc.plaintext)
    head = text[: text.index("PACKAGE CONTENTS")]  # the part a reader meets first
    for pointer in ("tune.autotune", "contextual_autotune", "tuning_group", "configs=[]", "triton-dist-tune",
                    "triton_dist_plugin.settings", "docs/"):
        assert pointer in head, pointer
