"""``bench_real_libs.py`` in parts (that script is the entry and describes the method):

- ``cases``: ``Op`` and ``Case``, the seeded inputs and the autograd wrapper the op definitions share;
- ``ops_liger``, ``ops_gems``, ``ops_fla``: each library's ops; ``ops``: all of them, the groups, ``--list``;
- ``probe``: the tuning probe on ``KernelInterface.__getitem__``;
- ``child``: the child process (one mode, one rep): imports, first calls, outputs kept, steady state;
- ``runner``: the driver's side of a child: its environment, its run and timeout;
- ``compare``, ``report``: outputs compared, the per-op report, the findings and the table;
- ``driver``: the children within the budget, the results file, ``--merge``, the command line.
"""
