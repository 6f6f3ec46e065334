"""What a candidate's run wrote, and whether two runs agree: the accuracy check's arithmetic.

Apart from the check itself (``accuracy``) so that what counts as a tensor the launch can write,
how the arguments are put back, and the tolerances live in one place. Every operation here works
for every dtype a kernel takes (float8 included, where some torch operations do not), touches a
tensor only where a run changed it (a broadcast input or a leaf that requires grad is never
written), and keeps a copy only of what changed (a read-only input is never cloned again).
"""

from __future__ import annotations

from typing import Any, Optional

_INT_OF_SIZE: dict = {}  # element size -> the integer dtype of that size (bitwise comparisons)


def _bits(tensor: Any) -> Any:
    """``tensor`` viewed as integers of its element's size, where one exists (exact equality,
    NaN included, and no dtype lacks it); else the tensor itself."""
    import torch

    if not _INT_OF_SIZE:
        _INT_OF_SIZE.update({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64})
    kind = _INT_OF_SIZE.get(tensor.element_size())
    try:
        return tensor.view(kind) if kind is not None else tensor
    except RuntimeError:
        return tensor


def same(a: Any, b: Any) -> bool:
    """The two tensors hold the very same bits."""
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(_bits(a), _bits(b)))


def launch_tensors(named: dict) -> dict:
    """The tensors a launch can write, by name: tensor arguments and the base of tensor
    descriptors (``TensorDescriptor(x, ...)``: the kernel writes ``x``), each once; not a
    broadcast view (a zero stride over more than one element: nothing can be written there)."""
    import torch

    found: dict = {}
    for name, value in named.items():
        for label, tensor in ((name, value), (f"{name}.base", getattr(value, "base", None))):
            if isinstance(tensor, torch.Tensor) and all(t is not tensor for t in found.values()) \
                    and not any(s == 0 and n > 1 for s, n in zip(tensor.stride(), tensor.shape)):
                found[label] = tensor
                break
    return found


class Arguments:
    """A launch's writable tensors, their values before tuning, and what a run left in them."""

    def __init__(self, named: dict):
        import torch

        self.tensors = launch_tensors(named)
        with torch.no_grad():
            self.original = {n: v.detach().clone() for n, v in self.tensors.items()}

    def state(self) -> dict:
        """What the tensors hold now: a copy of each one that differs from its original, the
        original itself for the rest (no copy of what a run left alone)."""
        import torch

        with torch.no_grad():
            return {n: self.original[n] if same(v, self.original[n]) else v.detach().clone()
                    for n, v in self.tensors.items()}

    def put(self, values: Optional[dict] = None) -> None:
        """Put ``values`` (a ``state()``; default: the originals) back, writing only what differs."""
        import torch

        values = self.original if values is None else values
        with torch.no_grad():
            for n, v in self.tensors.items():
                if not same(v, values[n]):
                    v.copy_(values[n])


def _floating(tensor: Any) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _finite(tensor: Any) -> Any:
    """``torch.isfinite``, for float8 too (upcast: torch has no isfinite of its own for some)."""
    import torch

    return torch.isfinite(tensor.float() if tensor.element_size() == 1 else tensor)


def nonfinite_over(result: dict, other: dict) -> Optional[str]:
    """The first argument where ``result`` holds NaN or Inf and ``other`` a finite value."""
    for name, value in result.items():
        if value is not other[name] and _floating(value) and bool((~_finite(value) & _finite(other[name])).any()):
            return name
    return None


def has_nonfinite(result: dict) -> bool:
    return any(_floating(v) and not bool(_finite(v).all()) for v in result.values())


def tolerance(tensor: Any) -> tuple[float, float]:
    name = str(tensor.dtype)
    if "float16" in name or "bfloat16" in name or "float8" in name:
        return 2e-2, 2e-2
    if "float" in name or "complex" in name:
        return 1e-3, 1e-3
    return 0.0, 0.0


def differs(result: dict, reference: dict) -> Optional[tuple[str, float]]:
    """``(argument, max abs diff)`` of the first argument that differs beyond its tolerance."""
    import torch

    for name, value in result.items():
        ref = reference[name]
        if value is ref or same(value, ref):
            continue
        if _floating(value):
            rtol, atol = tolerance(value)
            a, b = (value, ref) if value.is_complex() else (value.float(), ref.float())
            if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                return name, float((a - b).abs().nan_to_num(nan=float("inf")).max())
        else:
            return name, float((value.double() - ref.double()).abs().max()) if value.numel() else 0.0
    return None
