"""What a user installs and sees before reading any code: the wheel and the sdist hold the whole
package, its metadata, ``help()``, and the command in both its forms.

Under ``tests/run-installed.sh`` (``TDP_TEST_INSTALLED=1``) the wheel and the sdist are the ones it built
and installed (``TDP_TEST_WHEEL``, ``TDP_TEST_SDIST``, and its build's output ``TDP_TEST_BUILD_LOG``),
compared with the copy of the checkout's files they were built from (``TDP_TEST_SOURCE``); otherwise (an
editable install) this file builds them from the checkout itself, in a temporary directory, and compares
them with the checkout."""

import importlib.metadata
import os
import pydoc
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT

import triton_dist_plugin

INSTALLED = os.environ.get("TDP_TEST_INSTALLED") == "1"
NAME = "triton_dist_plugin"
SETUPTOOLS_NEEDED = 77  # pyproject.toml's build-system requirement, for the build without isolation below


def _package_files(package: Path) -> set:
    """Every file of the package in a source tree, as ``triton_dist_plugin/...``: modules, subpackages'
    ``__init__.py`` and any other file, not bytecode."""
    return {p.relative_to(package.parent).as_posix() for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}


def _build(kind: str, source: Path, out: Path) -> tuple:
    """``setuptools.build_meta.build_<kind>`` run in ``source`` (what ``python -m build`` calls, without
    its isolated environment): the built file, and what the build printed."""
    code = f"from setuptools import build_meta; print('BUILT', build_meta.build_{kind}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    built = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("BUILT ")]
    return out / built[-1], done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel, sdist, the source tree's package directory, what the builds printed)."""
    if INSTALLED:
        names = ("TDP_TEST_WHEEL", "TDP_TEST_SDIST", "TDP_TEST_SOURCE", "TDP_TEST_BUILD_LOG")
        paths = [os.environ.get(v) for v in names]
        assert all(paths), f"TDP_TEST_INSTALLED=1 needs {', '.join(names)}"
        wheel, sdist, source, log = map(Path, paths)
        assert wheel.is_file() and sdist.is_file() and (source / NAME / "__init__.py").is_file(), paths
        return wheel, sdist, source / NAME, log.read_text()
    try:
        import setuptools
    except ImportError:
        pytest.skip(f"no setuptools in this venv to build the wheel with: pip install 'setuptools>={SETUPTOOLS_NEEDED}'"
                    " (or run tests/run-installed.sh, which builds with python -m build)")
    if int(setuptools.__version__.split(".")[0]) < SETUPTOOLS_NEEDED:
        pytest.skip(f"setuptools {setuptools.__version__} here, the build needs >={SETUPTOOLS_NEEDED}")
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "checkout"  # the checkout's top-level files and the package: no build files land in ROOT
    source.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    shutil.copytree(ROOT / NAME, source / NAME, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    sdist, sdist_log = _build("sdist", source, tmp / "dist")
    with tarfile.open(sdist) as archive:  # the wheel from the unpacked sdist, as python -m build makes it
        archive.extractall(tmp / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (unpacked,) = (tmp / "unpacked").iterdir()
    wheel, wheel_log = _build("wheel", unpacked, tmp / "dist")
    return wheel, sdist, ROOT / NAME, sdist_log + wheel_log


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(built):
    wheel, _, package, _ = built
    expected = _package_files(package)
    assert f"{NAME}/__init__.py" in expected and any(f.count("/") > 1 for f in expected), expected  # subpackages
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith(f"{NAME}/") and not n.endswith("/")}
    assert sorted(expected - shipped) == [], f"missing from {wheel.name}"
    assert sorted(shipped - expected) == [], f"in {wheel.name} but not in the source tree"
    assert {n.split("/")[0] for n in names} == {NAME, wheel.name.split("-py")[0] + ".dist-info"}, names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "triton-dist-tune = triton_dist_plugin.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_sdist_holds_every_file_of_the_package_the_readme_and_the_license(built):
    _, sdist, package, _ = built
    with tarfile.open(sdist) as archive:
        names = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile() and "/" in m.name}
    shipped = {n for n in names if n.startswith(f"{NAME}/")}
    expected = _package_files(package)
    assert sorted(expected - shipped) == [], f"missing from {sdist.name}"
    assert sorted(shipped - expected) == [], f"in {sdist.name} but not in the source tree"
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} <= names, sorted(names)


def test_setuptools_ships_every_subpackage_as_a_package_not_as_data(built):
    """A subpackage missing from the packages configuration still lands in the wheel when the manifest
    grafts its files, but as data, with a warning that such files will stop being installed."""
    *_, log = built
    assert "running sdist" in log and "running bdist_wheel" in log, log[-2000:]  # setuptools' own output
    assert "absent from the `packages` configuration" not in log, log[log.find("absent from the") - 300:][:1500]


def test_the_command_runs_as_python_m_and_as_the_installed_console_script(tmp_path):
    script = Path(sys.executable).parent / "triton-dist-tune"
    (entry,) = [e for e in importlib.metadata.distribution("triton-dist-plugin").entry_points
                if e.group == "console_scripts"]
    assert (entry.name, entry.value) == ("triton-dist-tune", "triton_dist_plugin.cli:main")
    assert script.is_file() and os.access(script, os.X_OK), script
    as_module = subprocess.run([sys.executable, "-m", "triton_dist_plugin.cli", "--help"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=120)
    as_script = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert as_module.returncode == 0 and as_module.stdout.startswith("usage: triton-dist-tune"), as_module.stderr
    assert as_script.returncode == 0 and as_script.stdout == as_module.stdout, as_script.stderr


@pytest.mark.skipif(not INSTALLED, reason="installed mode only (tests/run-installed.sh)")
def test_installed_mode_children_import_the_installed_wheel_or_fail(tmp_path):
    """What conftest.py checks for pytest's own process holds in the processes the tests start, and a
    copy of the package that a child would find first (on its path, in its working directory) is refused."""
    from helpers import run_python

    site = Path(sysconfig.get_path("purelib")).resolve()
    child = run_python("import triton_dist_plugin; print(triton_dist_plugin.__file__)")
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()).resolve() == Path(triton_dist_plugin.__file__).resolve()
    assert Path(child.stdout.strip()).resolve().is_relative_to(site), (child.stdout, site)
    planted = tmp_path / NAME
    planted.mkdir()
    (planted / "__init__.py").write_text("print('the planted copy')\n")
    for cwd, env in ((tmp_path, {}), (ROOT, {"PYTHONPATH": str(tmp_path)})):
        refused = subprocess.run([sys.executable, "-c", "import triton_dist_plugin"], cwd=cwd,
                                 env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "the planted copy" not in refused.stdout, refused.stdout
        assert f"TDP_TEST_INSTALLED=1: {NAME} would be imported from" in refused.stderr, refused.stderr
        assert str(planted.resolve() / "__init__.py") in refused.stderr.replace(str(tmp_path), str(tmp_path.resolve()))


def test_the_installed_distribution_names_its_authors_and_ships_its_license():
    meta = importlib.metadata.metadata("triton-dist-plugin")
    # License-Expression (PEP 639); an editable install made before pyproject.toml named it has License
    assert meta["Author"] and (meta["License-Expression"] or meta["License"]) == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_help_of_the_package_points_to_every_front_end_and_the_docs():
    text = pydoc.render_doc(triton_dist_plugin, renderer=pydoc.plaintext)
    head = text[: text.index("PACKAGE CONTENTS")]  # the part a reader meets first
    for pointer in ("tune.autotune", "contextual_autotune", "tuning_group", "configs=[]", "triton-dist-tune",
                    "triton_dist_plugin.settings", "docs/"):
        assert pointer in head, pointer
