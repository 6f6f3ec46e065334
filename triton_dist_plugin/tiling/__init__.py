"""Automatic tiling for ``@triton.autotune(configs=[])``: read the kernel, model the machine,
generate few good candidates. ``analysis`` finds the tiling parameters and what they tile,
``hardware`` describes the active backend, ``generate`` builds and prunes candidates (the
built-in ``tdp_generate_configs`` plugin), ``hints`` crosses in extra search dimensions."""
