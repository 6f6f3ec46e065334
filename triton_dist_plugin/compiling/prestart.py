"""Work every first compile needs, started in threads ahead of the first tuning.

Triton memoises per process two slow things that never touch the GPU: the hash of its own sources
(every compile's cache key) and its CUDA helper module's build (the driver's first use). Started at
activation and decoration, they overlap the program's own start-up instead of its first tuning;
a tuning, and a fork of a worker, wait for them (``prestarted``).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Callable, Optional

from .. import _compat, frozen

_early: list[threading.Thread] = []  # ``prestart``'s threads
_early_lock = threading.Lock()
_side: list[threading.Thread] = []  # ``start_side``'s threads


def prestart() -> None:
    """Start, in threads of this process, the two slow things a first tuning would otherwise wait
    for, both memoised by Triton per process and neither touching the GPU: the hash of Triton's
    sources and compiled library (hundreds of MB; every compile's cache key needs it: 0.3-0.7 s),
    and the build of Triton's CUDA helper module (a C compile into Triton's cache, 0.5-0.8 s, on
    the first use of the driver; on a machine without CUDA it fails at once, unseen). Called at
    activation and at each decoration (a plugin activated while imported off reaches the first);
    once per process, where ``wanted``."""
    with _early_lock:  # decorations may come from several threads
        if not wanted():
            return
        for name, step in (("tdp-triton-key", _compat.triton_key), ("tdp-cuda-utils", _cuda_utils)):
            _early.append(threading.Thread(target=_quietly, args=(step,), name=name, daemon=True))
            _early[-1].start()


def start_side(name: str, step: Callable) -> None:
    """Run ``step`` in a thread of its own, as ``prestart``'s steps run, that tunings do not wait for
    but a fork of the isolation worker does (``prestarted(side=True)``): another layer's slow
    first-use work (the compiled cache-hit path's build)."""
    _side.append(threading.Thread(target=_quietly, args=(step,), name=name, daemon=True))
    _side[-1].start()


def wanted() -> bool:
    """Whether ``prestart`` would start anything: not yet started, not under the interpreter or in
    frozen mode (nothing compiles there), nor in a ``multiprocessing`` child."""
    return not (_early or _compat.interpret() or frozen.mode() or multiprocessing.parent_process())


def prestarted(timeout: Optional[float] = None, side: bool = False) -> None:
    """Wait for ``prestart``'s work (doing it again at the same time would only be slower), and
    with ``side`` for ``start_side``'s too, at most ``timeout`` seconds in all."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in _early + (_side if side else []):
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _cuda_utils() -> None:
    if _compat.IS_ASCEND:
        return
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()  # a singleton: the driver, when first used, takes this one


def _quietly(step: Callable) -> None:
    try:
        step()
    except Exception:
        pass  # the tuning computes it again and meets the same trouble there
