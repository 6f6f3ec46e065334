"""``python -m triton_dist_plugin.cli``: the ``triton-dist-tune`` command."""

import sys

from . import main

sys.exit(main())
