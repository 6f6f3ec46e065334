"""Every environment variable in one table: the docs match it, the code reads nothing else, and a
bad value fails with the variable's name before any tuning work starts."""

import re
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import DEVICE, Recorder

import triton_dist_plugin as tdp
from triton_dist_plugin import settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(tdp.__file__).resolve().parent  # the imported one: the checkout, or the installed wheel
OWN = [s for s in settings.SETTINGS if s.parse is not None and s.kind != "path"]


def test_the_docs_table_is_the_generated_one():
    text = (ROOT / "docs" / "settings.md").read_text()
    table = text.split("<!-- settings table: generated -->\n", 1)[1].split("<!-- end of settings table -->", 1)[0]
    assert table == settings.markdown(), "docs/settings.md is stale: python -m triton_dist_plugin.settings prints it"


def test_every_variable_the_package_reads_is_declared():
    declared = {s.name for s in settings.SETTINGS}
    read = set()
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        pattern = r"""(?:environ(?:\.get)?[\[(]|getenv\(|value\(|env_flag\()\s*["']([A-Z][A-Z0-9_]+)["']"""
        read |= set(re.findall(pattern, source))
        # Constants naming variables (FOO_ENV = "TRITON_...") are read through settings.value(FOO_ENV).
        read |= set(re.findall(r"""^[A-Z_]*ENV\s*=\s*["']([A-Z][A-Z0-9_]+)["']""", source, re.M))
    assert read, "the scan found nothing: the pattern is broken"
    assert read <= declared, f"read but not declared in settings.py: {sorted(read - declared)}"


@pytest.mark.parametrize("setting", OWN, ids=[s.name for s in OWN])
def test_a_bad_value_names_the_variable_and_what_it_accepts(setting, monkeypatch):
    monkeypatch.setenv(setting.name, "bogus")
    with pytest.raises(tdp.SettingError) as info:
        settings.validate()
    message = str(info.value)
    assert setting.name in message and setting.accepts in message


@pytest.mark.parametrize("setting", OWN, ids=[s.name for s in OWN])
def test_unset_means_the_default(setting, monkeypatch):
    monkeypatch.delenv(setting.name, raising=False)
    settings.value(setting.name)  # no error


@triton.jit
def _copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def test_a_bad_setting_stops_tuning_before_any_candidate_runs(monkeypatch, plugins):
    recorder = Recorder()
    plugins(recorder)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_TIMEOUT", "abc")
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(_copy)
    x, y = torch.randn(100, device=DEVICE), torch.zeros(100, device=DEVICE)
    with pytest.raises(tdp.SettingError, match="TRITON_DIST_AUTOTUNE_TIMEOUT='abc'.*seconds from 0.001 to 86400"):
        kernel[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, y, 100)
    assert recorder.timed == [] and not kernel.cache
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_TIMEOUT")
    kernel[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, y, 100)
    assert torch.equal(x, y)


SECONDS = [s.name for s in settings.SETTINGS if s.kind == "seconds"]


@pytest.mark.parametrize("name", SECONDS)
@pytest.mark.parametrize("raw", ["0.0004", "1e14", "0", "-5", "nan", "inf"])
def test_a_timeout_below_a_millisecond_or_above_a_day_is_refused_with_its_name(name, raw, monkeypatch):
    monkeypatch.setenv(name, raw)
    if raw == "0" and name == "TRITON_DIST_AUTOTUNE_ISOLATE_IDLE":  # its one word for "never"
        assert settings.value(name) == 0.0
        return
    with pytest.raises(tdp.SettingError, match=f"{name}='{raw}' is not valid.*from 0.001 to 86400"):
        settings.validate()


@pytest.mark.parametrize("name", SECONDS)
def test_timeouts_at_the_bounds_are_taken(name, monkeypatch):
    for raw, value in (("0.001", 0.001), ("86400", 86400.0)):
        monkeypatch.setenv(name, raw)
        assert settings.value(name) == value


@pytest.mark.parametrize("setting", settings.SETTINGS, ids=[s.name for s in settings.SETTINGS])
def test_no_error_message_carries_the_docs_markup(setting, monkeypatch):
    message = settings.error_message(setting, "bogus")
    assert "`" not in message and setting.name in message
    assert settings.plain(setting.default) in message and settings.plain(setting.accepts) in message
    if setting.parse is None:
        return  # owned elsewhere: never raised here
    monkeypatch.setenv(setting.name, "bogus")
    try:
        settings.validate()
    except tdp.SettingError as exc:  # what a user sees is the message above, in plain text
        assert str(exc) == message
    else:
        assert setting.kind == "path"  # any text is a path


def test_a_bad_method_reads_as_plain_text(monkeypatch):
    monkeypatch.setenv("TRITON_BENCH_METHOD", "fastest")
    with pytest.raises(tdp.SettingError) as info:
        settings.validate()
    assert str(info.value).endswith("Unset it for the default (event (wall under the interpreter)).")


def test_python_m_settings_prints_the_table_and_nothing_else():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-W", "error", "-m", "triton_dist_plugin.settings"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == settings.markdown()


def test_the_cache_directory_setting_says_where_the_kernel_picks_go():
    (setting,) = [s for s in settings.SETTINGS if s.name == "TRITON_DIST_AUTOTUNE_DIR"]
    assert "`<dir>/kernels/`" in setting.meaning and "misses" in setting.meaning
