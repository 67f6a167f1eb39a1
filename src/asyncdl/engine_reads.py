"""The engine's reads that are not downloads nor streams: a whole (small) object into
memory, many byte ranges of one object pinned to one version, a URL as a file to
read at any offset. :class:`~asyncdl.Engine` inherits them; each hands on to the
module that does the work (``range_reads``, ``random_access``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from . import range_reads
from .adaptive import own_slots
from .config import is_int_at_least
from .context import Context
from .errors import DownloadError, InvalidRequestError
from .random_access import FirstBlock, RandomAccessReader
from .request_args import ExtraArgs
from .streaming import ObjectStream


class MemoryReads:
    """What :class:`~asyncdl.Engine` reads besides downloads and streams (its methods
    render there)."""

    @property
    def _context(self) -> Context:  # pragma: no cover - the engine's own replaces it
        raise NotImplementedError

    async def _open(self) -> None:  # pragma: no cover - the engine's own replaces it
        raise NotImplementedError

    async def open(self) -> None:
        """Open the engine (create the client if it owns one), as ``async with`` does:
        for a service that opens it at start-up and calls :meth:`aclose` at shutdown."""
        await self._open()

    def open_reader(
        self,
        bucket: str,
        key: str,
        *,
        block_size: int | None = None,
        cache_blocks: int | None = None,
        extra_args: ExtraArgs | None = None,
        size: int | None = None,
        etag: str | None = None,
        first_block: FirstBlock = "start",
    ) -> RandomAccessReader:
        """The object as a file to read at any offset, a :class:`RandomAccessReader`,
        used as ``async with engine.open_reader(bucket, key) as f:`` or
        ``f = await engine.open_reader(...)``.

        Opening sends one GET (no HEAD), which brings ``size`` and ``etag``; every
        later GET is pinned to that ETag. It asks for the first block, or with
        ``first_block="end"`` for the last one: the first read of a format that keeps
        its index at the end (a Parquet footer, a ZIP's central directory) then needs
        no GET of its own. Given both ``size`` and ``etag`` (from a listing), opening
        sends nothing and the first read's GET is pinned already. Reads go through an
        LRU cache of ``cache_blocks`` blocks of ``block_size`` bytes (default 16 of
        1 MiB), and fetch blocks ahead when they are sequential;
        :meth:`RandomAccessReader.read_ranges` reads many ranges at once. ``extra_args``
        as for :meth:`download`. The guide *Random access* shows it with ``zipfile``
        and ``pyarrow``.
        """
        return RandomAccessReader(
            self._context,
            bucket,
            key,
            block_size=block_size,
            cache_blocks=cache_blocks,
            extra_args=extra_args,
            size=size,
            etag=etag,
            first_block=first_block,
        )

    async def read_bytes(
        self,
        bucket: str,
        key: str,
        *,
        max_size: int = 64 * 1024 * 1024,
        extra_args: ExtraArgs | None = None,
    ) -> bytes:
        """The whole object in memory; an object larger than ``max_size`` raises a
        :class:`DownloadError` (after at most ``max_size + 1`` bytes) instead of
        filling memory."""
        if not is_int_at_least(max_size, 0):
            raise InvalidRequestError(
                f"max_size must be an int >= 0, got {max_size!r}", bucket=bucket, key=key
            )
        pieces: list[bytes] = []
        total = 0
        with own_slots():
            async with contextlib.aclosing(
                ObjectStream(
                    self._context, bucket, key, start=0, end=max_size + 1, extra_args=extra_args
                )
            ) as stream:
                async for piece in stream:
                    total += len(piece)
                    if total > max_size:
                        raise DownloadError(
                            f"object is larger than max_size={max_size} bytes; use "
                            "download() or stream() for it",
                            bucket=bucket,
                            key=key,
                        )
                    pieces.append(piece)
        return b"".join(pieces)

    async def read_ranges(
        self,
        bucket: str,
        key: str,
        ranges: Iterable[tuple[int, int]],
        *,
        extra_args: ExtraArgs | None = None,
        size: int | None = None,
        etag: str | None = None,
        max_gap: int | None = None,
        max_request: int | None = None,
    ) -> list[bytes]:
        """The bytes of each ``(start, end)`` of ``ranges`` (half-open: ``(0, 4)`` is the
        first four bytes), in the order given, all from one version of the object.

        ```python
        import asyncdl

        async with asyncdl.Engine() as engine:
            header, footer = await engine.read_ranges(
                "my-bucket", "tables/sales.parquet", [(0, 4), (925_550, 925_558)]
            )
        assert header == footer[-4:] == b"PAR1"
        ```

        Ranges may come in any order and overlap; an empty one (``start == end``) is
        ``b""``. Ranges at most ``max_gap`` bytes apart (default 1 MiB) share one GET
        of at most ``max_request`` bytes (default, and at most, ``config.chunk_size``);
        a longer range is fetched in parallel parts, as a download is. The first GET
        brings the object's size and ETag (no HEAD); every other GET is pinned to that
        ETag with ``IfMatch``, so an object replaced meanwhile raises
        :class:`ObjectChangedError`, never a mixture. With ``size`` and ``etag`` known
        (from a listing), every GET is pinned from the first.

        A range past the end raises :class:`InvalidRequestError`: before anything is
        sent when ``size`` is given, else as soon as the first answer tells the size,
        before any other GET. An answer with no strong ETag (none, or a weak one) pins
        nothing: the ranges then come in one GET from the first to the last (the bytes
        between are read and dropped), so that they still come from one version.
        ``extra_args`` as for :meth:`download`.
        """
        return await range_reads.read_ranges(
            self._context,
            bucket,
            key,
            ranges,
            extra_args=extra_args,
            size=size,
            etag=etag,
            max_gap=max_gap,
            max_request=max_request,
        )

    async def read_ranges_url(
        self,
        url: str,
        ranges: Iterable[tuple[int, int]],
        *,
        size: int | None = None,
        etag: str | None = None,
        max_gap: int | None = None,
        max_request: int | None = None,
    ) -> list[bytes]:
        """:meth:`read_ranges` of what ``url`` serves (a presigned S3 GET URL, or any
        HTTP(S) URL that honours Range), as :meth:`download_url` fetches it: unsigned,
        pinned with ``If-Match``, the URL's query never shown."""
        return await range_reads.read_ranges(
            self._context,
            "",
            "",
            ranges,
            extra_args=None,
            size=size,
            etag=etag,
            max_gap=max_gap,
            max_request=max_request,
            url=url,
        )

    def open_reader_url(
        self,
        url: str,
        *,
        block_size: int | None = None,
        cache_blocks: int | None = None,
        size: int | None = None,
        etag: str | None = None,
        first_block: FirstBlock = "start",
    ) -> RandomAccessReader:
        """What ``url`` serves as a file to read at any offset, as :meth:`open_reader`
        gives an object (see :meth:`download_url` for what a URL download does and shows)."""
        return RandomAccessReader(
            self._context,
            "",
            "",
            block_size=block_size,
            cache_blocks=cache_blocks,
            extra_args=None,
            size=size,
            etag=etag,
            first_block=first_block,
            url=url,
        )
