"""Cache stores (``tdp_cache_get``/``tdp_cache_put``): a user's store sees every persisted pick
and answers later lookups; Redis (hooks/tdp-redis-store) shares picks between processes that
share no disk. Real kernels under the interpreter, real processes, a real ``redis-server``.

The Redis tests install hooks/tdp-redis-store into the running interpreter (pip, without
dependencies) and load it through its entry point in each child process.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import triton
from helpers import DEVICE, ROOT, Recorder, install_example, python, run_python

import triton_dist_plugin as tdp
from kernels import KERNELS
from triton_dist_plugin import PluginError, hookimpl
from triton_dist_plugin.hook_objects import CacheEntry
from triton_dist_plugin.tune import autotune

ADD, SCALE = KERNELS["add"], KERNELS["scale"]
URL_ENV = "TDP_REDIS_URL"
TIMEOUT = 240


@pytest.fixture(autouse=True)
def _no_redis_here(monkeypatch):
    """The Redis store may be installed in this interpreter: it stays idle in-process."""
    monkeypatch.delenv(URL_ENV, raising=False)


class DictStore:
    """A store as a remote one keys it: ``(kind, name, digest)`` to the record's JSON text."""

    def __init__(self):
        self.data, self.entries, self.gets = {}, {}, []

    @hookimpl
    def tdp_cache_get(self, entry):
        self.gets.append(entry)
        text = self.data.get((entry.kind, entry.name, entry.digest))
        return None if text is None else json.loads(text)

    @hookimpl
    def tdp_cache_put(self, entry, record):
        self.data[(entry.kind, entry.name, entry.digest)] = json.dumps(record, default=str)
        self.entries[(entry.kind, entry.name, entry.digest)] = entry


class GarbageStore:
    @hookimpl
    def tdp_cache_get(self, entry):
        return "not a record"


class FullStore:
    @hookimpl
    def tdp_cache_put(self, entry, record):
        raise OSError(122, "Disk quota exceeded")


@pytest.fixture
def no_file_store():
    """The built-in file store unregistered for one test, registered again afterwards."""
    pm = tdp.plugin_manager()
    builtin = pm.get_plugin("tdp.store")
    tdp.unregister(name="tdp.store")
    yield
    pm.register(builtin, name="tdp.store")


def new_add_kernel():
    return triton.autotune(configs=ADD.configs(DEVICE), key=ADD.key)(ADD.jit)


def new_scale():
    @autotune(config_space=[{"BLOCK": 128}, {"BLOCK": 256}], key_fn=lambda x, alpha: (x.numel(), str(x.dtype)))
    def scale(x, alpha, BLOCK):
        return SCALE.launch(SCALE.jit, x, alpha, BLOCK=BLOCK)

    return scale


def test_a_user_store_keeps_kernel_picks_and_answers_a_new_tuner_with_the_file_gone(plugins):
    store, rec = DictStore(), Recorder()
    plugins(store, name="dict-store")
    plugins(rec)
    x, y = ADD.make_inputs("tiny", DEVICE)
    first = new_add_kernel()
    ADD.launch(first, x, y)
    timed = len(rec.timed)
    assert timed >= len(ADD.configs(DEVICE)) and not rec.records[-1].cache_hit
    ((ident, entry),) = store.entries.items()
    assert ident == ("kernel", "add_kernel", entry.digest) and entry.path.name == f"{entry.digest}.json"
    assert json.loads(entry.path.read_text()) == json.loads(store.data[ident])  # the file store kept it too
    entry.path.unlink()
    second = new_add_kernel()
    torch.testing.assert_close(ADD.launch(second, x, y), x + y)
    assert len(rec.timed) == timed and rec.records[-1].cache_hit  # answered by the user's store
    assert str(second.best_config) == str(first.best_config) and store.gets[-1] == entry


def test_a_user_store_keeps_function_picks_and_answers_a_new_tuner_with_the_file_gone(plugins):
    store, rec = DictStore(), Recorder()
    plugins(store)
    plugins(rec)
    x = torch.randn(1000, device=DEVICE)
    new_scale()(x, 2.0)
    records, timed = len(rec.records), len(rec.timed)
    assert records == 1 and timed >= 2
    ((ident, entry),) = store.entries.items()
    assert ident[0] == "function" and ident[1].endswith("new_scale.<locals>.scale")
    assert json.loads(store.data[ident])["pick_config"] in ("{'BLOCK': 128}", "{'BLOCK': 256}")
    entry.path.unlink()
    second = new_scale()
    torch.testing.assert_close(second(x, 2.0), 2.0 * x)
    assert len(rec.timed) == timed and second.best_configs  # nothing timed...
    assert len(rec.records) == records + 1 and rec.records[-1].cache_hit  # ...answered by the user's store


def test_without_the_file_store_picks_live_in_the_users_store_only(plugins, no_file_store, tmp_path):
    store, rec = DictStore(), Recorder()
    plugins(store)
    plugins(rec)
    x, y = ADD.make_inputs("tiny", DEVICE)
    ADD.launch(new_add_kernel(), x, y)
    new_scale()(x, 2.0)
    assert {kind for kind, _, _ in store.data} == {"kernel", "function"}
    assert not [p for p in (tmp_path / "tdp-cache").rglob("*") if p.is_file()]  # nothing on disk
    timed = len(rec.timed)
    ADD.launch(new_add_kernel(), x, y)
    new_scale()(x, 2.0)
    assert len(rec.timed) == timed and rec.records[-1].cache_hit


def test_a_store_answering_garbage_is_a_plugin_error_naming_it(plugins):
    plugins(GarbageStore(), name="garbage-store")
    x, y = ADD.make_inputs("tiny", DEVICE)
    expected = "plugin 'garbage-store' returned str from tdp_cache_get"
    with pytest.raises(PluginError, match=expected):
        ADD.launch(new_add_kernel(), x, y)
    with pytest.raises(PluginError, match=expected):
        new_scale()(x, 2.0)


def test_a_store_failing_to_put_warns_and_the_pick_is_kept(plugins, tmp_path):
    rec = Recorder()
    plugins(FullStore(), name="full-store")
    plugins(rec)
    x, y = ADD.make_inputs("tiny", DEVICE)
    kernel = new_add_kernel()
    with pytest.warns(RuntimeWarning, match=r"add_kernel: cannot write the autotune cache in the store 'full-store' "
                      r"\(full-store: .*Disk quota exceeded\); the pick for key .* is kept in memory and in "
                      + re.escape(str(tmp_path / "tdp-cache" / "kernels" / "add_kernel"))):
        torch.testing.assert_close(ADD.launch(kernel, x, y), x + y)
    timed = len(rec.timed)
    torch.testing.assert_close(ADD.launch(kernel, x, y), x + y)  # the pick in memory: nothing timed
    assert len(rec.timed) == timed and len(kernel.cache) == 1
    assert len(list((tmp_path / "tdp-cache" / "kernels").glob("*/*.json"))) == 1  # the other store still wrote
    scale = new_scale()
    with pytest.warns(RuntimeWarning, match=r"new_scale.<locals>.scale: cannot write the autotune cache in the "
                      r"store 'full-store'"):
        scale(x, 2.0)
    assert len(scale.best_configs) == 1 and "pick: candidate" in "".join(
        p.read_text() for p in (tmp_path / "tdp-cache").glob("scale/*.log"))  # the file store's .log too


def test_a_failing_store_alone_keeps_the_pick_in_memory_only(plugins, no_file_store):
    rec = Recorder()
    plugins(FullStore(), name="full-store")
    plugins(rec)
    x, y = ADD.make_inputs("tiny", DEVICE)
    kernel = new_add_kernel()
    with pytest.warns(RuntimeWarning, match=r"add_kernel: cannot write the autotune cache in the store 'full-store'.*"
                      "is kept in memory"):
        ADD.launch(kernel, x, y)
    timed = len(rec.timed)
    ADD.launch(kernel, x, y)
    assert len(rec.timed) == timed


# -------------------------------------------------------------------------------------------
# Redis: hooks/tdp-redis-store, loaded through its entry point in processes sharing no disk
# -------------------------------------------------------------------------------------------

PLUGIN_DIR = ROOT / "hooks" / "tdp-redis-store"
DIST = "tdp-redis-store"


class Redis(NamedTuple):
    url: str
    proc: subprocess.Popen
    client: object


def _redis_or_skip():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    return binary, pytest.importorskip("redis", reason="the redis client is not installed (pip install redis)")


@pytest.fixture(scope="session")
def redis_plugin(tmp_path_factory):
    """hooks/tdp-redis-store installed into this interpreter (pip, without dependencies)."""
    _redis_or_skip()
    return install_example(PLUGIN_DIR, DIST, tmp_path_factory.mktemp("dist"), TIMEOUT)


@pytest.fixture
def redis_server(tmp_path, redis_plugin):
    """A redis-server of its own on a free port, answering PING; killed at the end."""
    binary, redis = _redis_or_skip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path / "redis"
    workdir.mkdir()
    log = open(workdir / "server.log", "w")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=5)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not answer PING on port {port}:\n{(workdir / 'server.log').read_text()}")
            time.sleep(0.05)
        yield Redis(url, proc, client)
    finally:
        proc.kill()
        proc.wait()
        log.close()


# New tuners of the add kernel and of a scale function, launched for one size in a child process.
CHILD = textwrap.dedent("""
    import json, sys, warnings
    import torch, triton
    import triton_dist_plugin as tdp
    sys.path.insert(0, "tests")
    from helpers import Recorder
    from kernels import KERNELS
    from triton_dist_plugin.tune import autotune

    ADD, SCALE = KERNELS["add"], KERNELS["scale"]
    assert tdp.plugin_manager().has_plugin("redis_store"), "the entry point was not loaded"
    rec = Recorder()
    tdp.register(rec)

    def scale(x, alpha, BLOCK):
        return SCALE.launch(SCALE.jit, x, alpha, BLOCK=BLOCK)

    def tune(n):
        start = len(rec.timed)
        kernel = triton.autotune(configs=ADD.configs("cpu"), key=ADD.key)(ADD.jit)
        x, y = torch.randn(n), torch.randn(n)
        assert torch.allclose(ADD.launch(kernel, x, y), x + y)
        hit, kernel_timed = rec.records[-1].cache_hit, len(rec.timed) - start
        fn = autotune(config_space=[{"BLOCK": 128}, {"BLOCK": 256}], key_fn=lambda x, alpha: (x.numel(),))(scale)
        assert torch.allclose(fn(x, 2.0), 2.0 * x)
        return {"kernel_timed": kernel_timed, "kernel_hit": hit, "function_timed": len(rec.timed) - start
                - kernel_timed, "pick": str(kernel.best_config), "function_pick": fn.best_configs[(n,)]["BLOCK"]}
""")


def child_env(server: Redis, cache_dir: Path) -> dict:
    """Its own, empty cache directory (no shared disk) and the shared Redis."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DIST_PLUGIN_DISABLE"}
    return {**env, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir), URL_ENV: server.url}


def run_child(code: str, env: dict) -> dict:
    result = run_python(CHILD + textwrap.dedent(code), env=env, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_processes_sharing_only_redis_tune_each_key_once(redis_server, tmp_path):
    first = run_child("print(json.dumps(tune(1000)))", child_env(redis_server, tmp_path / "host-a"))
    assert first["kernel_timed"] >= 3 and first["function_timed"] >= 2 and not first["kernel_hit"]
    keys = sorted(k.decode() for k in redis_server.client.keys("tdp:*"))
    assert [k.split(":")[:3] for k in keys] == [["tdp", "function", "__main__.scale"], ["tdp", "kernel", "add_kernel"]]
    # The same record the first host's file store wrote.
    (local,) = (tmp_path / "host-a" / "kernels").glob("add_kernel/*.json")
    assert json.loads(redis_server.client.get(f"tdp:kernel:add_kernel:{local.stem}")) == json.loads(local.read_text())

    second = run_child("print(json.dumps(tune(1000)))", child_env(redis_server, tmp_path / "host-b"))
    assert second["kernel_timed"] == 0 and second["kernel_hit"] and second["function_timed"] == 0
    assert (second["pick"], second["function_pick"]) == (first["pick"], first["function_pick"])
    assert not list((tmp_path / "host-b").rglob("*.json"))  # answered by Redis: nothing written on host b

    redis_server.client.set(keys[1], b"{corrupt")
    third = run_child("""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = tune(1000)
        print(json.dumps({**result, "warnings": [str(w.message) for w in caught]}))
    """, child_env(redis_server, tmp_path / "host-c"))
    assert third["kernel_timed"] >= 3 and third["function_timed"] == 0
    assert any(f"corrupt value {keys[1]} in Redis at {redis_server.url}" in w for w in third["warnings"])
    assert json.loads(redis_server.client.get(keys[1]))["pick_config"]  # replaced by the new tuning


# Tunes one size, waits for the test to stop Redis, then tunes again.
OUTAGE = """
    before = tune(1000)
    print(json.dumps(before), flush=True)
    sys.stdin.readline()  # the test stops Redis here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = tune(1000)  # Redis is down: the local file store answers
        fresh = tune(500)  # a new key: tuned, Redis cannot take it, the file store can
        tdp.unregister(name="tdp.store")
        kernel = triton.autotune(configs=ADD.configs("cpu"), key=ADD.key)(ADD.jit)
        x, y = torch.randn(700), torch.randn(700)
        ADD.launch(kernel, x, y)  # no store keeps it: in memory only
        start = len(rec.timed)
        assert torch.allclose(ADD.launch(kernel, x, y), x + y)
        in_memory = len(rec.timed) == start
    print(json.dumps({"again": again, "fresh": fresh, "in_memory": in_memory,
                      "warnings": [str(w.message) for w in caught]}))
"""


def test_a_redis_that_goes_away_mid_run_falls_back_with_warnings(redis_server, tmp_path):
    env = child_env(redis_server, tmp_path / "host")
    proc = subprocess.Popen([sys.executable, "-c", CHILD + textwrap.dedent(OUTAGE)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["kernel_timed"] >= 3 and len(redis_server.client.keys("tdp:*")) == 2
        redis_server.proc.kill()
        redis_server.proc.wait()
        out, err = proc.communicate("go\n", timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    warned = result["warnings"]
    assert result["again"]["kernel_timed"] == 0 and result["again"]["kernel_hit"]
    assert result["again"]["function_timed"] == 0 and result["again"]["pick"] == first["pick"]
    assert result["fresh"]["kernel_timed"] >= 3 and result["fresh"]["function_timed"] >= 2
    assert result["in_memory"]
    reach = [w for w in warned if f"cannot reach Redis at {redis_server.url}" in w]
    assert len(reach) == 1  # once per process
    put = [w for w in warned if f"to Redis at {redis_server.url}" in w]
    assert any(w.startswith("add_kernel: cannot write the autotune cache in the store 'redis_store'")
               and f"kept in memory and in {tmp_path / 'host' / 'kernels' / 'add_kernel'}" in w for w in put)
    assert any(w.startswith("__main__.scale: cannot write") for w in put)
    assert any("kept in memory for this process only" in w for w in put)  # with the file store gone


# The store's source (not a copy installed earlier) is what the entry point loads in these children.
SOURCE_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))}

# Tunes one size, tunes it again with new tuners (the file store answers), then a second size.
FALLBACK = """
    import tdp_redis_store
    assert tdp_redis_store.__file__.startswith(sys.argv[1]), tdp_redis_store.__file__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, again, other = tune(1000), tune(1000), tune(500)
    print(json.dumps({"first": first, "again": again, "other": other, "warnings": [str(w.message) for w in caught]}))
"""


def run_source_child(code: str, env: dict) -> dict:
    result = python("-c", CHILD + textwrap.dedent(code), PLUGIN_DIR, env={**env, **SOURCE_ENV}, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("url", ["notaurl", "redis://:badport", "http://x"])
def test_a_malformed_redis_url_warns_once_and_falls_back_like_an_unreachable_server(redis_plugin, tmp_path, url):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DIST_PLUGIN_DISABLE"}
    env = {**env, "TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "host"), URL_ENV: url}
    result = run_source_child(FALLBACK, env)
    first, again, other, warned = result["first"], result["again"], result["other"], result["warnings"]
    assert first["kernel_timed"] >= 3 and first["function_timed"] >= 2 and other["kernel_timed"] >= 3
    assert again["kernel_timed"] == 0 and again["kernel_hit"] and again["function_timed"] == 0  # the file store
    assert (again["pick"], again["function_pick"]) == (first["pick"], first["function_pick"])
    malformed = [w for w in warned if w.startswith(f"tdp-redis-store: malformed {URL_ENV}={url!r}")]
    assert len(malformed) == 1, warned  # once per process, for every lookup of both kinds
    put = [w for w in warned if "cannot write the autotune cache in the store 'redis_store'" in w]
    assert len(put) == 4  # both sizes, kernel and function: each pick kept in memory and on disk
    assert all(f"to Redis: malformed {URL_ENV}={url!r}" in w and "kept in memory and in" in w for w in put), put
    # A fresh process: warned once again, answered by the file store alone.
    fresh = run_source_child(FALLBACK, env)
    assert fresh["first"]["kernel_timed"] == 0 and fresh["first"]["function_timed"] == 0
    assert fresh["first"]["pick"] == first["pick"] and fresh["other"]["pick"] == other["pick"]
    assert len([w for w in fresh["warnings"] if "malformed" in w]) == 1


# Every stored value replaced by JSON that is not a record, then tuned again with new tuners.
BAD_VALUES = """
    import redis
    import tdp_redis_store
    assert tdp_redis_store.__file__.startswith(sys.argv[1]), tdp_redis_store.__file__
    client = redis.Redis.from_url(tdp_redis_store.os.environ["TDP_REDIS_URL"])
    first = tune(1000)
    values = {"list": "[1, 2]", "string": json.dumps("x" * 8_000_000), "number": "1" + "0" * 5000,
              "nested": "[" * 200_000 + "]" * 200_000, "deep object": '{"a": ' * 100_000 + "1" + "}" * 100_000,
              "not utf-8": b"\\xff\\xfe{"}
    out = {}
    for name, value in values.items():
        for key in client.keys("tdp:*"):
            client.set(key, value)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = tune(1000)
        out[name] = {**again, "corrupt": sum("corrupt value" in str(w.message) for w in caught)}
    print(json.dumps({"first": first, "bad": out}))
"""


def test_redis_values_that_are_not_records_warn_and_never_raise(redis_server, tmp_path):
    result = run_source_child(BAD_VALUES, {**child_env(redis_server, tmp_path / "host")})
    first = result["first"]
    for name, again in result["bad"].items():
        # Warned for both the kernel's and the function's entry; the local file store answers.
        assert again["corrupt"] == 2 and again["kernel_timed"] == 0 and again["function_timed"] == 0, name
        assert again["pick"] == first["pick"], name


def test_a_redis_password_never_appears_in_a_warning(monkeypatch):
    """The URL names the server in every message, without its password."""
    import importlib.util
    import warnings

    source = Path(__file__).resolve().parents[1] / "hooks" / "tdp-redis-store" / "tdp_redis_store.py"
    spec = importlib.util.spec_from_file_location("tdp_redis_store_source", source)  # this checkout's
    store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(store)
    monkeypatch.setenv(store.URL_ENV, "redis://:hunter2@127.0.0.1:1/0")  # nothing listens on port 1
    store._warned.clear()
    entry = CacheEntry("kernel", "k", "0" * 32, Path("/nonexistent/x.json"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert store.tdp_cache_get(entry) is None
        with pytest.raises(OSError) as raised:
            store.tdp_cache_put(entry, {"format": 2})
    texts = [str(w.message) for w in seen] + [str(raised.value)]
    assert texts and all("hunter2" not in t for t in texts) and any(":***@127.0.0.1" in t for t in texts), texts
