"""Progress displays appear on a terminal (a real pseudo-terminal here) and nowhere else."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from helpers import ROOT, python

CODE = """
import torch, triton, triton.language as tl
from triton_dist_plugin.tune import autotune
from triton_dist_plugin.autotuner import contextual_autotune

@autotune(config_space=[{"k": i} for i in range(3)], key_fn=lambda x: x)
def host(x, k):
    return x + k

host(1)

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

@contextual_autotune(n_repeat=1, n_warmup=0)
def step(x):
    y = torch.empty_like(x)
    copy[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
    return y

step(torch.randn(100))

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)], key=["n"])
@triton.jit
def plain_copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

x = torch.randn(300)
plain_copy[lambda m: (triton.cdiv(300, m["BLOCK"]),)](x, torch.empty_like(x), 300)
print("done")
"""


def run(tty: bool, tmp_path) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    if not tty:
        result = python("-c", CODE, env=env, cwd=tmp_path, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stderr
    leader, follower = pty.openpty()  # a terminal for both streams, as a person running it has
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100, like a real one
    proc = subprocess.Popen([sys.executable, "-c", CODE], env=env, cwd=tmp_path, stdout=follower,
                            stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data.decode(errors="replace"))
    proc.wait(timeout=120)
    os.close(leader)
    shown = "".join(chunks)
    assert proc.returncode == 0 and "done" in shown, shown[-2000:]
    return shown


def test_progress_on_a_terminal(tmp_path):
    shown = run(True, tmp_path)
    assert "autotune host" in shown  # the function-level tuner's bar
    assert "[contextual_autotune] copy key=(100" in shown and "candidate 2/2" in shown
    assert "autotune plain_copy" in shown and "/4 " in shown  # a plain @triton.autotune kernel's bar, 4 candidates


def test_no_progress_when_not_a_terminal(tmp_path):
    shown = run(False, tmp_path)
    assert "autotune host" not in shown and "contextual_autotune" not in shown and "plain_copy" not in shown
