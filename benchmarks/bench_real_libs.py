"""FlagGems, Liger-Kernel and flash-linear-attention (fla) ops with and without the plugin, on one GPU.

    python benchmarks/bench_real_libs.py [--ops core|liger|gems|fla|light|heavy|all|NAME,...] [--reps 3]
                                         [--modes disabled,before,after] [--results NAME] [--list]
    python benchmarks/bench_real_libs.py --merge A.json B.json ... [--results NAME]

Each op (``--list`` shows them) calls a library function that launches ``@triton.autotune`` kernels,
FlagGems' ``libtuner``/``libentry`` kernels included, and its backward where the backward is tuned
too. Every op runs in fresh child processes, interleaved: for each rep, one process per mode:

- ``disabled``: ``TRITON_DIST_PLUGIN_DISABLE=1``, ``import triton_dist_plugin`` (patches nothing),
  then the libraries: upstream Triton's autotuner;
- ``before``: ``import triton_dist_plugin``, then the libraries;
- ``after``: the libraries, then ``import triton_dist_plugin`` (kernels decorated before the patch).

Each child starts with empty caches of its own (Triton's ``TRITON_CACHE_DIR``, the plugin's
``TRITON_DIST_AUTOTUNE_DIR``, FlagGems' ``FLAGGEMS_CACHE_DIR`` with its sqlite tune database; fla's
config cache is off with ``FLA_CACHE_MODE=disabled``; ``GEMS_VENDOR=nvidia`` spares FlagGems its
probe of every vendor's tools), runs one small plain ``@triton.jit`` kernel and one matmul to absorb
start-up, then, per op, with inputs drawn from a generator seeded from the op's name:

1. the first call, synchronised and timed (it tunes), then the backward, timed the same way; the
   outputs, gradients and any state the op updates in place are kept (copies on the host);
2. the steady state: the op (forward, or forward and backward) replayed from a CUDA graph, or timed
   with ``triton.testing.do_bench`` (median) where it synchronises with the host or does not capture.

Tuning is measured by one wrapper, the same in every mode and installed before the plugin and the
libraries are imported: ``KernelInterface.__getitem__`` (what ``kernel[grid]`` calls on an
``Autotuner`` and on what wraps one: ``Heuristics``, FlagGems' ``LibEntry``, which call the tuner's
``run`` directly) synchronises and times each launch of a tuned kernel during the first call, and
counts a launch as tuning when the tuner's ``cache`` grows or its ``configs_timings`` is replaced
(FlagGems' ``LibTuner.cache`` is a sqlite table without a length). It records per kernel the wall
time of that launch, the number of configs, how many failed (infinite time) and the pick. Tuners
that tuned without passing through it are listed as ``unprobed``.

The driver compares the first outputs of ``before`` and ``after`` with ``disabled`` (bitwise, else
the largest difference against a tolerance), the ``disabled`` reps with each other (upstream's own
nondeterminism: its picks can differ run to run), and the picks; it reports per op the first-call
time per mode (median over reps), the tuning speedup of each kernel (upstream / plugin, medians) and
the steady-state time ratio (plugin / upstream). Results go to ``results/real_libs_h200.json``; a
compact table is printed last. An op that fails only under the plugin is listed first among the
findings.

Compilation dominates upstream's tuning (about 0.3 to 1.2 s per config on the H200, whatever the
sizes), and each child spends about 20 s starting (torch, the three libraries, CUDA). Measured with
one rep: the 18 ``light`` ops tune in 200 s upstream and 55 s under the plugin, so they take about
20 minutes at 3 reps. ``core`` (the default) is sized, from those numbers, to fit one 10-minute
command at 3 reps; so is each library's group. For every op, run one library per command and combine:

    python benchmarks/bench_real_libs.py --ops liger --results real_libs_h200_liger.json
    python benchmarks/bench_real_libs.py --ops fla --results real_libs_h200_fla.json
    python benchmarks/bench_real_libs.py --ops gems --results real_libs_h200_gems.json
    python benchmarks/bench_real_libs.py --merge real_libs_h200_{liger,fla,gems}.json

``--budget`` (default 550 s) bounds the children: a run that would not fit is skipped and listed.

The libraries are not dependencies of the project: install them (and SQLAlchemy and greenlet, which
FlagGems imports, and einops for fla) into a folder on ``PYTHONPATH``, e.g. from wheels:
``pip install --no-deps --target /tmp/site fla_core-0.6.0 flag_gems-5.0.2 liger_kernel-0.8.5
sqlalchemy greenlet einops``.

The code is the package ``real_libs/`` beside this script (its ``__init__`` names the parts).
"""

from __future__ import annotations

from real_libs.driver import main

if __name__ == "__main__":
    main(__doc__)
