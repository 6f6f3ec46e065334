"""The isolation worker's arguments, device to device (``transfer``, ``cuda_ipc``): on a CUDA GPU
only (run on the H200 by ``benchmarks/bench_isolation_first_call.py --tests``); skipped here."""

import os
import pickle
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

_CHILD = """
import pickle, sys
from multiprocessing.connection import Connection
import torch
from triton_dist_plugin.isolation.transfer import Arriving
conn = Connection(int(sys.argv[1]))
job = pickle.loads(conn.recv_bytes())
arriving = Arriving(job, [])
conn.send_bytes(pickle.dumps(arriving.offers()))
left = pickle.loads(conn.recv_bytes())
args, _ = arriving.arguments(left, [bytearray(conn.recv_bytes()) for _ in left])
conn.send_bytes(pickle.dumps([(a.cpu(), a.stride(), a.is_contiguous()) if isinstance(a, torch.Tensor) else a
                              for a in args]))
"""


def _child(tmp_path):
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    theirs.close()
    return proc, Connection(ours.detach())


def test_cuda_tensors_reach_another_process_device_to_device_unchanged(tmp_path):
    """Every dtype, a transposed view, a slice at an offset, an empty tensor: the other process
    gets each as it was, written into its own buffer, contiguous ones viewing it."""
    from triton_dist_plugin.isolation.transfer import Packed

    base = torch.randn(64, 33, device="cuda")
    values = [torch.randn(1000, device="cuda").half(), torch.arange(-5, 300, device="cuda"),
              torch.rand(77, device="cuda") > 0.5, base.t(), base[3:9, 1:], torch.empty(0, 3, device="cuda"),
              torch.randn(3 << 20, device="cuda"), torch.randn(5, 1, device="cuda").expand(5, 7), 7]
    packed = Packed(tuple(values), {})
    assert len(packed.shared) == 7  # the empty tensor has nothing to send
    proc, conn = _child(tmp_path)
    conn.send_bytes(pickle.dumps({"args": packed.args, "kwargs": {}, "shared": packed.sizes}))
    left, buffers = packed.answer(pickle.loads(conn.recv_bytes()))
    assert left == []  # everything went device to device
    conn.send_bytes(pickle.dumps(left))
    back = pickle.loads(conn.recv_bytes())
    for value, got in zip(values, back):
        if isinstance(value, torch.Tensor):
            data, stride, contiguous = got
            assert data.dtype == value.dtype and data.shape == value.shape and stride == value.stride()
            assert torch.equal(data, value.cpu())
        else:
            assert got == value
    assert proc.wait(30) == 0


def test_an_offer_smaller_than_the_arguments_is_refused_and_they_take_the_socket(tmp_path):
    """A buffer the driver says is smaller than the arguments is never written: this process's
    context stays usable, and the tensors go as bytes."""
    from triton_dist_plugin.isolation import cuda_ipc
    from triton_dist_plugin.isolation.transfer import Packed

    big = torch.randn(16 << 20, device="cuda")
    packed = Packed((big,), {})
    proc, conn = _child(tmp_path)
    small = {"args": [("value", 0)], "kwargs": {}, "shared": [(big.device.index, 1 << 20)]}
    conn.send_bytes(pickle.dumps(small))  # the child offers 1 MiB
    offers = pickle.loads(conn.recv_bytes())
    with pytest.raises(cuda_ipc.IpcError, match="buffer"):
        cuda_ipc.write(big.device.index, *offers[big.device.index], packed.sizes[0][1],
                       [(big.data_ptr(), 0, packed.sizes[0][1])], torch.cuda.current_stream().cuda_stream)
    left, buffers = packed.answer(offers)
    assert left == [0] and buffers[0].nbytes == big.numel() * 4
    torch.cuda.synchronize()
    assert (big + 1).sum().isfinite()
    conn.send_bytes(pickle.dumps([]))
    conn.recv_bytes()
    assert proc.wait(30) == 0


def test_a_generated_kernel_tuned_with_isolation_sends_its_arguments_device_to_device(monkeypatch):
    import triton
    import triton.language as tl

    import triton_dist_plugin as tdp

    notes = []

    class Notes:
        @tdp.hookimpl
        def tdp_on_tuned(self, record):
            notes.extend(record.notes)

    plugin = Notes()
    tdp.register(plugin)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ISOLATE", "1")
    try:
        @triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"])
        @triton.jit
        def add(x, y, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + offs, tl.load(x + offs, mask=offs < n) + tl.load(y + offs, mask=offs < n), mask=offs < n)

        x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
        out = torch.empty_like(x)
        add[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, out, x.numel())
        torch.testing.assert_close(out, x + y)
    finally:
        tdp.unregister(plugin)
    assert any("3 tensors device to device" in note for note in notes), notes
