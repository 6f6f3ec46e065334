"""Pick tables a library ships (``store/tables.py``): a real distribution on the path declares its
table in the ``triton_dist_plugin.tables`` entry-point group, and a fresh process that launches the
kernel takes the table's pick without timing anything, with no setting and no code of its own; the
machine's own picks come first, a stale or damaged table is refused with one warning, and
``TRITON_DIST_AUTOTUNE_TABLES=0`` ignores it."""

import json
import os

import pytest
import torch
import triton
from helpers import DEVICE, python, run_cli

from kernels import KERNELS
from triton_dist_plugin import hookimpl

ADD = KERNELS["add"]

CHILD = r"""
import json, os, sys, warnings
import torch, triton
import triton_dist_plugin as tdp
from kernels import KERNELS

class Count:
    timed = 0
    @tdp.hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        Count.timed += 1
    @tdp.hookimpl
    def tdp_on_tuned(self, record):
        Count.record = record

tdp.register(Count())
add = KERNELS["add"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)
    x, y = add.make_inputs("tiny", "cpu")
    assert torch.equal(add.launch(kernel, x, y), x + y)
from triton_dist_plugin.reporting.report import format_record
said = format_record(Count.record).splitlines()[2]
print(json.dumps({"timed": Count.timed, "hit": Count.record.cache_hit, "pick": kernel.best_config.kwargs["BLOCK"],
                  "warnings": [str(w.message) for w in caught if "pick table" in str(w.message)],
                  "table": "from a pick table an installed library ships" in said}))
"""


class Prefer:
    """Makes one BLOCK the fastest, so a pick says which tuning made it."""

    def __init__(self, block):
        self.block = block

    @hookimpl(tryfirst=True)
    def tdp_time_candidate(self, request):
        request.call()
        return 1.0 if request.config.kwargs["BLOCK"] == self.block else 2.0


def _picks(plugins, monkeypatch, tmp_path, block) -> list:
    """The add kernel's picks, tuned here (in a cache of their own) to take ``block``, as
    ``export`` writes them."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / f"tuned-{block}"))
    timer = Prefer(block)
    plugins(timer)
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x, y = ADD.make_inputs("tiny", DEVICE)
    torch.testing.assert_close(ADD.launch(kernel, x, y), x + y)
    out = tmp_path / f"picks-{block}.json"
    assert run_cli("export", "--kernels", "-o", str(out)).returncode == 0
    from triton_dist_plugin import unregister

    unregister(timer)
    return json.loads(out.read_text())


def _library(tmp_path, items, init: str = "from pathlib import Path\nTABLE = Path(__file__).with_name('picks.json')\n",
             name: str = "mylib") -> str:
    """``mylib`` (or ``name``), installed on a path of its own: its package holds the table, its
    dist-info declares it (``init``: its ``__init__.py``)."""
    site = tmp_path / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(init)
    (site / name / "picks.json").write_text(json.dumps(items))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[triton_dist_plugin.tables]\n{name} = {name}:TABLE\n")
    return str(site)


def _child(tmp_path, site, own: str = "own", **env) -> dict:
    paths = os.pathsep.join([site, os.environ.get("PYTHONPATH", ""), str(os.path.dirname(os.path.dirname(__file__)))])
    done = python("-c", CHILD, env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": paths,
                                    "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / own), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def table(plugins, monkeypatch, tmp_path):
    items = _picks(plugins, monkeypatch, tmp_path, 256)
    assert [i["record"]["pick_config"] for i in items if "record" in i][0].startswith("Config(BLOCK=256")
    return items


def test_a_library_table_is_used_before_any_tuning_and_the_machines_own_pick_comes_first(table, plugins, monkeypatch,
                                                                                         tmp_path):
    site = _library(tmp_path, table)
    assert _child(tmp_path, site) == {"timed": 0, "hit": True, "pick": 256, "warnings": [], "table": True}
    assert _child(tmp_path, site, "strict", TRITON_DIST_AUTOTUNE_FROZEN="strict")["pick"] == 256  # frozen serves it
    ignored = _child(tmp_path, site, "off", TRITON_DIST_AUTOTUNE_TABLES="0")
    assert ignored["timed"] > 0 and not ignored["hit"] and ignored["warnings"] == [], ignored
    # A pick of this machine's own (imported here) is taken over the library's.
    own = tmp_path / "own-128.json"
    own.write_text(json.dumps(_picks(plugins, monkeypatch, tmp_path, 128)))
    assert run_cli("import", str(own), env={"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "mine")}).returncode == 0
    assert _child(tmp_path, site, "mine") == {"timed": 0, "hit": True, "pick": 128, "warnings": [], "table": False}


def test_a_stale_or_damaged_table_is_refused_with_one_warning(table, tmp_path):
    stale = json.loads(json.dumps(table))
    for item in stale:
        if "record" in item:
            item["record"]["hardware"]["machine"] = "another-machine"
    seen = _child(tmp_path, _library(tmp_path / "stale", stale), "a")
    # Tuned here, not taken from the table (whose pick the wall clock here may choose too).
    assert seen["timed"] > 0 and not seen["hit"] and not seen["table"], seen
    (warning,) = seen["warnings"]
    assert "mylib" in warning and "none of its 1 entries was made for this machine" in warning, warning
    damaged = json.loads(json.dumps(table))
    for item in damaged:
        if "record" in item:
            item["record"]["pick"] = 99  # no such candidate
    seen = _child(tmp_path, _library(tmp_path / "damaged", damaged), "b")
    assert seen["timed"] > 0 and not seen["hit"], seen
    (warning,) = seen["warnings"]
    assert "1 of 1 entries refused" in warning and "pick" in warning, warning


def test_a_library_that_launches_a_kernel_at_import_never_waits_and_a_bad_path_is_said(table, tmp_path):
    """The tables are read at the first lookup, by importing each library: one whose import
    launches a tuned kernel gets no table pick for that launch and is never kept waiting; a table
    named by a path that is not absolute is refused with one warning."""
    launching = ("from pathlib import Path\nimport torch, triton\nfrom kernels import KERNELS\n"
                 "add = KERNELS['add']\nkernel = triton.autotune(configs=add.configs('cpu'), key=add.key)(add.jit)\n"
                 "x = torch.ones(77)\nadd.launch(kernel, x, x)\nTABLE = Path(__file__).with_name('picks.json')\n")
    seen = _child(tmp_path, _library(tmp_path / "launching", table, launching), "a")
    assert seen["hit"] and seen["pick"] == 256 and seen["warnings"] == [], seen  # its table served the launch after
    relative = "TABLE = 'picks.json'\n"
    seen = _child(tmp_path, _library(tmp_path / "relative", table, relative), "b")
    assert not seen["hit"] and len(seen["warnings"]) == 1 and "not the absolute path" in seen["warnings"][0], seen


def test_the_tables_are_asked_after_every_store_even_one_registered_later_with_trylast(tmp_path):
    """A user's store registered after the built-ins, ``trylast`` (after this machine's files, say
    a team's Redis), is still asked before the shipped tables: a pick anyone tuned beats a table."""
    from triton_dist_plugin import bus, plugin_manager, register, unregister
    from triton_dist_plugin.hook_objects import CacheEntry

    asked = []

    class Store:
        def __init__(self, name):
            self.name = name

        @hookimpl(trylast=True)
        def tdp_cache_get(self, entry):
            asked.append(self.name)

    tables = plugin_manager().unregister(name=bus.TABLES)
    try:
        register(Store("tables"), name=bus.TABLES)  # a stand-in, in the built-in's place and order
        register(Store("team"), name="team-store")
        assert bus.cache_get(CacheEntry("kernel", "k", "0" * 16, tmp_path / "k.json")) is None
        assert asked == ["team", "tables"]
    finally:
        unregister(name="team-store")
        unregister(name=bus.TABLES)
        register(tables, name=bus.TABLES)


def test_a_table_for_a_device_this_process_has_not_used_is_passed_over_without_starting_its_driver(
        table, tmp_path, monkeypatch, recwarn):
    """An interpreter process on a GPU host, say: describing the GPU would start its driver and a
    context there, to check entries no key of this process can find. They are passed over, unsaid."""
    from triton_dist_plugin.store import describe, tables

    for item in table:
        if "record" in item:
            item["record"]["hardware"]["device"] = "cuda"
    path = tmp_path / "gpu-picks.json"
    path.write_text(json.dumps(table))
    described = []
    monkeypatch.setattr(describe, "hardware", lambda device, world: described.append(device))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # on a GPU host, this process used it above
    assert tables._read("gpu-lib", path) == {}
    assert described == [] and not [w for w in recwarn if "pick table" in str(w.message)]


def test_two_tables_that_pick_otherwise_for_one_key_use_the_first_by_name_and_say_so(table, tmp_path):
    """Two libraries ship the same kernel and key with different picks: the table named first is
    used, in whatever order the environment lists them, and the other is warned about once."""
    other = json.loads(json.dumps(table))
    for item in other:
        if "record" in item:
            record = item["record"]
            row = next(r for r, c in enumerate(record["candidates"]) if "BLOCK=128" in c["config"])
            record["pick"], record["pick_config"] = row, record["candidates"][row]["config"]
    ships = {"alib": table, "blib": other}  # alib picks BLOCK=256, blib 128
    for order in (("alib", "blib"), ("blib", "alib")):  # which one is on the path first
        paths = [_library(tmp_path / f"{order[0]}-first-{name}", ships[name], name=name) for name in order]
        seen = _child(tmp_path, os.pathsep.join(paths), f"own-{order[0]}")
        assert seen["timed"] == 0 and seen["hit"], seen
        assert seen["pick"] == 256, seen  # alib's, the first by name
        (warning,) = seen["warnings"]
        assert "blib" in warning and "1 of its entries pick otherwise" in warning, warning


def test_a_table_tuned_with_every_candidate_measured_is_served_to_a_program_at_the_defaults(plugins, monkeypatch,
                                                                                           tmp_path):
    """Authors tune tables harder than programs do (and ``cover`` wants every candidate measured):
    such a table still serves a program that sets nothing."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SEARCH", "exhaustive")
    items = _picks(plugins, monkeypatch, tmp_path, 256)
    monkeypatch.delenv("TRITON_DIST_AUTOTUNE_SEARCH")
    assert all(i["record"]["context"]["search"] == "exhaustive" for i in items if "record" in i)
    seen = _child(tmp_path, _library(tmp_path, items))
    assert seen == {"timed": 0, "hit": True, "pick": 256, "warnings": [], "table": True}, seen
