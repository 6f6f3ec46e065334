"""What a tuning tells: ``report`` is the built-in ``tdp_on_tuned`` plugin behind
``TRITON_PRINT_AUTOTUNING`` and the progress bar, ``html_report`` the page ``triton-dist-tune
report`` writes."""
