"""What is stored, and the one check it passes wherever it enters. ``filestore`` is the built-in
store (JSON files written atomically), over ``safe_files`` (paths reached following no link,
trusting no other owner, and writers' temporaries), ``records`` the validation of every record
(types, bounds and sense) and the one layout both kinds of entry are written in (the field
checks in ``record_fields``; the older layouts still read, in ``records_legacy``), ``keys``
tuning keys as bounded numbers and the distance between two, ``index`` each kernel folder's
index of its keys (its files: ``index_files``), ``fingerprint`` what a pick is keyed on beyond
its key, ``describe`` configs, sources, versions and hardware as text the same in every
process, and entry ids, ``cache`` the function-level cache and the store interface both kinds
share (``EntryStore``), ``persist`` kernel-level picks, ``manifest`` picks exported from one
machine and imported on another."""
