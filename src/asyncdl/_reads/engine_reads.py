"""The engine's reads that are not downloads nor streams: an object's HEAD, a listing's
pages, a whole (small) object into memory, many byte ranges of one object pinned to one
version, an object or a URL as a file to read at any offset. :class:`~asyncdl.Engine`
inherits them; each hands on to what does the work (``S3Object.head`` with retries,
``list_objects`` through the context, ``range_reads``, ``random_access``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any

from .._transfer.context import Context
from .._wire.adaptive import own_slots
from .._wire.request_args import ExtraArgs, check_bucket_and_key, check_extra_args
from .._wire.retry import with_retries
from ..config import is_int_at_least
from ..errors import DownloadError, InvalidRequestError
from ..object_info import ObjectInfo
from . import range_reads
from .random_access import FirstBlock, RandomAccessReader
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

    async def head(
        self, bucket: str, key: str, *, extra_args: ExtraArgs | None = None
    ) -> ObjectInfo:
        """One HEAD request (the object's size, ETag and headers), through the engine's
        budget; a missing object raises ``ObjectNotFoundError``.

        Args:
            bucket: The bucket's name.
            key: The object's key.
            extra_args: HeadObject's arguments among those :meth:`download` takes
                (``VersionId``, the ``SSECustomer...`` ones, ...).
        """
        ctx = self._context
        with own_slots():
            check_bucket_and_key(bucket, key)
            args = check_extra_args(extra_args, bucket=bucket, key=key)
            obj = ctx.s3_object(bucket, key, args)
            meta = await with_retries(
                ctx.config, obj.head, bucket=bucket, key=key, what="the HEAD", counters=ctx.counters
            )
        return ObjectInfo(meta.size, meta.etag, meta.headers)

    def list_pages(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        params: Mapping[str, object] | None = None,
    ) -> AsyncGenerator[dict[str, Any]]:
        """ListObjectsV2's pages of ``s3://bucket/prefix``, as the engine's own bulk
        downloads list: a page that fails is retried from its ContinuationToken, each
        page holds a slot of the budget (a throttled one lowers the adaptive limit) and
        is counted in :meth:`stats`. Close it (``contextlib.aclosing``) when stopping
        early: the next page is already asked for.

        Args:
            bucket: The bucket's name.
            prefix: The keys' prefix, as given (``"logs"`` also lists ``logs-old/``).
            delimiter: ListObjectsV2's ``Delimiter`` (``"/"`` for one level, with its
                ``CommonPrefixes``).
            params: ListObjectsV2's other arguments (``RequestPayer``,
                ``ExpectedBucketOwner``, ...).

        Yields:
            Each page, as aiobotocore returns it (``Contents``, ``CommonPrefixes``, ...).
        """
        return self._context.list_pages(bucket, prefix, delimiter=delimiter, params=params)

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
        later GET is pinned to that ETag. Reads go through an LRU cache of blocks, and
        fetch blocks ahead when they are sequential;
        :meth:`RandomAccessReader.read_ranges` reads many ranges at once. The guide
        *Random access* shows it with ``zipfile`` and ``pyarrow``.

        Args:
            bucket: The bucket's name.
            key: The object's key.
            block_size: Bytes per block, the unit of a GET and of the cache, from
                4 KiB to ``config.chunk_size``; 1 MiB (or the chunk size, if smaller)
                when not given.
            cache_blocks: Blocks the cache keeps, 1 to 10,000; 16 when not given.
                Memory is about ``block_size * cache_blocks`` per reader.
            extra_args: GetObject arguments, as for :meth:`download`.
            size: The object's size, when known (from a listing). Given with
                ``etag``, opening sends nothing, and the first read's GET is pinned
                already.
            etag: The object's ETag, when known; see ``size``.
            first_block: The block the opening GET asks for: ``"start"``, or
                ``"end"`` for the last one, so that the first read of a format that
                keeps its index at the end (a Parquet footer, a ZIP's central
                directory) needs no GET of its own.

        Returns:
            The reader, not yet open: ``async with`` it, or ``await`` it.
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
        """The whole object in memory, checked as a stream of the whole object is (the
        guide *Integrity* says against what).

        Args:
            bucket: The bucket's name.
            key: The object's key.
            max_size: The most bytes to hold: a larger object raises a
                :class:`DownloadError` (after at most ``max_size + 1`` bytes) instead
                of filling memory.
            extra_args: GetObject arguments, as for :meth:`download`.
        """
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
        """The bytes of each range, in the order given, all from one version of the
        object.

        ```python
        import asyncdl

        async with asyncdl.Engine() as engine:
            header, footer = await engine.read_ranges(
                "my-bucket", "tables/sales.parquet", [(0, 4), (925_550, 925_558)]
            )
        assert header == footer[-4:] == b"PAR1"
        ```

        The first GET brings the object's size and ETag (no HEAD); every other GET is
        pinned to that ETag with ``IfMatch``, so an object replaced meanwhile raises
        :class:`ObjectChangedError`, never a mixture. A range longer than
        ``max_request`` is fetched in parallel parts, as a download is. A range past
        the end raises :class:`InvalidRequestError`: before anything is sent when
        ``size`` is given, else as soon as the first answer tells the size, before any
        other GET. An answer with no strong ETag (none, or a weak one) pins nothing:
        the ranges then come in one GET from the first to the last (the bytes between
        are read and dropped), so that they still come from one version.

        Args:
            bucket: The bucket's name.
            key: The object's key.
            ranges: ``(start, end)`` pairs, half-open (``(0, 4)`` is the first four
                bytes), in any order, overlapping or not; an empty one
                (``start == end``) is ``b""``.
            extra_args: GetObject arguments, as for :meth:`download`.
            size: The object's size, when known (from a listing); with ``etag``,
                every GET is pinned from the first.
            etag: The object's ETag, when known; see ``size``.
            max_gap: Ranges at most this many bytes apart share one GET; 1 MiB when
                not given.
            max_request: The most bytes one GET asks for; ``config.chunk_size`` when
                not given, and at most that.

        Returns:
            The bytes of each range, in the order of ``ranges``.
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
        pinned with ``If-Match``, the URL's query never shown.

        Args:
            url: The URL, sent as given: it must already be percent-encoded.
            ranges: ``(start, end)`` pairs, as for :meth:`read_ranges`.
            size: What it serves' size, when known; see :meth:`read_ranges`.
            etag: Its ETag, when known.
            max_gap: As for :meth:`read_ranges`.
            max_request: As for :meth:`read_ranges`.
        """
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
        gives an object (see :meth:`download_url` for what a URL download does and
        shows).

        Args:
            url: The URL, sent as given: it must already be percent-encoded.
            block_size: As for :meth:`open_reader`.
            cache_blocks: As for :meth:`open_reader`.
            size: What it serves' size, when known; see :meth:`open_reader`.
            etag: Its ETag, when known.
            first_block: As for :meth:`open_reader`.
        """
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
