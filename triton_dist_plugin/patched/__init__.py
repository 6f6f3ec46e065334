"""The patched ``Autotuner``: what a launch does once the plugin is active. ``launch`` is the
cache-hit path and the choice of candidates on a miss, ``tuning`` the rest of a miss (the stored
pick, or readying and timing the candidates, and keeping the pick), over per-tuner state
(``kernel_state``); ``candidates`` turns a launch's configs into timed calls with upstream's
hooks; ``benchmarker`` decides which timer times them and whether screening stands in;
``accuracy`` checks candidates' results against a reference (``comparison``: what a run
wrote, and whether two agree); ``direct`` is the cache-hit launcher; ``subclass`` and ``batch``
serve tuners with their own ``run``."""
