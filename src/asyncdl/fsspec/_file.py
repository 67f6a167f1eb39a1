"""A file of asyncdl's fsspec file system opened for reading: fsspec's buffered file
over the engine's random-access reader (``Engine.open_reader``).

Opening sends the reader's one GET (no HEAD): it brings the size and the ETag every
later GET is pinned to, so whatever the file gives comes from one version of the
object, or the read fails with ``ObjectChangedError`` (and the file system forgets
the size and ETag it had of the object, so that the next open reads the new
version). fsspec's cache types map onto the reader's own block cache, so bytes are
cached once: ``"readahead"`` is a cache
of two blocks (the one being read and the one fetched ahead of a sequential read),
``"blocks"`` one of ``maxblocks`` blocks (fsspec's default, 32). Any other cache
type is fsspec's own, over a reader that keeps one block.
"""

from __future__ import annotations

from typing import Any

from fsspec.asyn import sync
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from .._reads.random_access import MIN_BLOCK_SIZE, FirstBlock, RandomAccessReader
from ..config import MiB
from ._paths import split, translated

#: The reader's block when the caller names none: as the engine's reader.
DEFAULT_BLOCK_SIZE = 1 * MiB
#: fsspec's BlockCache keeps this many blocks unless told.
DEFAULT_MAX_BLOCKS = 32
#: Names of formats that keep their index at the end of the file: their first read
#: is there, so the opening GET asks for the last block instead of the first.
INDEX_AT_END = (".parquet", ".parq", ".pq", ".orc", ".zip", ".feather", ".arrow")


def reader_settings(
    block_size: object, cache_type: str, cache_options: dict[str, Any], chunk_size: int
) -> tuple[int, int, str]:
    """The reader's block size and number of blocks, and the fsspec cache type on top
    of it. A block size outside what the reader takes (4 KiB to the engine's
    ``chunk_size``) is brought within it: callers pass fsspec's and s3fs's defaults
    (5 MiB, 50 MiB) without knowing the engine's bounds."""
    if block_size is None or block_size == "default":
        block = DEFAULT_BLOCK_SIZE
    elif isinstance(block_size, int) and not isinstance(block_size, bool) and block_size > 0:
        block = block_size
    else:
        raise ValueError(f"block_size must be an int > 0, got {block_size!r}")
    block = max(MIN_BLOCK_SIZE, min(block, chunk_size))
    if cache_type == "readahead":
        return block, 2, "none"
    if cache_type == "blocks":
        blocks = cache_options.pop("maxblocks", DEFAULT_MAX_BLOCKS)
        if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 1:
            raise ValueError(f"maxblocks must be an int > 0, got {blocks!r}")
        return block, blocks, "none"
    return block, 1, cache_type


class AsyncdlFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    """An object opened with ``fs.open(path, "rb")``: a binary file (``read``,
    ``seek``, ``tell``, ``readinto``...) whose every GET is pinned to :attr:`etag`."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        path: str,
        *,
        block_size: object = None,
        cache_type: str = "readahead",
        cache_options: dict[str, Any] | None = None,
        first_block: FirstBlock | None = None,
        pinned: tuple[int, str] | None = None,
        whole: bytes | None = None,
        **kwargs: Any,
    ) -> None:
        self._asked = (block_size, cache_type, dict(cache_options or {}), first_block)
        options = dict(cache_options or {})
        bucket, key = split(path)
        chunk = fs.chunk_size
        block, blocks, outer = reader_settings(block_size, cache_type, options, chunk)
        if first_block is None:
            first_block = "end" if key.lower().endswith(INDEX_AT_END) else "start"
        reader = None
        if whole is not None:
            size = len(whole)
        else:
            with translated(path, forget=fs._forget(path)):
                reader = sync(
                    fs.loop,
                    fs.open_reader,
                    bucket,
                    key,
                    block,
                    blocks,
                    first_block=first_block,
                    pinned=pinned,
                )
            size = reader.size
        self._reader: RandomAccessReader | None = reader
        #: The object's bytes, when this file was unpickled from one of an object that
        #: had no ETag (it read them whole as it opened): read from here, no GET.
        self._whole = whole
        #: The ETag every GET of this file is pinned to (``None`` only for an object
        #: that came whole in the opening GET from a server that sent none).
        self.etag: str | None = None if reader is None else reader.etag
        super().__init__(
            fs,
            path,
            mode="rb",
            block_size=block,
            cache_type=outer,
            cache_options=options,
            size=size,
            **kwargs,
        )

    def _fetch_range(self, start: int, end: int) -> bytes:
        if self._whole is not None:
            return self._whole[start:end]
        reader = self._reader
        if reader is None:
            raise ValueError(f"{self.path}: I/O operation on a closed file")
        with translated(self.path, forget=self.fs._forget(self.path)):
            data: bytes = sync(self.fs.loop, reader.read_at, start, end - start)
        return data

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (Dask sends open files to its workers): unpickled, the file reads
        the version it was opened on, from where it was, with no GET to open it; an
        object replaced meanwhile fails its first read with ``ObjectChangedError``.
        A file of an object that had no ETag (it came whole as the file opened) takes
        its bytes with it. (fsspec's own pickling opens the object again: whatever
        version is there.)"""
        if self.closed:
            raise ValueError(f"{self.path}: cannot pickle a closed file")
        if self.etag is None:
            # Nothing to pin a reopened file to: the object came whole in the opening
            # answer (one block at most, or the open failed), so its bytes go with it.
            whole = self._fetch_range(0, self.size)  # from the opening answer: no GET
            return _reopen, (self.fs, self.path, self._asked, whole, self.loc)
        return _reopen, (self.fs, self.path, self._asked, (self.size, self.etag), self.loc)

    def close(self) -> None:
        """Close the file. The reader holds no connection nor slot between reads: it
        is dropped, its cached blocks with it."""
        super().close()
        self._whole = None
        reader, self._reader = self._reader, None
        if reader is not None and not self.fs.loop.is_closed():
            # The bytes a long read fetched ahead are no one's now.
            self.fs.loop.call_soon_threadsafe(reader.cancel_ahead)


def _reopen(
    fs: AbstractFileSystem,
    path: str,
    asked: tuple[object, str, dict[str, Any], FirstBlock | None],
    kept: tuple[int, str] | bytes,
    loc: int,
) -> AsyncdlFile:
    """A pickled :class:`AsyncdlFile` opened again: pinned to its size and ETag, or, of
    an object with no ETag, on the bytes it read (``kept``)."""
    block_size, cache_type, cache_options, first_block = asked
    file = AsyncdlFile(
        fs,
        path,
        block_size=block_size,
        cache_type=cache_type,
        cache_options=cache_options,
        first_block=first_block,
        pinned=None if isinstance(kept, bytes) else kept,
        whole=kept if isinstance(kept, bytes) else None,
    )
    file.seek(loc)
    return file
