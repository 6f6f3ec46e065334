"""Deprecated: ``triton_dist_plugin.patch`` is now ``triton_dist_plugin.activation``. This name is
that module, with a warning; it goes in a later release."""

import sys
import warnings

from . import activation

warnings.warn("triton_dist_plugin.patch is deprecated: import triton_dist_plugin.activation instead",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = activation
