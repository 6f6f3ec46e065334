"""What a tuning tells: ``report`` is the built-in ``tdp_on_tuned`` plugin behind
``TRITON_PRINT_AUTOTUNING`` and the progress bar, ``html_report`` the page ``triton-dist-tune
report`` writes, over ``html_view`` (each entry read once) and ``html_charts`` (its charts, heatmap,
"why this pick?" box and phases)."""
