"""Isolation: each candidate run once in a worker process before it runs in the user's, so that
one that crashes the GPU context or never finishes fails there. ``isolate`` is the user's side
(one worker per process, started early, replaced after a crash) and ``channel`` its end of the
worker's socket; ``isolate_source`` what is sent of a kernel the worker cannot import (its source
and the values it uses); ``transfer`` and ``cuda_ipc`` how the arguments travel; ``isolate_worker``
the worker's side; ``worker_start`` and ``fork_checks`` how its process begins;
``idle`` its release when tuning has gone idle."""
