"""``fork_server``'s ``python`` flavour: a forked child is what a fresh interpreter would be.

The tests that start Python processes (``helpers.python``, ``helpers.run_python``) fork them from a
server that has imported torch; what they check holds only if such a child runs its arguments, and
leaves, as ``python ARGS`` would. Each case here runs the same command both ways and compares.
"""

import os
import re
import subprocess
import sys

import fork_server
import pytest

PROBE = r"""
import atexit, json, os, sys, threading, time
import __main__

def annotated(x: int) -> "str": pass  # no __future__ of the server's may reach the code it runs

def later():
    time.sleep(0.2)
    print("thread joined", flush=True)

threading.Thread(target=later).start()
atexit.register(lambda: print("atexit ran"))
print(json.dumps({
    "argv": sys.argv, "path": sys.path[:3], "name": __name__, "main_file": getattr(__main__, "__file__", None),
    "loader": type(getattr(__main__, "__loader__", None)).__name__, "spec": repr(__main__.__spec__),
    "cwd": os.getcwd(), "home": os.path.expanduser("~"), "orig_argv": sys.orig_argv[1:2],
    "imported": [m for m in ("triton", "triton_dist_plugin") if m in sys.modules],
    "env": os.environ.get("TRITON_PROBE"), "annotations": repr(annotated.__annotations__),
}))
how = sys.argv[-1]
if how == "raise":
    raise ValueError("the probe fails")
if how == "exit":
    sys.exit("the probe leaves with a message")
if how == "code":
    sys.exit(3)
"""


def _both(args, env, cwd):
    """The command forked and started afresh: (forked, fresh), each a finished process."""
    forked = fork_server.run(args, env, cwd, 120)
    fresh = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    return forked, fresh


def _seen(done) -> tuple:
    """What a finished process showed, but objects' addresses (``<... at 0x...>``), each process's own."""
    return done.returncode, *(re.sub(r" at 0x[0-9a-f]+", "", text) for text in (done.stdout, done.stderr))


@pytest.mark.skipif(not fork_server.USABLE, reason="the fork server needs Linux")
@pytest.mark.parametrize("how", ["-c ok", "script raise", "-m exit", "script code"])
def test_a_forked_child_runs_and_leaves_as_a_fresh_interpreter(tmp_path, how):
    form, ending = how.split()
    (tmp_path / "probe_mod.py").write_text(PROBE)
    args = {"-c": ["-c", PROBE], "script": [str(tmp_path / "probe_mod.py")], "-m": ["-m", "probe_mod"]}[form]
    env = {**os.environ, "HOME": str(tmp_path), "TRITON_PROBE": how,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "extra"), "relative"])}
    before = len(fork_server.plain_starts)
    forked, fresh = _both([*args, ending], env, tmp_path)
    assert len(fork_server.plain_starts) == before, fork_server.plain_starts[before:]  # it was forked
    assert _seen(forked) == _seen(fresh)
    assert forked.returncode == {"ok": 0, "raise": 1, "exit": 1, "code": 3}[ending], forked.stderr
    lines = forked.stdout.splitlines()
    assert lines[-2:] == ["thread joined", "atexit ran"], lines  # threads joined, then atexit, as at exit
    seen = __import__("json").loads(lines[0])
    assert seen["imported"] == [] and seen["home"] == str(tmp_path) and seen["env"] == how, seen
    assert seen["annotations"] == "{'x': <class 'int'>, 'return': 'str'}", seen
    assert seen["path"][1:] == [str(tmp_path / "extra"), str(tmp_path / "relative")], seen  # PYTHONPATH, from cwd
    if ending == "raise":  # the traceback starts at the script, as the interpreter's does
        assert re.match(r"Traceback \(most recent call last\):\n  File \".*probe_mod.py\"", forked.stderr)


@pytest.mark.skipif(not fork_server.USABLE, reason="the fork server needs Linux")
def test_neighbouring_children_differ_in_seeds_and_what_cannot_be_forked_starts_afresh(tmp_path):
    code = "import random, torch; print(hash('seed'), random.random(), torch.initial_seed())"
    outs = [fork_server.run(["-c", code], dict(os.environ), tmp_path, 120).stdout.split() for _ in range(2)]
    assert all(a != b for a, b in zip(*outs)), outs  # its own str hash, random and torch seeds
    before = len(fork_server.plain_starts)
    for args, env in ((["-I", "-c", "print(1)"], os.environ),  # an option of the interpreter's own
                      (["-c", "print(1)"], {**os.environ, "OMP_NUM_THREADS": "1"})):  # read at torch's import
        done = fork_server.run(args, dict(env), tmp_path, 120)
        assert done.returncode == 0 and done.stdout == "1\n", done.stderr
    assert ["-I" in why or "OMP_NUM_THREADS" in why for why in fork_server.plain_starts[before:]] == [True, True]


@pytest.mark.skipif(not fork_server.USABLE, reason="the fork server needs Linux")
def test_a_child_past_its_time_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        fork_server.run(["-c", "import time; print('started', flush=True); time.sleep(60)"], dict(os.environ),
                        tmp_path, 3)
