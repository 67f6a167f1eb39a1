"""Many objects through one engine: ``download_many`` and ``download_prefix``, their
input pulled lazily and their results handed back as they finish.

What it holds: the bulk downloads (``bulk``); the objects of a prefix's listing,
each with its place under the destination (``listing``); and the ``--exclude`` /
``--include`` filters (``filters``).

What it may import: ``_transfer`` (each object is one download), ``_files`` (the
records that let a re-run skip, each key's place on disk, the sweep of dead temp
files), ``_wire`` and the public types at the top of the package.

What it never does: import ``_reads`` or the engine, or hold more than
``max_concurrency`` downloads at once: memory stays flat whatever the number of
objects.
"""
