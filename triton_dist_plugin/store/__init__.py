"""What is stored, and the one check it passes wherever it enters. ``filestore`` is the built-in
store (JSON files written atomically, following no link, trusting no other owner), ``records``
the validation of every record, ``fingerprint`` what a pick is keyed on beyond its key,
``cache`` the function-level cache and entry ids, ``persist`` kernel-level picks, ``manifest``
picks exported from one machine and imported on another."""
