"""Readying candidates: every candidate compiled before it is timed, so tuning waits for the
slowest compile rather than the sum. ``precompile`` runs the two stages (forked workers, then
threads) and splits the work between the ranks of a host; ``forked_compile`` is the forked-worker
stage, which also gives up a compile far slower than the rest of its step; ``stream`` screens each
candidate as it arrives and leaves hopeless ones uncompiled."""
