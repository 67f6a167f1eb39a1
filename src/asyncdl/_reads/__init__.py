"""Reading an object without downloading it to a file: as a stream of bytes in
order, as many byte ranges pinned to one version, as a file to read at any offset.

What it holds: the engine's reads that are neither downloads nor streams, which
:class:`~asyncdl.Engine` inherits (``engine_reads``); ``ObjectStream`` and its
parts fetched ahead of the reader (``streaming``, ``stream_parts``); many ranges of
one object, planned into few GETs and fetched (``range_plan``, ``range_reads``);
and ``RandomAccessReader`` with its blocking face for a worker thread
(``random_access``, ``sync_reader``).

What it may import: ``_transfer`` (the context, the part fetchers, verification),
``_wire`` and the public types at the top of the package.

What it never does: write a file (nothing here imports ``_files``), or import
``_bulk`` or the engine's module.
"""
