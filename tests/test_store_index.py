"""The index of a kernel's stored keys: a new key finds its nearest tuned key (a warm start,
frozen mode's nearest key) reading a few entries, not every one, in a fresh process and again
within one; a directory changed behind the index's back is re-indexed once; a damaged or planted
index is never trusted blindly; an entry too large is refused unread. Real kernels under the
interpreter, real files, real processes (what a process read is its own ``/proc/self/io``)."""

import json
import os
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import triton
from helpers import DEVICE, run_python

from kernels import KERNELS
from triton_dist_plugin import frozen
from triton_dist_plugin.patched import tuning
from triton_dist_plugin.store import describe, filestore, index, persist, records

ADD = KERNELS["add"]
PAD = ["x" * 1000] * 100  # 100 kB of notes: an entry a full scan would have to read


def launch(n: int, kernel=None):
    kernel = kernel or triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    x = torch.randn(n, device=DEVICE)
    torch.testing.assert_close(ADD.launch(kernel, x, x), 2 * x)
    return kernel


def folder_of(tmp_path: Path) -> Path:
    return tmp_path / "tdp-cache" / persist.DIRECTORY / "add_kernel"


def plant(folder: Path, record: dict, n: int, **extra) -> Path:
    """``record`` (the plugin's own) copied for key ``n``, at its own place, behind the index's back."""
    key = record["key"].replace(record["key"].split(",")[0][1:], str(n), 1)
    stored = {**record, "key": key, **extra}
    path = folder / f"{describe.entry_digest(record['source'], record['hardware'], key, record['context'])}.json"
    path.write_text(json.dumps(stored))
    return path


def store_like(record: dict) -> persist.KernelStore:
    """A ``KernelStore`` of the add kernel keyed as ``record`` is (its source, hardware, setting)."""
    store = persist.KernelStore("add_kernel", ADD.jit, DEVICE, 1, ADD.configs(DEVICE), record["method"])
    store.source, store.hw, store.context = record["source"], record["hardware"], record["context"]
    return store


def key_of(record: dict, n: int) -> tuple:
    import ast

    return (n, *ast.literal_eval(record["key"])[1:])


@pytest.fixture
def seeded(tmp_path):
    """The add kernel tuned for n=1000 by the plugin: its entry's record."""
    launch(1000)
    (path,) = folder_of(tmp_path).glob("*.json")
    return json.loads(path.read_text())


READER = textwrap.dedent("""
    import json, os, sys, warnings
    import torch, triton
    import triton_dist_plugin  # noqa: F401
    from kernels import KERNELS

    def read_so_far():
        return int(next(l for l in open("/proc/self/io") if l.startswith("rchar:")).split()[1])

    add = KERNELS["add"]
    out = []
    for n in (int(a) for a in sys.argv[1:]):
        kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)
        x = torch.randn(n)
        before = read_so_far()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(add.launch(kernel, x, x), x + x)
        out.append({"read": read_so_far() - before, "pick": str(kernel.best_config),
                    "warned": [str(w.message) for w in caught]})
    print(json.dumps(out))
""")


def read_by_launches(tmp_path: Path, *ns: int, **env) -> list:
    code = f"import sys; sys.argv = ['x', *{[str(n) for n in ns]!r}]\n" + READER
    result = run_python(code, env={"TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "tdp-cache"),
                                   "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("frozen", [None, "nearest"])
def test_a_new_key_reads_a_few_entries_not_every_one(tmp_path, seeded, frozen):
    """400 entries of 100 kB each (a full scan reads 40 MB), copied in behind the index's back:
    each new key's lookup indexes some of them (for at most ``index.CATCH_UP_S``, and at least a
    few), each entry read once in all; once the index has caught up, a later process's first new
    key, and its second, read the index and at most a few entries."""
    folder = folder_of(tmp_path)
    for n in range(2000, 2800, 2):
        plant(folder, seeded, n, notes=PAD)
    env = {"TRITON_DIST_AUTOTUNE_FROZEN": frozen} if frozen else {}
    catching_up = read_by_launches(tmp_path, *range(2001, 2001 + 2 * 400 // index._STEP, 2), **env)
    assert (folder / index.FOLDER / "stamp").exists()  # caught up within that many lookups
    assert sum(run["read"] for run in catching_up) < 1.2 * 400 * 100_000  # each entry read once, in all
    assert catching_up[0]["read"] < 400 * 100_000  # the first lookup did not read them all
    runs = read_by_launches(tmp_path, 2101, 2203, **env)
    assert all(run["read"] < 5_000_000 for run in runs), [run["read"] for run in runs]
    if frozen:  # the nearest stored key's pick, or where the keys around it agree on another, theirs
        # (which of the two depends on the seed's timings, measured under the interpreter: noisy)
        said = " ".join(runs[0]["warned"])
        assert "nearest tuned key (210" in said or "the tuned keys around it favour" in said, runs


def test_a_directory_changed_behind_the_index_is_reindexed_once(tmp_path, seeded, monkeypatch):
    folder = folder_of(tmp_path)
    store = store_like(seeded)
    assert store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))[0][0] == 1000
    copied = plant(folder, seeded, 2000)  # copied in by hand: the directory's mtime moves on
    junk = plant(folder, seeded, 3000, pick_config="no such candidate")  # not a valid record: read once
    assert store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))[0][0] == 2000
    unusable = (folder / index.FOLDER / "unusable").read_text().split()
    assert unusable == [junk.name]
    reads = []
    original = records.parse
    monkeypatch.setattr(records, "parse", lambda raw: reads.append(1) or original(raw))
    for n in (2100, 2500, 900):  # the stamp matches now: no entry is read again but the nearest
        store.nearest_pick(key_of(seeded, n), ADD.configs(DEVICE))
    assert len(reads) == 3, reads
    monkeypatch.undo()
    copied.unlink()  # removed: its row goes too
    near = store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))
    assert near[0][0] == 1000
    rows = {name for _, name in index.nearest(folder, tmp_path / "tdp-cache", store_ident(store, seeded),
                                              (7.0,), None)}
    assert len(rows) == 1  # only the 1000's entry is left in the index


def store_ident(store: persist.KernelStore, record: dict) -> str:
    from triton_dist_plugin.store import keys

    return index.identity(store.name, store.source, store.hw, store.context, keys.signature(key_of(record, 1)))


def _rows(folder: Path) -> Path:
    (table,) = (folder / index.FOLDER).glob("*.idx")
    return table


@pytest.mark.parametrize("damage", ["torn tail", "nan numbers", "rows naming each other's entries", "bad header",
                                    "random bytes", "empty", "a stamp of nonsense"])
def test_a_damaged_index_is_never_trusted_blindly(tmp_path, seeded, damage):
    """Whatever the index holds, the nearest key is one whose entry passes every check, as far
    as the index claimed; the warm start and frozen mode's nearest key never raise."""
    folder = folder_of(tmp_path)
    for n in (2000, 8000):
        plant(folder, seeded, n)
    store = store_like(seeded)
    assert store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))[0][0] == 2000  # indexed now
    table = _rows(folder)
    raw = table.read_bytes()
    size = (len(raw) - 16) // 3
    if damage == "torn tail":
        table.write_bytes(raw + b"\x01" * (size - 3))
    elif damage == "nan numbers":
        table.write_bytes(raw[:16] + b"".join(b"\xff" * 8 + raw[16 + i * size + 8: 16 + (i + 1) * size]
                                              for i in range(3)))
    elif damage == "rows naming each other's entries":  # the 2000's row names the 8000's entry, and back
        rows = [raw[16 + i * size: 16 + (i + 1) * size] for i in range(3)]
        n = {json.loads((folder / (r[-16:].hex() + ".json")).read_text())["key"][:5]: i for i, r in enumerate(rows)}
        a, b = n["(2000"], n["(8000"]
        rows[a], rows[b] = rows[a][:-16] + rows[b][-16:], rows[b][:-16] + rows[a][-16:]
        table.write_bytes(raw[:16] + b"".join(rows))
    elif damage == "bad header":
        table.write_bytes(b"NOTMAGIC" + raw[8:])
    elif damage == "random bytes":
        table.write_bytes(os.urandom(len(raw)))
    elif damage == "empty":
        table.write_bytes(b"")
    else:
        (folder / index.FOLDER / "stamp").write_bytes(os.urandom(16))
    index._memo.clear()  # as a fresh process sees it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: a damaged index is the plugin's to mend
        near = store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))
        ranked = store.nearest_ranking(key_of(seeded, 2100))
    for found in (near, ranked):
        assert found is None or found[0][0] in (1000, 2000, 8000)
    if damage == "rows naming each other's entries":  # neither is as near as its row claims: the next one
        assert near[0][0] == 1000 and ranked[0][0] == 1000
    if damage in ("torn tail", "bad header", "empty", "a stamp of nonsense"):  # mended: the nearest again
        assert near[0][0] == 2000 and ranked[0][0] == 2000
    prior, near_key, _ = tuning.warm_start(type("S", (), {"name": "add_kernel", "rankings": {}}), store,
                                           key_of(seeded, 2100), ADD.configs(DEVICE), None)
    assert near_key is None or near_key[0] in (1000, 2000, 8000)


def test_a_planted_index_link_is_never_followed(tmp_path, seeded):
    victim = tmp_path / "victim"
    victim.mkdir()
    folder = folder_of(tmp_path)
    for child in (folder / index.FOLDER).iterdir():
        child.unlink()
    (folder / index.FOLDER).rmdir()
    (folder / index.FOLDER).symlink_to(victim)
    plant(folder, seeded, 2000)
    store = store_like(seeded)
    with pytest.warns(RuntimeWarning, match=r"cannot keep the index .*symbolic link"):
        assert store.nearest_pick(key_of(seeded, 2100), ADD.configs(DEVICE))[0][0] == 2000  # built in memory
    launch(2200)  # a write: the entry is kept, the index is not written through the link
    assert list(victim.iterdir()) == []
    assert len(list(folder.glob("*.json"))) == 3


def test_an_entry_too_large_is_refused_unread(tmp_path, seeded):
    """A 200 MB entry (here 40 MB, past the limit) at a key's own place is refused with a warning
    naming its size, and re-tuned; beside the others, it is never read whole."""
    (own,) = folder_of(tmp_path).glob("*.json")
    with open(own, "r+b") as f:
        f.truncate(filestore.ENTRY_LIMIT + (8 << 20))  # sparse: no disk used
    with pytest.warns(RuntimeWarning, match=rf"refusing {own}: .*holds {filestore.ENTRY_LIMIT + (8 << 20)} bytes"):
        launch(1000)
    assert records.valid(json.loads(own.read_text()), "kernel")  # re-tuned and replaced
    big = folder_of(tmp_path) / ("f" * 32 + ".json")
    with open(big, "wb") as f:
        f.truncate(filestore.ENTRY_LIMIT * 6)
    runs = read_by_launches(tmp_path, 1500, 1700)
    assert all(run["read"] < 10_000_000 for run in runs), [run["read"] for run in runs]


def test_frozen_nearest_takes_the_nearest_stored_pick_still_among_the_candidates(tmp_path, seeded, monkeypatch):
    """Valid entries whose picks are no longer candidates are passed over, however many and near."""
    folder = folder_of(tmp_path)
    gone = json.loads(json.dumps(seeded).replace(seeded["pick_config"], "BLOCK: 7, a config no longer listed"))
    assert records.valid(gone, "kernel")
    for n in range(1990, 2030, 2):
        plant(folder, gone, n)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    with pytest.warns(RuntimeWarning, match=r"nearest tuned key \(1000, "):
        launch(2001)


def test_a_catch_up_under_way_is_said_once_and_the_command_line_indexes_everything(tmp_path, seeded, monkeypatch):
    """Entries copied in behind the index's back, more than one lookup indexes: the first lookup
    says so once (naming the command that indexes them all), and ``triton-dist-tune index`` does."""
    from triton_dist_plugin.cli.commands import main

    folder = folder_of(tmp_path)
    for n in range(2000, 2200, 2):
        plant(folder, seeded, n)
    monkeypatch.setattr(index, "CATCH_UP_S", 0.0)  # every lookup indexes the fewest (index._STEP) it may
    store = store_like(seeded)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.nearest_pick(key_of(seeded, 2101), ADD.configs(DEVICE))
        store.nearest_pick(key_of(seeded, 2103), ADD.configs(DEVICE))
    told = [str(w.message) for w in caught if "its index lacks" in str(w.message)]
    assert len(told) == 1 and "triton-dist-tune index" in told[0], told
    assert not (folder / index.FOLDER / "stamp").exists()  # not caught up yet
    assert main(["index"]) == 0
    assert (folder / index.FOLDER / "stamp").exists()
    rows = {name for _, name in index.nearest(folder, tmp_path / "tdp-cache", store_ident(store, seeded), (7.0,),
                                              None)}
    assert len(rows) == 101  # the seed's and every one planted


def _frozen_launch(n: int, configs=None):
    """A fresh tuner of the add kernel launched in frozen mode: what it said, and its pick."""
    kernel = triton.autotune(configs=configs or ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(n, kernel)
    return " ".join(str(w.message) for w in caught if "never tuned" in str(w.message)), kernel


def test_frozen_nearest_takes_the_key_itself_tuned_under_other_candidates(tmp_path, seeded, monkeypatch):
    """A key tuned before a config was added is the nearest there is (distance 0): its pick."""
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    said, kernel = _frozen_launch(1000, ADD.configs(DEVICE) + [triton.Config({"BLOCK": 64}, num_warps=1)])
    assert "the nearest tuned key (1000," in said, said
    assert describe.describe(kernel.best_config) == seeded["pick_config"]


def test_frozen_nearest_never_chains_through_keys_it_did_not_tune(tmp_path, seeded, monkeypatch):
    """A key given a substitute is no tuned key: the next miss is measured against the tuned ones."""
    folder = folder_of(tmp_path)
    plant(folder, seeded, 100000)
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    kernel = triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)
    for n, nearest in ((20000, 100000), (9000, 1000)):  # 9000 is nearer 20000 (never tuned) than 1000
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launch(n, kernel)
        said = " ".join(str(w.message) for w in caught)
        assert f"the nearest tuned key ({nearest}," in said, said


def test_frozen_nearest_honours_the_version_check(tmp_path, seeded, monkeypatch):
    folder = folder_of(tmp_path)
    path = plant(folder, seeded, 3000, versions={**seeded["versions"], "torch": "0.0.1"})
    assert records.valid(json.loads(path.read_text()), "kernel")
    monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_VERSION_CHECK", "1")
    said, _ = _frozen_launch(3100)
    assert "the nearest tuned key (1000," in said, said  # not 3000's, made under other versions


def test_a_catch_up_converges_past_entries_it_cannot_read(tmp_path, seeded, monkeypatch):
    """Links named like entries (never followed) cannot be read: they are left to the next
    process, and the index still catches up with everything else."""
    folder = folder_of(tmp_path)
    for n in range(2000, 2200, 2):
        plant(folder, seeded, n)
    for i in range(40):
        (folder / f"{i:032x}.json").symlink_to(tmp_path / "elsewhere.json")
    monkeypatch.setattr(index, "CATCH_UP_S", 0.0)
    store = store_like(seeded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(3001, 3001 + 2 * 20, 2):  # (100 + 40) / index._STEP lookups, and one more listing
            store.nearest_pick(key_of(seeded, n), ADD.configs(DEVICE))
    assert (folder / index.FOLDER / "stamp").exists()


def test_the_index_command_reads_again_an_entry_found_cut_short(tmp_path, seeded, capsys):
    """An entry read while it was still being copied is unusable; once whole, ``triton-dist-tune
    index`` reads it again, and names each entry it still cannot index."""
    from triton_dist_plugin.cli.commands import main

    folder = folder_of(tmp_path)
    whole = plant(folder, seeded, 3000)
    text = whole.read_text()
    whole.write_text(text[: len(text) // 2])  # half copied
    store = store_like(seeded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert store.nearest_pick(key_of(seeded, 3100), ADD.configs(DEVICE))[0][0] == 1000
    broken = plant(folder, seeded, 5000)
    broken.write_text("{")
    whole.write_text(text)  # the copy finished
    assert main(["index"]) == 0
    out = capsys.readouterr()
    assert f"skipping {broken}" in out.err and "1 entry could not be indexed" in out.out
    index._memo.clear()
    assert store.nearest_pick(key_of(seeded, 3100), ADD.configs(DEVICE))[0][0] == 3000
