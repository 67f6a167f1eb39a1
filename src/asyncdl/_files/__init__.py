"""The disk: every file asyncdl makes, writes, publishes or removes beside the targets.

What it holds: the temp file beside a target, its writes and its publishing onto the
target (``writer``, ``file_writes``, ``unnamed_files``), its name (``temp_names``),
the sweep of temp files whose writer died (``dead_temps``), and the timing of quick
file calls on the event loop (``quick_io``); a resumable download's partial file,
its journal, their names and locks, and finding the ones left behind
(``partial_file``, ``journal``, ``partial_paths``, ``partials``); the records of
the files asyncdl wrote and its own names beside them (``file_records``,
``own_files``), ``sync --delete``'s stale files and its lock (``stale``,
``sync_lock``); and where a key lands on disk, or why it may not (``key_paths``).

What it may import: its own modules, the public types at the top of the package,
and ``_wire``'s checksums (what a write computes and a journal records).

What it never does: send a request, or import ``_transfer``, ``_reads``, ``_bulk``
or the engine. A bad path is refused before anything is written, and no target is
ever left half-written: a file appears whole (a rename, a link) or not at all.
"""
