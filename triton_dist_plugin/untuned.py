"""Deprecated: capture and frozen mode are ``triton_dist_plugin.frozen`` now (``frozen()`` is
``mode()``, ``frozen_miss()`` is ``on_miss()``), and ``nearest``/``distance`` are
``triton_dist_plugin.store.keys``'. The old names, with a warning; they go in a later release."""

import warnings

from .frozen import (  # noqa: F401
    ENV,
    FROZEN_ENV,
    MISSES,
    FrozenMiss,
    TuningDuringCapture,
    capturing,
    fallback,
    misses,
    record_miss,
    refuse,
)
from .frozen import mode as frozen  # noqa: F401
from .frozen import on_miss as frozen_miss  # noqa: F401
from .store.keys import distance, nearest  # noqa: F401

warnings.warn("triton_dist_plugin.untuned is deprecated: import triton_dist_plugin.frozen (and "
              "triton_dist_plugin.store.keys for nearest and distance) instead", DeprecationWarning, stacklevel=2)
