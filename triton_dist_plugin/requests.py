"""Deprecated: ``triton_dist_plugin.requests`` is now ``triton_dist_plugin.hook_objects``. This name is
that module, with a warning; it goes in a later release."""

import sys
import warnings

from . import hook_objects

warnings.warn("triton_dist_plugin.requests is deprecated: import triton_dist_plugin.hook_objects instead",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = hook_objects
