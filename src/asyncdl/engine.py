"""The engine: the face of asyncdl. It holds the resources (one client, one request
budget, the lean GET path) and offers the public methods, each of which checks its
input and hands on to the module that does the work (``transfer``, ``streaming``,
``bulk``); those take the engine's ``Context``, never the engine."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self

from ._bulk import bulk
from ._bulk.bulk import DownloadItem
from ._reads.engine_reads import MemoryReads
from ._reads.streaming import ObjectStream
from ._transfer import jobs, transfer
from ._transfer.context import Context, usable
from ._transfer.strategies import Strategy
from ._wire.adaptive import Budget, own_slots
from ._wire.client_settings import ClientSettings
from ._wire.clients import ClientRetries, create_default_client
from ._wire.request_args import ExtraArgs
from ._wire.signed_get import SignedGets
from .config import TransferConfig
from .progress import ProgressCallback, with_total
from .results import DownloadResult
from .stats import EngineStats


class Engine(MemoryReads):
    """Downloads S3 objects to files through one client and one concurrency budget.

    Use it as ``async with Engine() as engine:``. Without ``client`` the engine
    creates one from the default aiobotocore session (standard AWS environment and
    config files) and closes it on exit; a client passed in is borrowed, never closed.
    The settings of the client it creates are ``ValueError`` with a ``client``. It
    belongs to the loop that opened it: from another it raises ``RuntimeError``.

    Args:
        client: An aiobotocore S3 client to borrow, used as it is; ``None`` to create one.
        config: The settings of every download, stream and listing; ``TransferConfig()``.
        endpoint_url: An S3-compatible store's endpoint (``http://`` or ``https://``),
            over ``AWS_ENDPOINT_URL_S3`` and the profile's.
        region: The region requests are signed for, over ``AWS_REGION``,
            ``AWS_DEFAULT_REGION`` and the profile's.
        profile: A profile of the AWS config files, over ``AWS_PROFILE``; one neither
            file has fails as the engine opens.
        unsigned: Read a public bucket anonymously (``aws s3 --no-sign-request``): no
            credentials are looked up, and none are sent, whatever the environment has.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        config: TransferConfig | None = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        unsigned: bool = False,
    ) -> None:
        if config is not None and not isinstance(config, TransferConfig):
            raise ValueError(f"config must be a TransferConfig, got {config!r}")
        self._client_settings = ClientSettings.checked(
            endpoint_url=endpoint_url, region=region, profile=profile, unsigned=unsigned
        )
        self._client_settings.refuse_with(client)
        #: The :class:`TransferConfig` of every download, stream and listing.
        self.config = config or TransferConfig()
        self._client = client
        self._owns_client = client is None
        self._stack = AsyncExitStack()
        #: What every download shares (client, budget, ...), while the engine is open.
        self._ctx: Context | None = None
        self._final_stats: EngineStats | None = None

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _open(self) -> None:
        if self._ctx is not None:
            usable(self._ctx)
            return
        if self._owns_client:
            self._client = await create_default_client(
                self._stack, self.config, **self._client_settings.arguments()
            )
        signed = None
        if self.config.lean_get:
            verifies = self.config.validate != "off"
            signed = SignedGets.for_client(
                self._client, verifies=verifies, read_timeout=self.config.read_timeout
            )
        budget = Budget(self.config.max_concurrency, adaptive=self.config.adaptive)
        ctx = Context(self._client, self.config, budget, signed)
        if not self._owns_client:
            # A borrowed client may retry by itself: those retries are counted (and
            # throttles cut the limit) only while the engine is open.
            hooked = ClientRetries.hook(self._client, budget, ctx.counters)
            if hooked is not None:
                self._stack.callback(hooked.unhook)
        self._ctx = ctx

    async def aclose(self) -> None:
        """Close the engine's own client (a borrowed one stays open); what runs on it fails."""
        ctx = None if self._ctx is None else usable(self._ctx)  # on its own loop only
        if ctx is not None:
            self._final_stats = self.stats()
        self._ctx = None
        try:
            if ctx is not None:
                await ctx.close()
        finally:
            await self._stack.aclose()
        if self._owns_client:
            self._client = None

    @property
    def client(self) -> Any:
        """The aiobotocore S3 client in use (the engine must be open)."""
        return self._context.client

    def stats(self) -> EngineStats:
        """What the engine has done since it opened: requests by kind and outcome,
        bytes, retries, throttles, the concurrency limit now, objects done and failed
        (a snapshot; counting is always on); once closed, what it had done then."""
        if self._ctx is None and self._final_stats is not None:
            return self._final_stats
        ctx = usable(self._ctx, any_loop=True)  # a metrics exporter's thread may ask
        budget = ctx.budget
        return ctx.counters.snapshot(
            limit=budget.limit, max_concurrency=self.config.max_concurrency, cuts=budget.cuts
        )

    @property
    def _context(self) -> Context:
        return usable(self._ctx)

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
        """Download ``s3://bucket/key`` to ``path``; return what was written, or raise
        the :class:`DownloadError` (a subclass) that says why it could not be.

        The target is replaced atomically, only once every byte is on disk; on failure
        it is left as it was and no temp file remains. With ``config.resume`` a
        download that writes more than once keeps its partial file on failure (it
        raises ``TargetBusyError`` if another download holds it), and one that finds
        an earlier attempt's fetches only what is missing: ``result.reused_bytes`` and
        ``result.partial_discarded`` tell what became of it (the guide *Resume and
        sync* says more).

        Args:
            bucket: The bucket's name.
            key: The object's key, as stored (not percent-encoded).
            path: The file to write; its directory must exist.
            strategy: How the download learns the object's size and ETag:
                ``"get-first"``, ``"head-first"``, ``"auto"`` (GET-first with a client
                asyncdl creates), or a :class:`Strategy`.
            extra_args: GetObject arguments sent with every request of the download
                (``VersionId``, the ``SSECustomer...`` ones, ``RequestPayer``,
                ``ExpectedBucketOwner``, ``ChecksumMode``); any other raises
                :class:`InvalidRequestError` before anything is sent.
            size: The object's size, when known (from a listing, say). With
                ``etag``, it replaces the discovery request: every GET is pinned
                from the first byte.
            etag: The object's ETag, when known; see ``size``.
            timeout: Seconds for the whole download, retries and backoff included;
                when they run out the download is cancelled and cleaned up, and a
                ``DownloadError`` says so.
            checksum: S3's checksum of the object, when the caller knows it
                (``"CRC64NVME:base64..."``); the bytes are checked against it per
                ``config.validate``.
            progress: ``progress(delta, total)`` or ``progress(delta)``, sync or async
                (as boto3's ``Callback`` and tqdm's ``update``), called as bytes reach
                the file, with the object's size as ``total``; bytes a download
                discards are reported back as a negative delta.
        """
        ctx = self._context
        job = await jobs.check(
            ctx,
            bucket,
            key,
            path,
            strategy=strategy,
            extra_args=extra_args,
            size=size,
            etag=etag,
            timeout=timeout,
            checksum=checksum,
        )
        with own_slots():
            return await transfer.run(ctx, job, progress)

    async def download_url(
        self,
        url: str,
        path: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        checksum: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Download what ``url`` serves (a presigned S3 GET URL, or any HTTP(S) URL
        that honours Range) to ``path``, as :meth:`download` does an object: GET-first,
        parallel ranges pinned with ``If-Match`` to the first answer's ETag, retries
        that resume, the budget, the bandwidth cap, the temp file and its atomic
        publish, ``config.resume``.

        Nothing is signed and no credentials are sent: the URL carries what it needs.
        Its query string (a presigned URL's credential) is never shown: the result's
        ``key`` and every error name the URL without it, and ``bucket`` is ``""``.
        No HEAD can be sent for a checksum (a presigned GET URL is signed for GET only),
        so an object fetched in several ranges is unverified unless ``checksum`` is
        given, and ``validate="required"`` fails it. An expired or refused URL raises
        ``AccessDeniedError``; nothing is written.

        Args:
            url: The URL, sent as given: it must already be percent-encoded.
            path: The file to write; its directory must exist.
            timeout: Seconds for the whole download, as for :meth:`download`.
            checksum: The object's checksum (``"CRC64NVME:base64..."``), when known;
                otherwise only one a whole-object answer carries is checked.
            progress: Called as bytes reach the file, as for :meth:`download`.
        """
        job = await jobs.check_url(url, path, timeout=timeout, checksum=checksum)
        return await transfer.run(self._context, job, progress)

    def stream_url(
        self,
        url: str,
        *,
        start: int = 0,
        end: int | None = None,
        progress: ProgressCallback | None = None,
        chunk_size: int | None = None,
        prefetch: int | None = None,
    ) -> ObjectStream:
        """The bytes ``[start, end)`` of what ``url`` serves, as :meth:`stream` gives an
        object's (see :meth:`download_url` for what a URL download does and shows).

        Args:
            url: The URL, sent as given: it must already be percent-encoded.
            start: The first byte.
            end: The byte after the last one; ``None`` for the end of the object.
            progress: Called as bytes arrive, as for :meth:`download`.
            chunk_size: Bytes per part; ``config.chunk_size`` when not given.
            prefetch: Parts fetched ahead of the reader; ``config.stream_prefetch``
                when not given.
        """
        return ObjectStream(
            self._context,
            "",
            "",
            start=start,
            end=end,
            extra_args=None,
            progress=progress,
            chunk_size=chunk_size,
            prefetch=prefetch,
            url=url,
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
        chunk_size: int | None = None,
        prefetch: int | None = None,
    ) -> ObjectStream:
        """The bytes ``[start, end)`` of the object, in order, as they arrive.

        ```python
        import asyncdl

        async with asyncdl.Engine() as engine:
            async with engine.stream("my-bucket", "videos/intro.mp4") as stream:
                async for chunk in stream:
                    ...
        ```

        Parts are fetched concurrently, ``prefetch`` ahead of the reader and pinned
        with ``IfMatch``, so memory stays about ``prefetch * chunk_size`` (a server of
        many slow clients wants both small). Closing it (``aclose()``, ``async with``)
        releases the first answer and cancels the prefetch, whether or not anything
        was read. ``await stream.open()`` sends the first request and sets ``size``,
        ``etag`` and ``length`` before any byte is read (a web handler's headers, or
        its 404).

        Args:
            bucket: The bucket's name.
            key: The object's key.
            start: The first byte.
            end: The byte after the last one; ``None`` for the end of the object.
            extra_args: GetObject arguments, as for :meth:`download`.
            progress: Called as bytes arrive, as for :meth:`download`.
            chunk_size: Bytes per part; ``config.chunk_size`` when not given.
            prefetch: Parts fetched ahead of the reader; ``config.stream_prefetch``
                when not given.
        """
        return ObjectStream(
            self._context,
            bucket,
            key,
            start=start,
            end=end,
            extra_args=extra_args,
            progress=progress,
            chunk_size=chunk_size,
            prefetch=prefetch,
        )

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

        Items are pulled only as slots free up. A failed item yields a result whose
        ``error`` holds the ``DownloadError``; the batch goes on. Leaving the loop
        early cancels what is in flight and removes its temp files (at once with
        ``contextlib.aclosing``, else when the iterator is collected; with
        ``config.resume``, partial files stay for the next run).

        Args:
            items: ``(bucket, key, path)`` tuples or :class:`DownloadRequest` objects,
                from any iterable or async iterable.
            strategy: As for :meth:`download`.
            extra_args: GetObject arguments for the items that carry none of their own.
            timeout: Seconds for each item's download, as for :meth:`download`.
            progress: Called as bytes reach each item's file, as for :meth:`download`
                (``total`` is that item's object size).
        """
        return bulk.download_many(
            self._context,
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
        skip_existing: str | None = None,
        filters: Iterable[tuple[str, str]] | None = None,
        listed: Callable[[int, int], object] | None = None,
        listing: Callable[[int, int, bool], object] | None = None,
    ) -> AsyncGenerator[DownloadResult]:
        """Download every object under ``s3://bucket/prefix`` into ``dest_dir``.

        Lists with ListObjectsV2 page by page while downloading, up to 100,000 keys
        ahead of the downloads (about 19 MB at most), so its totals are known early (a
        failed page is retried as a GET is); each listed size and ETag is passed on, so
        no object needs a discovery request and every GET is pinned. A key that would land
        outside ``dest_dir``, or on a path an earlier key of the listing holds
        (``p/x`` and ``p/x/y``: a file and a directory), is refused and reported as
        that item's error; folder markers (``.../`` of size 0) are skipped.

        Args:
            bucket: The bucket's name.
            prefix: The folder: one that does not end in ``/`` means it with one
                (``"logs"`` is ``logs/``, as in ``asyncdl cp -r``; not ``logsa`` nor
                ``logs2/a``).
            dest_dir: The directory each key lands under, by its part after
                ``prefix``.
            strategy: As for :meth:`download`.
            extra_args: GetObject arguments for every object, as for :meth:`download`.
            timeout: Seconds for each object's download, as for :meth:`download`.
            progress: Called as bytes reach each object's file, as for
                :meth:`download` (``total`` is that object's size; ``listed`` gives
                the totals of the whole prefix).
            skip_existing: ``"size"`` skips an object whose file is there with the
                listed size; ``"etag"`` also needs the record made when asyncdl wrote
                the file to hold the listed ETag and still vouch for the file (the
                same bucket, key and path under ``dest_dir`` as when written, the same
                size and mtime: a file changed, moved or copied since is fetched
                again). A skipped object yields a result with ``skipped=True`` and
                ``requests=0``, and nothing is sent for it; with either mode every
                file downloaded is recorded (xattr ``user.asyncdl.etag``, else
                ``dest_dir/.asyncdl-etags/``).
            filters: ``("exclude" | "include", pattern)`` pairs with the AWS CLI's
                meaning, matched against the key relative to ``prefix`` (``*``
                matches ``/`` too; the last filter that matches decides); an excluded
                key is neither downloaded nor yielded.
            listed: ``listed(objects, size)``, called once the listing has ended
                (downloads may still run): ``objects`` is the number of results the
                generator yields in all (refused and skipped ones included), ``size``
                the listed bytes of those it downloads. A progress display learns its
                totals from it.
            listing: ``listing(objects, size, ended)``, called after each page the
                listing reads: the objects listed so far (counted as ``listed`` counts
                them), their listed bytes (skipped ones' included), and whether the
                listing has ended. A progress display learns its totals from it early:
                for a prefix within the read-ahead, after its first pages.
        """
        return bulk.download_prefix(
            self._context,
            bucket,
            prefix,
            dest_dir,
            strategy=strategy,
            extra_args=extra_args,
            timeout=timeout,
            progress=with_total(progress) if progress is not None else None,
            skip_existing=skip_existing,
            filters=filters,
            listed=listed,
            listing=listing,
        )
