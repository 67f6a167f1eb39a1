"""The engine: one client, one concurrency budget, and a coordinator per download.

A download runs as: validate the request (nothing sent, nothing on disk yet) →
discover size and ETag (the strategy) → create the preallocated temp file →
fetch the parts into it, each pinned with ``IfMatch`` → rename onto the target.
The coordinator never holds a slot of the engine's budget while it waits for one,
so a download cannot deadlock itself whatever the concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiofiles.os import wrap

from . import bulk
from .bulk import DownloadItem
from .checksums import ExpectedChecksum, parse_checksum
from .clients import create_default_client
from .config import TransferConfig, finite, is_int_at_least
from .errors import (
    ChecksumError,
    DownloadError,
    InvalidRequestError,
    ObjectChangedError,
    RetryableError,
    translate,
)
from .progress import ProgressCallback, Reporter, with_total
from .ranges import ByteRange, plan_ranges
from .request_args import ExtraArgs, check_bucket_and_key, check_extra_args
from .results import DownloadResult
from .retry import after_failure, logger
from .s3_source import ObjectMeta, Response, S3Object, normalize_etag
from .signed_get import SignedGets
from .strategies import Discovery, Strategy, resolve_strategy
from .streaming import ObjectStream
from .verify import Verification, Verifier
from .writer import TempFile


@dataclass(frozen=True, slots=True)
class _Transfer:
    """What every part of one download shares."""

    obj: S3Object
    #: The temp file, or any sink with ``async write(offset, data)`` (streaming).
    temp: Any
    etag: str | None
    size: int
    verifier: Verifier
    progress: Reporter
    #: Whether bytes written can be taken back (a file can be rewritten; a stream's
    #: bytes are gone to the reader): an unpinned part (no ETag) is then started over
    #: after a failure, else the failure ends it.
    rewritable: bool = True


@dataclass(slots=True)
class _Part:
    """A byte range still to be written; ``pos`` advances as bytes reach the file,
    ``crc`` (when the download verifies a CRC) over ``[start, pos)``."""

    start: int
    end: int
    pos: int = -1
    crc: int = 0
    #: The CRC this part feeds, fixed before its first byte (``None``: computed later
    #: from the file if a CRC checksum turns up).
    crc_fn: Callable[[bytes, int], int] | None = None

    def __post_init__(self) -> None:
        if self.pos < 0:
            self.pos = self.start


class Engine:
    """Downloads S3 objects to files through one client and one concurrency budget.

    Use it as ``async with Engine() as engine:``. Without ``client`` the engine
    creates one from the default aiobotocore session (standard AWS environment and
    config files) and closes it on exit; a client passed in is borrowed, never closed.
    """

    def __init__(self, client: Any = None, *, config: TransferConfig | None = None) -> None:
        if config is not None and not isinstance(config, TransferConfig):
            raise ValueError(f"config must be a TransferConfig, got {config!r}")
        self.config = config or TransferConfig()
        self._client = client
        self._owns_client = client is None
        self._stack = AsyncExitStack()
        self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        self._signed: SignedGets | None = None
        #: Whether the server answers PartNumber GETs with the part (``None``: not
        #: asked yet). One engine talks to one endpoint, so asking once is enough.
        self._part_gets: bool | None = None
        self._open = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Create the client if the engine owns one. Called by ``async with``."""
        if self._open:
            return
        if self._owns_client:
            self._client = await create_default_client(self._stack, self.config)
        if self.config.lean_get:
            verifies = self.config.validate != "off"
            self._signed = SignedGets.for_client(self._client, verifies=verifies)
        self._open = True

    async def aclose(self) -> None:
        """Close the client the engine created (a borrowed one stays open)."""
        self._open = False
        self._signed = None
        await self._stack.aclose()
        if self._owns_client:
            self._client = None

    @property
    def client(self) -> Any:
        """The aiobotocore S3 client in use."""
        if not self._open or self._client is None:
            raise RuntimeError("the Engine is not open: use 'async with Engine() as engine:'")
        return self._client

    async def download(
        self,
        bucket: str,
        key: str,
        path: str | os.PathLike[str],
        *,
        strategy: str | Strategy = "auto",
        extra_args: ExtraArgs | None = None,
        size: int | None = None,
        etag: str | None = None,
        timeout: float | None = None,
        checksum: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Download ``s3://bucket/key`` to ``path``.

        ``progress(delta, total)`` or ``progress(delta)`` (sync or async, as boto3's
        ``Callback`` and tqdm's ``update``) is called as bytes reach the file, with the
        object's size as ``total``; bytes a download discards are reported back as a
        negative delta.

        ``checksum`` (``"CRC64NVME:base64..."``) is S3's checksum of the object when
        the caller knows it; the bytes are checked against it per ``config.validate``.

        ``timeout`` bounds the whole download, in seconds (retries and backoff
        included); when it runs out the download is cancelled and cleaned up and a
        ``DownloadError`` says so.

        ``size`` and ``etag``, when both known (from a listing, say), replace the
        discovery request: every GET is pinned from the first byte. The target is
        replaced atomically, only once every byte is on disk; on failure it is left
        as it was and no temp file remains.
        """
        client = self.client
        check_bucket_and_key(bucket, key)
        args = check_extra_args(extra_args, bucket=bucket, key=key)
        target: Path = await _check_target_off_loop(path, bucket=bucket, key=key)
        if size is not None and not is_int_at_least(size, 0):
            raise InvalidRequestError(
                f"size must be an int >= 0, got {size!r}", bucket=bucket, key=key
            )
        if etag is not None:
            if not isinstance(etag, str) or not etag:
                raise InvalidRequestError(
                    f"etag must be a non-empty string, got {etag!r}", bucket=bucket, key=key
                )
            etag = normalize_etag(etag)
        try:
            chosen = resolve_strategy(strategy, client)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), bucket=bucket, key=key) from None
        if timeout is not None and (not finite(timeout) or timeout <= 0):
            raise InvalidRequestError(
                f"timeout must be a number of seconds > 0, got {timeout!r}", bucket=bucket, key=key
            )
        expected = None
        if checksum is not None:
            try:
                expected = parse_checksum(checksum)
            except (ValueError, AttributeError) as exc:
                raise InvalidRequestError(str(exc), bucket=bucket, key=key) from None
        obj = self.s3_object(bucket, key, args)
        reporter = Reporter(progress)
        deadline = asyncio.timeout(timeout)
        temp: TempFile | None = None
        try:
            async with deadline:
                discovery, verification, temp = await self._download_verified(
                    obj,
                    strategy=chosen,
                    target=target,
                    size=size,
                    etag=etag,
                    expected=expected,
                    progress=reporter,
                )
            # Every byte is in and checked: publishing is the last step, outside the
            # timeout, and once started it completes even if the task is cancelled (a
            # cancellation then propagates with the target already replaced).
            await temp.commit()
        except Exception as exc:
            if temp is not None:
                temp.discard()
            await reporter.rewind()  # nothing of it was kept
            if isinstance(exc, TimeoutError) and deadline.expired():
                error = DownloadError(f"did not finish within {timeout:g}s", bucket=bucket, key=key)
            else:
                error = translate(exc, bucket=bucket, key=key)
            if temp is not None and temp.published:
                # Only the fsync of the directory after the rename can fail so late.
                error = DownloadError(
                    f"{str(target)!r} was replaced, but then: {error.message}",
                    bucket=bucket,
                    key=key,
                )
            error.requests = obj.requests
            if error is exc:
                raise
            raise error from exc
        except BaseException:
            if temp is not None:
                temp.discard()  # a no-op once the commit began
            raise
        return DownloadResult(
            bucket=bucket,
            key=key,
            path=target,
            size=discovery.size,
            etag=discovery.etag,
            strategy=chosen.name,
            requests=obj.requests,
            checksum=verification.checksum,
            verified=verification.verified,
            unverified_reason=verification.reason,
        )

    async def _download_verified(
        self,
        obj: S3Object,
        *,
        strategy: Strategy,
        target: Path,
        size: int | None,
        etag: str | None,
        expected: ExpectedChecksum | None,
        progress: Reporter,
    ) -> tuple[Discovery, Verification, TempFile]:
        """Discover and fetch into a verified temp file, not yet published; after a
        checksum mismatch, one fresh attempt at most, pinned to the same ETag (a
        mismatch is not retried blindly)."""
        discovery = await self._discover(obj, strategy, size, etag, expected)
        # No await from here until _fetch holds the open first answer and the checksum
        # HEAD under its cleanup: a cancellation in between would leak them.
        verifier = Verifier(self.config.validate, expected or discovery.checksum)
        verifier.pending, discovery.checksum_head = discovery.checksum_head, None
        progress.total = discovery.size
        try:
            return discovery, *await self._fetch(obj, discovery, target, verifier, progress)
        except ChecksumError as exc:
            if not exc.mismatch or discovery.etag is None or verifier.policy == "off":
                raise
            logger.info(
                "checksum mismatch on s3://%s/%s; one fresh attempt at ETag %s: %s",
                obj.bucket,
                obj.key,
                discovery.etag,
                exc.message,
            )
        await progress.rewind()  # the fresh attempt fetches every byte again
        fresh = Discovery(size=discovery.size, etag=discovery.etag)
        verifier = Verifier(self.config.validate, verifier.expected)
        return fresh, *await self._fetch(obj, fresh, target, verifier, progress)

    def s3_object(self, bucket: str, key: str, extra_args: ExtraArgs) -> S3Object:
        """The requests of one object through this engine's client and budget."""
        return S3Object(
            self.client,
            self._semaphore,
            bucket,
            key,
            extra_args,
            signed=self._signed,
            checksum_mode=self.config.validate != "off",
        )

    def stream(
        self,
        bucket: str,
        key: str,
        *,
        start: int = 0,
        end: int | None = None,
        extra_args: ExtraArgs | None = None,
        progress: ProgressCallback | None = None,
    ) -> ObjectStream:
        """The bytes ``[start, end)`` of the object, in order, as they arrive.

        Parts are fetched concurrently (``config.stream_prefetch`` ahead of the
        reader, pinned with ``IfMatch``), so memory stays about
        ``stream_prefetch * chunk_size``. Closing it (``aclose()``, ``async with``)
        releases the first answer and cancels the prefetch, whether or not anything was
        read.
        ``await stream.open()`` sends the first request and sets ``size``, ``etag``
        and ``length`` before any byte is read (a web handler's headers, or its 404).
        """
        return ObjectStream(
            self, bucket, key, start=start, end=end, extra_args=extra_args, progress=progress
        )

    async def read_bytes(
        self,
        bucket: str,
        key: str,
        *,
        max_size: int = 64 * 1024 * 1024,
        extra_args: ExtraArgs | None = None,
    ) -> bytes:
        """The whole object in memory; an object larger than ``max_size`` is refused
        (after at most ``max_size + 1`` bytes) instead of filling memory."""
        if not is_int_at_least(max_size, 0):
            raise InvalidRequestError(
                f"max_size must be an int >= 0, got {max_size!r}", bucket=bucket, key=key
            )
        pieces: list[bytes] = []
        total = 0
        async with contextlib.aclosing(
            self.stream(bucket, key, end=max_size + 1, extra_args=extra_args)
        ) as stream:
            async for piece in stream:
                total += len(piece)
                if total > max_size:
                    raise DownloadError(
                        f"object is larger than max_size={max_size} bytes; use download() "
                        "or stream() for it",
                        bucket=bucket,
                        key=key,
                    )
                pieces.append(piece)
        return b"".join(pieces)

    async def fetch_into(
        self,
        sink: Any,
        obj: S3Object,
        *,
        etag: str | None,
        size: int,
        start: int,
        end: int,
        response: Response | None,
    ) -> None:
        """Fetch bytes ``[start, end)`` into ``sink`` (anything with ``write(offset,
        data)``, each byte once), with the same retries and resumption as a download's
        parts; without an ETag to pin a resumed range to, a failure ends it."""
        transfer = _Transfer(
            obj, sink, etag, size, Verifier("off", None), Reporter(None), rewritable=False
        )
        await self._fetch_part(transfer, _Part(start, end), response)

    def download_many(
        self,
        items: Iterable[DownloadItem] | AsyncIterable[DownloadItem],
        *,
        strategy: str | Strategy = "auto",
        extra_args: ExtraArgs | None = None,
        timeout: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> AsyncGenerator[DownloadResult]:
        """Download every item; yield one result per item, in completion order.

        ``items`` are ``(bucket, key, path)`` tuples or :class:`DownloadRequest`
        objects, from any iterable or async iterable, pulled only as slots free up.
        A failed item yields a result whose ``error`` holds the ``DownloadError``;
        the batch goes on. ``extra_args`` apply to items that carry none of their own.
        Leaving the loop early cancels what is in flight and removes its temp files
        (at once with ``contextlib.aclosing``, else when the iterator is collected).
        """
        return bulk.download_many(
            self,
            items,
            strategy=strategy,
            extra_args=extra_args,
            timeout=timeout,
            progress=with_total(progress) if progress is not None else None,
        )

    def download_prefix(
        self,
        bucket: str,
        prefix: str,
        dest_dir: str | os.PathLike[str],
        *,
        strategy: str | Strategy = "auto",
        extra_args: ExtraArgs | None = None,
        timeout: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> AsyncGenerator[DownloadResult]:
        """Download every object under ``s3://bucket/prefix`` into ``dest_dir``.

        A ``prefix`` that does not end in ``/`` is the folder: ``"logs"`` means
        ``logs/``, as in ``asyncdl cp -r`` (not ``logsa`` nor ``logs2/a``).
        Lists with ListObjectsV2 page by page while downloading (a failed page is
        retried as a GET is); each listed size and ETag is passed on, so no object
        needs a discovery request and every GET is pinned. A key that would land
        outside ``dest_dir``, or on a path an earlier key of the listing holds
        (``p/x`` and ``p/x/y``: a file and a directory), is refused and reported as
        that item's error; folder markers (``.../`` of size 0) are skipped.
        """
        return bulk.download_prefix(
            self,
            bucket,
            prefix,
            dest_dir,
            strategy=strategy,
            extra_args=extra_args,
            timeout=timeout,
            progress=with_total(progress) if progress is not None else None,
        )

    async def _discover(
        self,
        obj: S3Object,
        strategy: Strategy,
        size: int | None,
        etag: str | None,
        expected: ExpectedChecksum | None,
    ) -> Discovery:
        """Size and ETag (from the caller, or the strategy's first request), and the
        checksum HEAD when the policy needs one that the GETs will not carry.

        The HEAD goes out alongside the first GET, so latency stays one round trip, and
        nothing waits for it until every part is written: a part holding a slot of the
        budget while it waited for the HEAD's slot could deadlock the engine. The open
        first answer and the HEAD are handed on unawaited (the caller releases both).
        """
        head = None
        if self._needs_checksum_head(strategy, size, etag, expected):
            head = asyncio.create_task(self._head_with_retries(obj, etag))
        if size is not None and etag is not None:
            return Discovery(size=size, etag=etag, checksum_head=head)
        try:
            discovery = await self._discover_with_retries(obj, strategy, size, etag)
        except BaseException:
            if head is not None:
                await _reap(head)
            raise
        discovery.checksum_head = head
        return discovery

    def _needs_checksum_head(
        self, strategy: Strategy, size: int | None, etag: str | None, expected: Any
    ) -> bool:
        """Only ``validate="required"`` sends a request just for S3's checksum: when it
        is not known already and the GETs may not carry it (ranged GETs carry none)."""
        if self.config.validate != "required" or expected is not None:
            return False
        if size is not None and etag is not None:
            # Listed: one plain GET carries the checksum, unless the object takes several
            # requests, or is multipart (a COMPOSITE checksum is checked along its parts).
            return size > self.config.chunk_size or _multipart(etag)
        # HEAD-first's own HEAD asks for the checksum.
        return strategy.name == "get-first"

    async def _discover_with_retries(
        self, obj: S3Object, strategy: Strategy, size: int | None, etag: str | None
    ) -> Discovery:
        failures = 0
        while True:
            try:
                return await strategy.discover(
                    obj, chunk_size=self.config.chunk_size, size=size, etag=etag
                )
            except Exception as exc:
                failures = await self._after_failure(obj, exc, failures, "discovery")

    async def _head_with_retries(self, obj: S3Object, etag: str | None) -> ObjectMeta:
        failures = 0
        while True:
            try:
                return await obj.head(if_match=etag)
            except Exception as exc:
                failures = await self._after_failure(obj, exc, failures, "the checksum HEAD")

    async def _after_failure(self, obj: S3Object, exc: Exception, failures: int, what: str) -> int:
        """Raise ``exc`` as a DownloadError unless it earns another attempt; then back off."""
        return await after_failure(
            self.config, exc, failures, bucket=obj.bucket, key=obj.key, what=what
        )

    async def _fetch(
        self,
        obj: S3Object,
        discovery: Discovery,
        target: Path,
        verifier: Verifier,
        progress: Reporter,
    ) -> tuple[Verification, TempFile]:
        """Write every byte of the object into a temp file and check it; the caller
        publishes it. On any failure the temp file is gone."""
        config = self.config
        first, size, etag = discovery.first, discovery.size, discovery.etag
        temp: TempFile | None = None
        try:
            # Held before any await, so a cancelled create is still cleaned up.
            temp = TempFile(target, size, fsync=config.fsync)
            if verifier.pending is not None and discovery.checksum is not None:
                # The answer was the whole object and brought the checksum: the HEAD
                # sent for it is not needed.
                await verifier.abandon()
            if first is None and verifier.pending is not None and _multipart(etag):
                # Listed multipart object: whether its checksum is COMPOSITE decides how
                # it is fetched, so the HEAD is awaited first (no slot is held meanwhile).
                await verifier.settle(obj, etag)
            # One response holds the whole object (the open first one, or one plain GET,
            # which works for empty objects where any Range is a 416): no part tasks.
            whole_in_first = first is not None and discovery.first_end == size
            one_plain_get = (
                first is None
                and not discovery.complete
                and size <= config.chunk_size
                # A COMPOSITE checksum is checked only along upload parts, not in one GET.
                and not (verifier.wants_parts and size > 0)
            )
            if etag is None and not (whole_in_first or discovery.complete):
                # Without an ETag no request can be pinned to the version the others
                # fetched: one GET of the whole object is the only consistent answer
                # (a retry starts it over, see _fetch_part).
                logger.info(
                    "s3://%s/%s: the server sent no ETag, so ranged GETs cannot be pinned "
                    "to one version of the object; fetching it in one GET",
                    obj.bucket,
                    obj.key,
                )
                if first is not None:
                    first.close()
                    first = None
                one_plain_get = True
            if not (whole_in_first or one_plain_get or discovery.complete) or (
                size > config.write_size
            ):
                await temp.open()
            # Otherwise one sequential writer, small enough for one write: the file is
            # created, written, closed and renamed in one executor hop, not three.
            transfer = _Transfer(obj, temp, etag, size, verifier, progress)
            if whole_in_first:
                response, first = first, None
                await self._fetch_part(transfer, _Part(0, size, crc_fn=verifier.crc), response)
            elif one_plain_get:
                await self._fetch_part(transfer, _Part(0, size, crc_fn=verifier.crc), None)
            elif not discovery.complete:
                first, opened = None, first
                await self._fetch_body(transfer, opened, discovery.first_end)
            return await verifier.finish(temp, obj, etag), temp
        except BaseException as exc:
            if first is not None:
                first.close()
            if temp is not None:
                temp.discard()
            await verifier.abandon()
            if isinstance(exc, BaseExceptionGroup):
                failure = _first_failure(exc)
                # Keep the failure's own cause; the group around it is noise.
                raise failure from failure.__cause__
            raise

    async def _fetch_body(
        self, transfer: _Transfer, first: Response | None, first_end: int
    ) -> None:
        """Fetch an object of more than one request: by byte ranges, or along its upload
        parts when only those can check its COMPOSITE checksum."""
        verifier = transfer.verifier
        offset = 0
        if first is not None and (
            verifier.wants_parts or (verifier.pending is not None and _multipart(transfer.etag))
        ):
            # The first answer's bytes are on their way: write them (which frees its
            # slot), then learn from the HEAD sent with it whether a multipart object's
            # checksum is COMPOSITE before choosing how to fetch the rest.
            opened, first = first, None
            await self._fetch_part(transfer, _Part(0, first_end, crc_fn=verifier.crc), opened)
            offset = first_end
            await verifier.settle(transfer.obj, transfer.etag)
        if verifier.wants_parts:
            if await self._fetch_by_part_number(transfer, offset):
                return
            # Fail before the bytes, not after them, when nothing could check them.
            verifier.refuse_if_uncheckable(transfer.obj)
        await self._fetch_parts(transfer, first, first_end, offset)

    async def _fetch_by_part_number(self, transfer: _Transfer, written: int) -> bool:
        """Fetch every upload part with ``PartNumber`` GETs, in parallel; ``False`` (and
        nothing written) when the server does not answer them part by part."""
        verifier = transfer.verifier
        if self._part_gets is False:
            verifier.parts_reason = _NO_PART_GETS
            return False
        first = await self._request_numbered(transfer, 1, probe=True)
        if first is None:
            self._part_gets = False
            verifier.parts_reason = _NO_PART_GETS
            return False
        self._part_gets = True
        # Bytes written before the parts were known are fetched again with part 1.
        await transfer.progress.add(-written)
        verifier.start_parts()
        count = first.parts_count or 1
        window = asyncio.Semaphore(self.config.max_concurrency)
        try:
            async with asyncio.TaskGroup() as tasks:
                await window.acquire()
                tasks.create_task(self._run_numbered(transfer, 1, first, window))
                first = None  # the task owns it now
                for number in range(2, count + 1):
                    await window.acquire()
                    tasks.create_task(self._run_numbered(transfer, number, None, window))
        finally:
            if first is not None:
                first.close()
        return True

    async def _request_numbered(
        self, transfer: _Transfer, number: int, *, probe: bool = False
    ) -> Response | None:
        """GET upload part ``number``, with retries; on a ``probe``, ``None`` when the
        server answers with anything but that part."""
        obj, verifier = transfer.obj, transfer.verifier
        expected = verifier.expected
        assert expected is not None
        failures = 0
        while True:
            try:
                response = await obj.get_part(number, if_match=transfer.etag)
            except Exception as exc:
                failures = await self._after_failure(obj, exc, failures, f"upload part {number}")
                continue
            content_range, count = response.content_range, response.parts_count
            if response.status == 206 and content_range is not None and count is not None:
                break
            response.close()
            if probe:
                return None
            raise obj.error(
                f"upload part {number}: expected the part, got HTTP {response.status} "
                f"with Content-Range {content_range} and parts count {count}"
            )
        if content_range.total != transfer.size:
            response.close()
            raise obj.error(
                f"object size changed from {transfer.size} to {content_range.total}",
                ObjectChangedError,
            )
        if expected.parts and count != expected.parts:
            response.close()
            raise ChecksumError(
                f"the object has {count} upload parts; its COMPOSITE checksum {expected} "
                f"says {expected.parts}",
                bucket=obj.bucket,
                key=obj.key,
                mismatch=False,
            )
        return response

    async def _run_numbered(
        self,
        transfer: _Transfer,
        number: int,
        response: Response | None,
        window: asyncio.Semaphore,
    ) -> None:
        try:
            if response is None:
                response = await self._request_numbered(transfer, number)
                assert response is not None
            content_range = response.content_range
            assert content_range is not None
            transfer.verifier.note_part(
                number, content_range.start, content_range.end, response.part_checksum
            )
            part = _Part(content_range.start, content_range.end, crc_fn=transfer.verifier.crc)
            opened, response = response, None
            # A retry of a cut part resumes with a pinned Range GET: its bounds are known.
            await self._fetch_part(transfer, part, opened)
        finally:
            if response is not None:
                response.close()
            window.release()

    async def _fetch_parts(
        self, transfer: _Transfer, first: Response | None, first_end: int, offset: int = 0
    ) -> None:
        """Fetch a multi-part object: the open first response, then the rest in parallel
        (from ``offset``: bytes before it are already written)."""
        config = self.config
        # Bounds this download's part tasks; the shared budget is taken per request.
        window = asyncio.Semaphore(config.max_concurrency)
        try:
            async with asyncio.TaskGroup() as tasks:
                if first is not None:
                    await window.acquire()
                    part = _Part(0, first_end, crc_fn=transfer.verifier.crc)
                    tasks.create_task(self._run_part(transfer, part, first, window))
                    first = None  # the task owns it now
                    offset = first_end
                for byte_range in plan_ranges(transfer.size, config.chunk_size, offset):
                    await window.acquire()
                    part = _Part(byte_range.start, byte_range.end, crc_fn=transfer.verifier.crc)
                    tasks.create_task(self._run_part(transfer, part, None, window))
        finally:
            if first is not None:
                first.close()

    async def _run_part(
        self,
        transfer: _Transfer,
        part: _Part,
        response: Response | None,
        window: asyncio.Semaphore,
    ) -> None:
        try:
            await self._fetch_part(transfer, part, response)
        finally:
            window.release()

    async def _fetch_part(
        self, transfer: _Transfer, part: _Part, response: Response | None
    ) -> None:
        """Fetch ``part``; a retry resumes from the last byte written.

        Attempts count failures in a row: an attempt that moved a fair share of the
        part (``_earns_a_reset``) starts the count again, so a long transfer survives
        occasional cuts, while a link that cuts every few bytes still runs out. Without
        an ETag nothing pins a resumed range to the same version: a retry starts over.
        """
        whole = part.pos == 0 and part.end == transfer.size and response is None
        pinned = transfer.etag is not None
        failures = 0
        mark = part.pos
        while True:
            try:
                if response is None:
                    response = await self._request_part(transfer, part, whole=whole)
                if part.pos == 0 and part.end == transfer.size:
                    # A whole-object answer carries S3's checksum: known before the body.
                    transfer.verifier.adopt(response.checksum)
                    part.crc_fn = transfer.verifier.crc
                await self._drain(transfer, response, part)
            except Exception as exc:
                if not pinned and not transfer.rewritable and part.pos > part.start:
                    raise translate(exc, bucket=transfer.obj.bucket, key=transfer.obj.key) from exc
                if pinned and part.pos - mark >= _earns_a_reset(part):
                    failures = 0
                failures = await self._after_failure(transfer.obj, exc, failures, "a part")
                if not pinned and part.pos > part.start:
                    await transfer.progress.add(part.start - part.pos)
                    part.pos, part.crc = part.start, 0
                mark = part.pos
            finally:
                if response is not None:
                    response.close()
                    response = None
            if part.pos >= part.end:
                crc = part.crc if part.crc_fn is not None else None
                transfer.verifier.add_part(part.start, part.end, crc)
                return
            # Until a byte is written, a retry asks for the whole object again (an
            # empty object has no valid Range); after that it resumes with a range.
            whole = whole and part.pos == 0

    async def _request_part(self, transfer: _Transfer, part: _Part, *, whole: bool) -> Response:
        obj, etag, size = transfer.obj, transfer.etag, transfer.size
        if whole:
            response = await obj.get(None, if_match=etag)
            if response.status != 200 or response.content_length != size:
                response.close()
                raise obj.error(
                    f"expected {size} bytes, got HTTP {response.status} with "
                    f"{response.content_length} bytes",
                    ObjectChangedError,
                )
            return response
        response = await obj.get(ByteRange(part.pos, part.end), if_match=etag)
        content_range = response.content_range
        if (
            response.status == 200
            and content_range is None
            and part.start == 0
            and part.end == size
            and response.content_length == size
        ):
            # A server that ignores Range answers a resumed whole-object part with the
            # whole object again: _drain skips the bytes already written.
            return response
        if (
            response.status != 206
            or content_range is None
            or content_range.start != part.pos
            or content_range.end > part.end
            or content_range.total != size
        ):
            response.close()
            if content_range is not None and content_range.total != size:
                raise obj.error(
                    f"object size changed from {size} to {content_range.total}",
                    ObjectChangedError,
                )
            raise obj.error(
                f"asked for bytes [{part.pos}, {part.end}), got HTTP {response.status} "
                f"with Content-Range {content_range}"
                + (
                    "; the server ignores Range (GET-first fetches such an object in one request)"
                    if response.status == 200
                    else ""
                )
            )
        return response

    async def _read(self, response: Response, size: int) -> bytes:
        """Up to ``size`` bytes of the body; a stall is dropped (to be resumed), whatever
        the client's own timeouts (a borrowed client may have none)."""
        read_timeout = self.config.read_timeout
        try:
            async with asyncio.timeout(read_timeout):
                chunk: bytes = await response.body.read(size)
        except TimeoutError:
            raise RetryableError(f"no bytes for {read_timeout:g}s") from None
        return chunk

    async def _read_past(self, response: Response, count: int) -> None:
        while count > 0:
            chunk = await self._read(response, min(count, self.config.write_size))
            if not chunk:
                raise RetryableError("the body ended before the bytes to resume from")
            count -= len(chunk)

    async def _drain(self, transfer: _Transfer, response: Response, part: _Part) -> None:
        """Stream ``response``'s body into the temp file at ``part.pos``, in bounded writes."""
        obj, temp = transfer.obj, transfer.temp
        write_size = self.config.write_size
        if response.content_range is not None:
            body_start, limit = response.content_range.start, response.content_range.end
        else:  # a whole-object answer
            body_start, limit = 0, response.content_length
        if limit > part.end:
            raise obj.error(f"server sent bytes up to {limit}, past the expected end {part.end}")
        if part.pos > body_start:
            # The whole object sent again: read past the bytes already on disk.
            await self._read_past(response, part.pos - body_start)
        pending: list[bytes] = []
        pending_size = 0

        crc = part.crc_fn
        report = transfer.progress.add if transfer.progress.callback is not None else None

        async def flush() -> None:
            nonlocal pending_size
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            if crc is None:
                await temp.write(part.pos, data)
            else:
                part.crc = await temp.write_crc(part.pos, data, crc, part.crc)
            if report is not None:
                await report(len(data))
            part.pos += len(data)
            pending.clear()
            pending_size = 0

        try:
            while True:
                chunk = await self._read(response, write_size)
                if not chunk:
                    break
                if part.pos + pending_size + len(chunk) > limit:
                    raise obj.error("server sent more bytes than it announced")
                pending.append(chunk)
                pending_size += len(chunk)
                if pending_size >= write_size:
                    await flush()
        except Exception:
            # Bytes that arrived before a broken stream are good: keep them, so the
            # retry resumes after them instead of fetching them again.
            if pending:
                await flush()
            raise
        if pending:
            await flush()
        if part.pos != limit:
            # aiobotocore checks Content-Length at EOF; this guards a body without one.
            raise obj.error(f"body ended at byte {part.pos}, expected {limit}")


def _check_target(path: str | os.PathLike[str], *, bucket: str, key: str) -> Path:
    """The target must be creatable in an existing, writable directory."""
    try:
        target = Path(os.fspath(path))
    except TypeError:
        raise InvalidRequestError(
            f"path must be a str or os.PathLike, got {path!r}", bucket=bucket, key=key
        ) from None
    if "\x00" in str(target):
        raise InvalidRequestError(f"path {str(target)!r} holds a NUL byte", bucket=bucket, key=key)
    if not target.name or target.name in (".", ".."):
        raise InvalidRequestError(f"path {str(target)!r} names no file", bucket=bucket, key=key)
    if target.is_dir():
        raise InvalidRequestError(f"path {str(target)!r} is a directory", bucket=bucket, key=key)
    parent = target.parent
    if not parent.is_dir():
        raise InvalidRequestError(
            f"directory {str(parent)!r} does not exist", bucket=bucket, key=key
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidRequestError(
            f"directory {str(parent)!r} is not writable", bucket=bucket, key=key
        )
    return target


async def _reap(task: asyncio.Task[Any]) -> None:
    """Cancel a side task and wait for it, so nothing is left running or unretrieved."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error that failed a task group (the rest are the cancellations it caused)."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        else:
            leaves.append(exc)

    collect(group)
    for leaf in leaves:
        if not isinstance(leaf, asyncio.CancelledError):
            return leaf
    return leaves[0] if leaves else asyncio.CancelledError()


_NO_PART_GETS = (
    "the server answers a PartNumber GET with the whole object, not the upload part, "
    "so the object's COMPOSITE checksum (one per upload part) cannot be checked"
)


def _earns_a_reset(part: _Part) -> int:
    """Bytes an attempt must move for the part's failure count to start again: a
    quarter of the part, at most 1 MiB, so every reset is paid for with real progress
    and a part can be reset only a bounded number of times."""
    return max(1, min(1024 * 1024, (part.end - part.start) // 4))


def _multipart(etag: str | None) -> bool:
    """A multipart upload's ETag ends in ``-<parts>``; its checksum may be COMPOSITE."""
    return etag is not None and "-" in etag.strip('"')


# stat() can stall for long on a busy disk: the checks run in the executor.
_check_target_off_loop = wrap(_check_target)
