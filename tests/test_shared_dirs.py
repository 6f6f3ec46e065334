"""A cache directory that others can write to: planted links, other users' files, dead writers,
full disks. Every test uses real files and processes; another owner is a real user (``useradd``)
or, as root, a file handed to another uid (``os.chown``)."""

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import python

from triton_dist_plugin import frozen
from triton_dist_plugin.cli import commands as cli
from triton_dist_plugin.store import cache, filestore

OTHER_UID = 12345
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to another uid")


@pytest.fixture
def root() -> Path:
    """The configured cache root (``TRITON_DIST_AUTOTUNE_DIR``, set per test by conftest)."""
    path = cache.cache_root()
    path.mkdir(parents=True)
    return path


@pytest.fixture
def victim(tmp_path) -> Path:
    """A private file of the user's that a planted link points at."""
    path = tmp_path / "private" / "secrets.json"
    path.parent.mkdir(mode=0o700)
    path.write_text('{"ssh": "key"}')
    return path


#: a function-level record as the tuner hands it to ``FunctionCache.store`` (one candidate, the pick)
VALID = {"pick": 0, "pick_config": "{'a': 1}", "method": "wall", "bench_time_s": 0.1, "retained": [0],
         "candidates": [{"index": 0, "config": "{'a': 1}", "ms": 1.0, "timing": [1.0, 1.0, 1.0], "failure": None,
                         "measured": True}]}


def untouched(path: Path, text: str = '{"ssh": "key"}') -> bool:
    return path.read_text() == text and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def lines_of(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- 1. never a link below the root -----------------------------------------------------------

def test_a_planted_entry_link_reads_as_absent_with_a_warning(root, victim):
    entry = root / "fn" / "d.json"
    entry.parent.mkdir()
    entry.symlink_to(victim)
    with pytest.warns(RuntimeWarning, match=rf"{entry}.*symbolic link.*re-tuned"):
        assert filestore.read_json(entry, root) is None
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert filestore.read_json(entry) is None  # no root: the file itself is still checked


def test_a_planted_directory_link_is_neither_written_through_nor_read(root, victim):
    (root / "kernels").mkdir()
    (root / "kernels" / "k").symlink_to(victim.parent)
    entry = root / "kernels" / "k" / "d.json"
    with pytest.raises(OSError, match=r"kernels/k is a symbolic link"):
        filestore.write_json_atomic(entry, {"pick": 0}, root=root)
    assert untouched(victim)  # no entry, temporary or lock file in the victim's directory
    (victim.parent / "d.json").write_text('{"pick": 1}')
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert filestore.read_json(entry, root) is None
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert filestore.scan(entry.parent, root) == []


def test_a_function_cache_whose_directory_is_a_planted_link_keeps_nothing_there(victim):
    store = cache.FunctionCache("fn", "source", {"device": "cpu"})
    store.dir.parent.mkdir(parents=True)
    store.dir.symlink_to(victim.parent)
    with pytest.raises(OSError, match="symbolic link"):
        store.store((1,), VALID)
    store.log((1,), "tuned\n")
    assert untouched(victim)


@pytest.mark.parametrize("plant", ["symlink", "hardlink"])
def test_the_log_beside_an_entry_is_never_appended_through_a_plant(root, victim, plant):
    store = cache.FunctionCache("fn", "source", {"device": "cpu"})
    store.dir.mkdir()
    log = store.path((1,)).with_suffix(".log")
    log.symlink_to(victim) if plant == "symlink" else os.link(victim, log)
    store.log((1,), "tuned\n")
    assert victim.read_text() == '{"ssh": "key"}'


def test_a_planted_misses_log_link_is_refused_with_a_warning(root, victim):
    (root / frozen.MISSES).symlink_to(victim)
    with pytest.warns(RuntimeWarning, match="cannot record the miss.*symbolic link"):
        frozen.record_miss("k", (1,), "strict")
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert frozen.misses() == []
    assert untouched(victim)


def test_the_root_may_be_a_link_the_user_made(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "link"))
    root = cache.cache_root()
    filestore.write_json_atomic(root / "kernels" / "k" / "d.json", {"pick": 0}, root=root)
    assert filestore.read_json(root / "kernels" / "k" / "d.json", root) == {"pick": 0}
    frozen.record_miss("k", (1,), "strict")
    assert [m["key"] for m in frozen.misses()] == ["(1,)"]
    assert (real / "kernels" / "k" / "d.json").is_file()


def test_scan_lists_plain_json_files_and_never_a_link(root, victim):
    folder = root / "fn"
    filestore.write_json_atomic(folder / "b.json", {}, root=root)
    filestore.write_json_atomic(folder / "a.json", {}, root=root)
    (folder / "c.json").symlink_to(victim)
    (folder / "d.json").mkdir()
    (folder / "notes.txt").write_text("")
    assert filestore.scan(folder, root) == [folder / "a.json", folder / "b.json"]
    assert filestore.scan(root / "absent", root) == []


@pytest.mark.timeout(60)
def test_a_planted_fifo_is_refused_without_hanging(root):
    entry = root / "fn" / "d.json"
    entry.parent.mkdir()
    os.mkfifo(entry)
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert filestore.read_json(entry, root) is None
    with pytest.raises(OSError, match="not a regular file"):
        filestore.write_json_atomic(entry, {}, root=root)


# -- 2. another user's files and directories ---------------------------------------------------

@as_root
def test_another_users_entry_is_ignored_unless_the_cache_is_shared(root, monkeypatch):
    entry = root / "fn" / "d.json"
    filestore.write_json_atomic(entry, {"pick": 0}, root=root)
    os.chown(entry, OTHER_UID, OTHER_UID)  # as root, too: root is not exempt
    with pytest.warns(RuntimeWarning, match=rf"{entry} belongs to uid {OTHER_UID}.*TRITON_DIST_AUTOTUNE_SHARED"):
        assert filestore.read_json(entry, root) is None
    with pytest.raises(OSError, match=f"belongs to uid {OTHER_UID}"):
        filestore.write_json_atomic(entry, {"pick": 1}, root=root)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SHARED", "1")
    assert filestore.read_json(entry, root) == {"pick": 0}
    filestore.write_json_atomic(entry, {"pick": 1}, root=root)
    assert filestore.read_json(entry, root) == {"pick": 1}


@as_root
def test_another_users_directory_is_not_written_into_unless_shared(root, monkeypatch):
    folder = root / "kernels" / "k"
    folder.mkdir(parents=True)
    os.chown(folder, OTHER_UID, OTHER_UID)
    with pytest.raises(OSError, match=f"kernels/k belongs to uid {OTHER_UID}"):
        filestore.write_json_atomic(folder / "d.json", {"pick": 0}, root=root)
    assert list(folder.iterdir()) == []
    with pytest.raises(OSError, match=f"belongs to uid {OTHER_UID}"):
        filestore.append_line(folder / "x.log", "line", root=root)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SHARED", "1")
    filestore.write_json_atomic(folder / "d.json", {"pick": 0}, root=root)
    assert filestore.read_json(folder / "d.json", root) == {"pick": 0}


def test_a_shared_cache_still_never_follows_a_link(root, victim, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SHARED", "1")
    (root / "fn").symlink_to(victim.parent)
    with pytest.raises(OSError, match="symbolic link"):
        filestore.write_json_atomic(root / "fn" / "d.json", {}, root=root)
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert filestore.read_json(root / "fn" / "secrets.json", root) is None
    assert untouched(victim)


@pytest.fixture(scope="module")
def planter():
    """A real second user on this machine (created for these tests, removed after)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create a second user")
    name, made = "tdp-planter", False
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        made = True
    yield pwd.getpwnam(name)
    if made:
        subprocess.run(["userdel", name], capture_output=True)


def test_a_second_users_plants_in_a_world_writable_cache_are_refused(planter, monkeypatch, tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="tdp-world-"))  # reachable by the other user, unlike tmp_path
    try:
        shared.chmod(0o777)
        victim = tmp_path / "private"
        victim.mkdir(mode=0o700)
        plant = 'mkdir "$1/kernels" "$1/fn" && ln -s "$2" "$1/kernels/k" && echo \'{"pick": 7}\' > "$1/fn/d.json"'
        subprocess.run(["/bin/sh", "-c", plant, "sh", str(shared), str(victim)], check=True,
                       user=planter.pw_uid, group=planter.pw_gid, extra_groups=[], cwd="/")
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(shared))
        with pytest.raises(OSError, match=f"belongs to uid {planter.pw_uid}|symbolic link"):
            filestore.write_json_atomic(shared / "kernels" / "k" / "d.json", {"pick": 0}, root=shared)
        with pytest.warns(RuntimeWarning, match=f"fn belongs to uid {planter.pw_uid}"):
            assert filestore.read_json(shared / "fn" / "d.json", shared) is None
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_SHARED", "1")  # a team's cache: their files, never a link
        assert filestore.read_json(shared / "fn" / "d.json", shared) == {"pick": 7}
        with pytest.raises(OSError, match="kernels/k is a symbolic link"):
            filestore.write_json_atomic(shared / "kernels" / "k" / "d.json", {"pick": 0}, root=shared)
        assert list(victim.iterdir()) == []
    finally:
        shutil.rmtree(shared)


# -- 3. the umask ------------------------------------------------------------------------------

@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o002, 0o664, 0o775), (0o077, 0o600, 0o700)])
def test_files_and_directories_get_the_umask_mode(tmp_path, umask, file_mode, dir_mode):
    root = tmp_path / "team"
    entry = root / "kernels" / "k" / "d.json"
    old = os.umask(umask)
    try:
        filestore.write_json_atomic(entry, {"pick": 0}, root=root)
        filestore.append_line(root / "misses.jsonl", "{}", root=root)
    finally:
        os.umask(old)
    for path in (entry, Path(f"{entry}.lock"), root / "misses.jsonl"):
        assert path.stat().st_mode & 0o777 == file_mode, path
    for path in (root, root / "kernels", entry.parent):
        assert path.stat().st_mode & 0o777 == dir_mode, path


# -- 4. temporaries of dead writers ------------------------------------------------------------

STALLED_WRITER = """
import os, sys, time
from pathlib import Path
from triton_dist_plugin.store import filestore

def stall(fd):  # the writer is killed after writing its temporary, before the rename
    print("written", flush=True)
    time.sleep(600)

os.fsync = stall
filestore.write_json_atomic(Path(sys.argv[1]), {"version": 2, "pad": "x" * 100000}, root=Path(sys.argv[2]))
"""


@contextlib.contextmanager
def stalled_writer(entry: Path, root: Path):
    """A real writer of ``entry`` (over an older version), stopped after writing its temporary
    and before the rename, holding the entry's lock; killed when the block ends."""
    filestore.write_json_atomic(entry, {"version": 1}, root=root)
    child = subprocess.Popen([sys.executable, "-c", STALLED_WRITER, str(entry), str(root)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "written\n"
        yield child
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_a_writer_killed_mid_write_leaves_the_old_entry_and_its_temporary_is_removed(root):
    entry = root / "fn" / "d.json"
    with stalled_writer(entry, root) as child:
        pass
    partial = entry.parent / ".partial"  # where writers keep their temporaries
    left = [p.name for p in partial.iterdir() if p.name.endswith(".tmp")]
    assert left and all(f"-{child.pid}." in name for name in left)  # the writer is named
    assert filestore.read_json(entry, root) == {"version": 1}  # never half a file
    for name in left:  # a minute later (sooner, a writer of another PID namespace may look dead)
        os.utime(partial / name, (time.time() - 120,) * 2)
    filestore.write_json_atomic(entry.parent / "other.json", {}, root=root)  # any write there sweeps
    assert not [p for p in partial.iterdir() if p.name.endswith(".tmp")]
    assert not [p for p in entry.parent.iterdir() if p.name.endswith(".tmp")]


def test_only_this_users_stale_temporaries_are_removed(root):
    folder = root / "fn" / ".partial"
    folder.mkdir(parents=True)
    old = folder / ".a.json.k2j4h_1x.tmp"  # an older release's tempfile.mkstemp name
    live = folder / f".b.json.{socket.gethostname()}-{os.getpid()}.00ff.tmp"  # this process, busy
    for path in (old, live):
        path.write_text("{")
    os.utime(old, (time.time() - 3600,) * 2)
    foreign = folder / ".c.json.elsewhere-1.00ff.tmp"
    foreign.write_text("{")
    os.utime(foreign, (time.time() - 3600,) * 2)
    if os.geteuid() == 0:
        os.chown(foreign, OTHER_UID, OTHER_UID)
    filestore.write_json_atomic(folder.parent / "d.json", {}, root=root)
    assert not old.exists() and live.exists()
    assert foreign.exists() == (os.geteuid() == 0)


def test_clear_all_removes_dead_writers_temporaries_and_free_lock_files(root, victim, capsys):
    from triton_dist_plugin.store import safe_files

    frozen.record_miss("k", (1,), "strict")
    filestore.write_json_atomic(root / "kernels" / "k" / "d.json", {"not": "an entry"}, root=root)
    (root / "kernels" / "k" / ".partial" / f".d.json.{safe_files._HOST}-999999999.00ff.tmp").write_text("{")  # died
    (root / "fn").mkdir()
    old = root / "fn" / ".e.json.host-2.00ff.tmp"  # another host's, long stale
    old.write_text("{")
    os.utime(old, (time.time() - 3600,) * 2)
    elsewhere = root / "fn" / ".f.json.host-3.00ff.tmp"  # another host's, just written: it may be busy
    elsewhere.write_text("{")
    (root / "fn" / "e.json.lock").symlink_to(victim)
    (root / "fn" / "notes.txt").write_text("mine")
    assert cli.main(["clear", "--all"]) == 0
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())
    assert left == ["fn/.f.json.host-3.00ff.tmp", "fn/notes.txt", "kernels/k/d.json", frozen.MISSES]
    assert untouched(victim)
    assert "skipping" in capsys.readouterr().err  # d.json is no entry: named, and left alone


# -- 5. appends that cannot tear ---------------------------------------------------------------

def test_a_torn_line_left_by_an_older_writer_is_never_glued_onto(root):
    misses = root / frozen.MISSES
    misses.write_text('{"kernel": "k", "key": "(0,)", "why": "strict"}\n{"kernel": "k", "ke')
    frozen.record_miss("k", (1,), "strict")
    assert [m["key"] for m in frozen.misses()] == ["(0,)", "(1,)"]
    store = cache.FunctionCache("fn", "source", {"device": "cpu"})
    store.dir.mkdir()
    log = store.path((1,)).with_suffix(".log")
    log.write_text("[then] fn key=(1,)\n  pick: candi")
    store.log((1,), "[now] fn key=(1,)\n  pick: candidate 0\n")
    assert log.read_text().endswith("candi\n[now] fn key=(1,)\n  pick: candidate 0\n")


def test_a_log_alone_creates_no_cache_directory(root):
    store = cache.FunctionCache("fn", "source", {"device": "cpu"})
    store.log((1,), "tuned\n")
    assert not store.dir.exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs: a real full disk."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        for size in (4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def test_a_full_disk_leaves_no_torn_line(small_disk, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(small_disk))
    frozen.record_miss("k", (1,), "first")
    before = (small_disk / frozen.MISSES).read_bytes()
    fill(small_disk / "filler")
    with pytest.warns(RuntimeWarning, match="cannot record the miss"):
        frozen.record_miss("k", ("x" * 20000,), "second")
    assert (small_disk / frozen.MISSES).read_bytes() == before
    (small_disk / "filler").unlink()
    frozen.record_miss("k", (3,), "third")
    assert [m["why"] for m in lines_of(small_disk / frozen.MISSES)] == ["first", "third"]


SIZE_LIMITED_WRITER = """
import os, resource, sys, warnings
from triton_dist_plugin import frozen
size = os.path.getsize(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 50, resource.RLIM_INFINITY))  # the disk is "full"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    frozen.record_miss("k", ("x" * 5000,), "second")
print(len(caught))
"""


def test_a_file_size_limit_leaves_no_torn_line(root):
    frozen.record_miss("k", (1,), "first")
    misses = root / frozen.MISSES
    before = misses.read_bytes()
    done = python("-c", SIZE_LIMITED_WRITER, misses, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.strip() == "1"  # warned
    assert misses.read_bytes() == before
    frozen.record_miss("k", (3,), "third")
    assert [m["why"] for m in lines_of(misses)] == ["first", "third"]


# -- 6. lock files -----------------------------------------------------------------------------

def test_a_planted_lock_file_link_leaves_the_victim_untouched(root, victim):
    entry = root / "fn" / "d.json"
    entry.parent.mkdir()
    Path(f"{entry}.lock").symlink_to(victim)
    (root / f"{frozen.MISSES}.lock").symlink_to(victim)
    stamp = victim.stat().st_mtime_ns
    with pytest.raises(OSError, match=r"d\.json\.lock is a symbolic link"):
        filestore.write_json_atomic(entry, {"pick": 0}, root=root)
    with pytest.warns(RuntimeWarning, match="cannot record the miss"):
        frozen.record_miss("k", (1,), "strict")
    assert untouched(victim) and victim.stat().st_mtime_ns == stamp
    assert not entry.exists()


def test_clear_all_never_removes_a_live_writers_temporary_or_lock(root):
    """A real writer, stopped after writing its temporary and before the rename, holds the
    entry's lock: ``clear --all`` leaves its temporary and its lock file; once it is dead, the
    next ``clear --all`` removes both."""
    entry = root / "fn" / "d.json"
    with stalled_writer(entry, root):
        temporaries = [p for p in (entry.parent / ".partial").iterdir() if p.name.endswith(".tmp")]
        assert len(temporaries) == 1
        assert cli.main(["clear", "--all"]) == 0
        assert temporaries[0].exists() and Path(f"{entry}.lock").exists()  # the writer's, busy
    assert cli.main(["clear", "--all"]) == 0
    assert not temporaries[0].exists() and not Path(f"{entry}.lock").exists()


@pytest.mark.parametrize("place", ["the directory", "a folder above it"])
def test_a_cache_directory_that_is_a_dangling_link_says_so_once(tmp_path, monkeypatch, place):
    """``TRITON_DIST_AUTOTUNE_DIR`` a link to nowhere: one warning that says so, for every key of
    a function and a kernel, their misses in frozen mode included; the picks are kept in memory."""
    import warnings

    import torch
    import triton

    from kernels import KERNELS
    from triton_dist_plugin.tune import autotune

    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv(cache.ROOT_ENV, str(link if place == "the directory" else link / "autotune"))
    add = KERNELS["add"]
    kernel = triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit)

    @autotune(config_space=[{"f": 1}, {"f": 2}], key_fn=lambda x: x.numel())
    def scaled(x, f):
        return x * f

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (300, 500):
            x = torch.randn(n)
            torch.testing.assert_close(scaled(x), scaled(x))
            torch.testing.assert_close(add.launch(kernel, x, x), 2 * x)
        monkeypatch.setenv(frozen.FROZEN_ENV, "nearest")
        add.launch(triton.autotune(configs=add.configs("cpu"), key=add.key)(add.jit), *add.make_inputs("tiny", "cpu"))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                and "never tuned" not in str(w.message)]
    assert len(messages) == 1, messages
    assert f"{link} is a symbolic link to {str(tmp_path / 'nowhere')!r}, which does not exist" in messages[0]
    assert len(kernel.cache) == 2 and not (tmp_path / "nowhere").exists()
