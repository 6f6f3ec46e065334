"""``triton_dist_plugin.tune``: the function-level tuner (``autotune``), as the seed's API names it; the module is
``triton_dist_plugin.function_level``, and this name is that very module (no copy, no warning)."""

import sys

from . import function_level

sys.modules[__name__] = function_level
