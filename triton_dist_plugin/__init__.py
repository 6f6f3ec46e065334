"""triton-dist-plugin: Triton's autotuner, patched in place.

``import triton_dist_plugin`` patches ``triton.runtime.autotuner.Autotuner`` once, so every
``@triton.autotune`` kernel (decorated before or after the import) gains pluggable timing
(``TRITON_BENCH_METHOD``), wall-clock tuning under ``TRITON_INTERPRET=1``, candidates that fail
without taking tuning down, a launch path as cheap as a direct launch once a key is tuned, and a
pluggy hook bus (see :mod:`triton_dist_plugin.hookspecs`). ``TRITON_DIST_PLUGIN_DISABLE=1``
makes the import patch nothing; ``activate()`` / ``deactivate()`` switch it at run time.

Where to go next:

- ``triton_dist_plugin.tune.autotune``: tune a host function over configs (``@autotune(...)``);
- ``triton_dist_plugin.autotuner.contextual_autotune``: tune a whole step of several kernels;
- ``tuning_group()`` / ``set_tuning_group()``: one pick for every rank of a process group;
- ``configs=[]`` in ``@triton.autotune``: candidates generated from the kernel (``tiling``);
- ``triton-dist-tune --help``: the stored picks (list, show, report, export, import, clear,
  pretune, misses);
- ``python -m triton_dist_plugin.settings``: every setting, its default and meaning;
- the documentation in the repository's ``docs/`` folder (``index.md`` first).
"""

from __future__ import annotations

import sys
import warnings

if sys.argv[:1] == ["-m"] and "triton_dist_plugin.settings" in getattr(sys, "orig_argv", ()):
    # ``python -m triton_dist_plugin.settings`` prints the settings table. runpy imports this package
    # first, whose modules import ``settings``, then warns that the module it is about to run is
    # already imported; it only prints, so that warning says nothing useful.
    warnings.filterwarnings("ignore", message="'triton_dist_plugin.settings' found in sys.modules",
                            category=RuntimeWarning)

from . import (  # noqa: E402
    _compat,  # noqa: F401  (raises a clear ImportError when Triton is missing)
    settings,
)
from .activation import activate, deactivate, is_active  # noqa: E402
from .bus import PluginError, hookimpl, plugin_manager, register, unregister  # noqa: E402
from .distributed import RankMismatch, set_tuning_group, tuning_group  # noqa: E402
from .failures import NoValidConfig  # noqa: E402
from .frozen import FrozenMiss, TuningDuringCapture  # noqa: E402
from .hook_objects import CandidateRequest, TuningFindings, TuningRecord, TuningRequest  # noqa: E402
from .settings import SettingError  # noqa: E402

__version__ = "0.1.0"

DISABLE_ENV = "TRITON_DIST_PLUGIN_DISABLE"

__all__ = [
    "CandidateRequest",
    "FrozenMiss",
    "NoValidConfig",
    "PluginError",
    "RankMismatch",
    "SettingError",
    "TuningDuringCapture",
    "TuningFindings",
    "TuningRecord",
    "TuningRequest",
    "activate",
    "deactivate",
    "hookimpl",
    "is_active",
    "plugin_manager",
    "register",
    "set_tuning_group",
    "tuning_group",
    "unregister",
]

if not settings.value(DISABLE_ENV) and not is_active():
    from . import activation as _activation  # noqa: E402

    _activation.activate()
    del _activation
