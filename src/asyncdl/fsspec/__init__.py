"""asyncdl as an fsspec file system: what pandas, pyarrow, Dask and Zarr read S3
through. ``fsspec.filesystem("asyncdl")`` and ``asyncdl://bucket/key`` URLs reach
:class:`AsyncdlFileSystem` (fsspec finds it through asyncdl's ``fsspec.specs`` entry
point); :func:`register_as_s3` routes ``s3://`` to it for the whole program.

The file system is read-only: listings (``ls``, ``info``, ``find``, ``glob``, ``du``),
whole objects (``cat_file``: one GET for a small object, checked against S3's
checksum as the engine checks), ranges (``cat_file(start, end)``, ``cat_ranges``:
joined into few GETs pinned to one version), copies (``get``, through
``Engine.download``) and files (``open(path, "rb")``, on the engine's random-access
reader). Writes raise ``PermissionError`` saying so. The guide *pandas, pyarrow, Dask
and Zarr* shows each reader.
"""

from __future__ import annotations

import fsspec

from ._file import AsyncdlFile
from ._filesystem import AsyncdlFileSystem

__all__ = ["AsyncdlFile", "AsyncdlFileSystem", "register_as_s3"]


def register_as_s3() -> None:
    """Route ``s3://`` (and ``s3a://``) URLs to :class:`AsyncdlFileSystem` in this
    process, in place of s3fs: ``pd.read_parquet("s3://bucket/key")`` then reads
    through asyncdl's engine. Call it once, before the first ``s3://`` file system is
    made (fsspec keeps the ones already made)."""
    for scheme in ("s3", "s3a"):
        fsspec.register_implementation(scheme, AsyncdlFileSystem, clobber=True)
