"""How a tuning's arguments reach the isolation worker, unchanged, and without a pickled copy.

A tensor travels as its dtype, device, shape and strides; its data as the raw bytes of the storage
its elements lie in (``span``), rebuilt there with the same strides, either way:

- **over the worker's socket**: a CPU tensor, and any tensor the next way does not serve, is sent
  as it is (one copy to host memory for a device's);
- **device to device**: a CUDA tensor's data is written by this process straight into a buffer
  the worker allocates and exports (``cuda_ipc``), once the worker asks (``share``), and unmapped
  before any candidate runs there. A large elementwise kernel's arguments (hundreds of MB) no
  longer go through host memory and the socket, which was most of the worker's first call.
  Where the driver refuses (ROCm, expandable segments, a buffer smaller than said), that
  tensor's bytes take the socket instead.

This process writes only into the worker's memory, never the other way: a candidate that writes
out of bounds there still reaches nothing of this process. The data is what the tensors hold when
the worker asks, before any candidate runs here, copied on the stream current when the job was
made, in its order; a worker that replaces a crashed one is sent what they hold then.
"""

from __future__ import annotations

from typing import Any, Optional

from . import cuda_ipc

ALIGN = 256  # each tensor's place in the worker's buffer: aligned for any dtype, and as the allocator aligns


class Packed:
    """This process's side: a job's arguments as items, the bytes sent with it (``inline``), and
    the CUDA tensors whose data the worker is to get device to device (``shared``, with the
    ``sizes`` it is sent: ``[(device ordinal, bytes)]``). ``device``: the current CUDA device
    here, which the worker makes its own (Triton launches on it)."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        import torch

        self.inline: list = []
        self.shared: list = []
        self.args = [self.item(a, torch) for a in args]
        self.kwargs = {k: self.item(v, torch) for k, v in kwargs.items()}
        self.device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        # Copied later on the stream they are written on, in its order: never torn by a kernel
        # launched meanwhile (a config's pre_hook, say).
        self.streams = {t.device.index: torch.cuda.current_stream(t.device).cuda_stream for t in self.shared}
        self.sizes = [(t.device.index, span(t)[1]) for t in self.shared]

    def item(self, value: Any, torch: Any) -> tuple:
        if not isinstance(value, torch.Tensor):
            return ("value", value)
        ref: Optional[tuple] = None
        if value.numel():
            data = value.detach()
            if _shareable(data, torch):
                ref = ("shared", len(self.shared))
                self.shared.append(data)
            else:
                ref = ("inline", len(self.inline))
                self.inline.append(as_bytes(data))
        return ("tensor", ref, str(value.dtype).removeprefix("torch."), str(value.device), tuple(value.shape),
                value.stride())

    def answer(self, offers: Any) -> tuple[list[int], list]:
        """Write the shared tensors into the buffers the worker offers (``{ordinal: (handle,
        offset)}``, or a reason where it has none): ``(left, buffers)``, those it could not, and
        their bytes to send instead."""
        left: list[int] = []
        for ordinal, (size, places) in layout(self.sizes).items():
            offer = offers.get(ordinal) if isinstance(offers, dict) else None
            try:
                if not isinstance(offer, tuple) or len(offer) != 2:
                    raise cuda_ipc.IpcError(offer if isinstance(offer, str) else "no buffer offered")
                cuda_ipc.write(ordinal, offer[0], offer[1], size,
                               [(self.shared[j].data_ptr(), at, self.sizes[j][1]) for j, at in places.items()],
                               self.streams[ordinal])
            except Exception:  # noqa: BLE001 - the socket carries them instead
                left += list(places)
        return left, [as_bytes(self.shared[j]) for j in left]


def _shareable(tensor: Any, torch: Any) -> bool:
    return tensor.device.type == "cuda" and torch.version.hip is None and tensor.layout == torch.strided


def span(tensor: Any) -> tuple[int, int]:
    """``(elements, bytes)`` of the storage a tensor's elements lie in, from its first: what is
    sent, so that the worker's tensor has the same strides over the same layout (an expanded
    tensor's one row, a transposed one's every element, a slice's rows and the gaps between)."""
    elements = 1 + sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride()))
    return elements, elements * tensor.element_size()


def as_bytes(tensor: Any) -> memoryview:
    """The storage a tensor's elements lie in (``span``), on the host, as bytes (sent as they
    are: no pickled copy)."""
    import torch

    flat = tensor.as_strided((span(tensor)[0],), (1,))
    return memoryview(flat.cpu().view(torch.uint8).numpy())


def layout(sizes: list[tuple[int, int]]) -> dict[int, tuple[int, dict[int, int]]]:
    """Where each shared tensor lies in its device's buffer: ``{ordinal: (size, {index: offset})}``;
    both sides compute it from the sizes this process sent."""
    places: dict[int, tuple[int, dict[int, int]]] = {}
    for index, (ordinal, nbytes) in enumerate(sizes):
        size, offsets = places.get(ordinal, (0, {}))
        offsets[index] = size
        places[ordinal] = (size + -(-nbytes // ALIGN) * ALIGN, offsets)
    return places


class Arriving:
    """The worker's side of a job's arguments: its buffers (``offers``), then the tensors."""

    def __init__(self, job: dict, inline: list) -> None:
        self.job, self.inline, self.blocks = job, inline, {}
        self.places = layout(job["shared"])

    def offers(self) -> dict:
        """A buffer per device, exported: ``{ordinal: (handle, offset)}``, or why not."""
        import torch

        offers: dict = {}
        for ordinal, (size, _) in self.places.items():
            try:
                block = torch.empty(size, dtype=torch.uint8, device=f"cuda:{ordinal}")
                offers[ordinal] = cuda_ipc.export(ordinal, block.data_ptr())
                self.blocks[ordinal] = block
            except Exception as exc:  # noqa: BLE001 - its parent sends the bytes instead
                offers[ordinal] = f"{type(exc).__name__}: {exc}"
        return offers

    def arguments(self, left: list[int], buffers: list) -> tuple[list, dict]:
        """The job's arguments, given the shared tensors that came as bytes instead (``left``)."""
        sent = dict(zip(left, buffers))
        args = [self.restore(a, sent) for a in self.job["args"]]
        kwargs = {k: self.restore(v, sent) for k, v in self.job["kwargs"].items()}
        self.blocks = {}  # the tensors view them: each buffer lives as long as its tensors
        return args, kwargs

    def restore(self, item: tuple, sent: dict) -> Any:
        """A tensor over its span's bytes, with its strides (an expanded one stays expanded)."""
        import torch

        if item[0] != "tensor":
            return item[1]
        _, ref, dtype, device, shape, stride = item
        dtype = getattr(torch, dtype)
        if ref is None:
            return torch.empty_strided(shape, stride, dtype=dtype, device=device)
        if ref[0] == "shared" and ref[1] not in sent:
            ordinal, nbytes = self.job["shared"][ref[1]]
            at = self.places[ordinal][1][ref[1]]
            flat = self.blocks[ordinal][at:at + nbytes].view(dtype)
        else:
            raw = self.inline[ref[1]] if ref[0] == "inline" else sent[ref[1]]
            flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).to(device)
        return flat.as_strided(shape, stride)
