"""Bulk downloads: many objects through one engine, pulled lazily, results as they finish.

Memory stays flat whatever the number of items: at most ``max_concurrency``
downloads exist at a time (each takes request slots from the engine's shared
budget), and the input is pulled only when one of them finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiofiles.os import wrap

from .._files import dead_temps
from .._files.file_records import SKIP_MODES
from .._files.held_dirs import HeldDir
from .._files.key_paths import folder
from .._files.key_paths import relative_path as relative_path  # noqa: PLC0414 - re-exported: its old home
from .._files.skipping import Skips
from .._transfer import jobs, transfer
from .._transfer.context import Context, on_its_loop
from .._transfer.strategies import Strategy
from .._wire.request_args import ExtraArgs, redacted
from ..config import is_int_at_least
from ..errors import DownloadError, InvalidRequestError
from ..progress import ProgressCallback
from ..results import DownloadResult
from .filters import Filters, compile_filters
from .listing import Listed as Listed  # noqa: PLC0414 - re-exported: its old home
from .listing import ListingProgress, list_ahead, translated
from .listing import list_prefix as list_prefix  # noqa: PLC0414
from .places import Places


@dataclass(frozen=True, slots=True)
class DownloadRequest:
    """One object to download, with what is known of it (from a listing, say): an
    item of :meth:`~asyncdl.Engine.download_many`."""

    #: The object's bucket.
    bucket: str
    #: The object's key.
    key: str
    #: Where to write it.
    path: str | os.PathLike[str]
    #: The object's size, when known. With ``etag`` too, no discovery request is
    #: sent and every GET is pinned to that ETag from the first byte.
    size: int | None = None
    #: The object's ETag, when known (quoted, as S3 lists it).
    etag: str | None = None
    #: GetObject arguments for this object (``VersionId``, SSE-C...), in place of
    #: the batch's ``extra_args``.
    extra_args: ExtraArgs | None = field(default=None)
    #: S3's checksum, ``"ALGORITHM:base64"``, when known.
    checksum: str | None = None

    def __repr__(self) -> str:
        args = redacted(self.extra_args) if self.extra_args else self.extra_args
        return (
            f"DownloadRequest(bucket={self.bucket!r}, key={self.key!r}, path={self.path!r}, "
            f"size={self.size!r}, etag={self.etag!r}, extra_args={args!r}, "
            f"checksum={self.checksum!r})"
        )


DownloadItem = DownloadRequest | tuple[str, str, "str | os.PathLike[str]"]


@dataclass(frozen=True, slots=True, repr=False)
class _Placed(DownloadRequest):
    """A listed object's request, with the directory its target goes in, held open
    since the listing decided it (see ``held_dirs``)."""

    where: HeldDir | None = None


def placed(
    bucket: str,
    key: str,
    target: Path,
    *,
    size: int | None,
    etag: str | None,
    where: HeldDir | None,
) -> DownloadRequest:
    """A request whose target's directory is held open already (``held_dirs``): its
    download's files are made in that directory, not by their paths."""
    return _Placed(bucket, key, target, size=size, etag=etag, where=where)


def as_request(item: object) -> DownloadRequest:
    """``item`` as a request, or an ``InvalidRequestError`` if its shape or types are
    wrong (the engine checks the values before it sends anything)."""
    if isinstance(item, tuple) and len(item) == 3:
        item = DownloadRequest(*item)
    if not isinstance(item, DownloadRequest):
        bucket, key = (*item, None, None)[:2] if isinstance(item, tuple) else (None, None)
        raise InvalidRequestError(
            f"expected a (bucket, key, path) tuple or a DownloadRequest, got {item!r}",
            bucket=_text(bucket),
            key=_text(key),
        )
    where = {"bucket": _text(item.bucket), "key": _text(item.key)}
    for name, value in (("bucket", item.bucket), ("key", item.key)):
        if not isinstance(value, str):
            raise InvalidRequestError(f"{name} must be a string, got {value!r}", **where)
    if not isinstance(item.path, (str, os.PathLike)):
        raise InvalidRequestError(f"path must be a str or os.PathLike, got {item.path!r}", **where)
    return item


def _name(strategy: str | Strategy) -> str:
    return strategy if isinstance(strategy, str) else strategy.name


def _text(value: object) -> str:
    # A result's bucket and key are strings, even for an item that had none.
    return value if isinstance(value, str) else ""


def _check_items(items: object) -> None:
    """Refuse what is no collection of requests: a string, or one request where many
    belong, would otherwise be taken apart into a failed result per character or
    field."""
    one = isinstance(items, DownloadRequest) or (
        isinstance(items, tuple) and bool(items) and isinstance(items[0], str)
    )
    if (
        one
        or isinstance(items, str | bytes | bytearray | memoryview)
        or not isinstance(items, Iterable | AsyncIterable)
    ):
        raise InvalidRequestError(
            "download_many takes an iterable or async iterable of (bucket, key, path) "
            f"tuples or DownloadRequests, got {items!r}",
            bucket="",
            key="",
        )


async def _pull(items: Iterable[Any] | AsyncIterable[Any]) -> AsyncGenerator[Any]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def download_many(
    ctx: Context,
    items: Iterable[Any] | AsyncIterable[Any],
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> AsyncGenerator[DownloadResult]:
    """See :meth:`Engine.download_many`. Items may also be ready-made (failed) results."""
    on_its_loop(ctx)  # made on the engine's loop, iterated on another: refused whole
    _check_items(items)
    limit = ctx.config.max_concurrency
    source = _pull(items)
    running: set[asyncio.Task[DownloadResult]] = set()
    finished = _Finished()
    exhausted = False
    try:
        while True:
            while not exhausted and len(running) < limit:
                try:
                    item = await anext(source)
                except StopAsyncIteration:
                    exhausted = True
                    break
                if isinstance(item, DownloadResult):
                    yield item
                    continue
                try:
                    request = as_request(item)
                except InvalidRequestError as refusal:
                    yield failed(refusal.bucket, refusal.key, "", refusal, strategy)
                    continue
                task = asyncio.create_task(
                    _one(
                        ctx,
                        request,
                        strategy=strategy,
                        extra_args=extra_args,
                        timeout=timeout,
                        progress=progress,
                    )
                )
                task.add_done_callback(finished.add)
                running.add(task)
            if not running:
                return
            if not finished.tasks:
                await finished.wait()
            # One result, then the freed slot is filled again before the next.
            task = finished.tasks.popleft()
            running.discard(task)
            yield task.result()
    finally:
        for task in running:
            task.cancel()
        # Wait for the cancelled downloads to remove their temp files.
        await asyncio.gather(*running, return_exceptions=True)
        await source.aclose()


class _Finished:
    """The downloads that have ended, in the order they ended. ``asyncio.wait`` would
    add and remove a callback on every running download at each wake (64 of each at
    concurrency 64, for the one or few that ended): here each adds one, once."""

    __slots__ = ("_waiter", "tasks")

    def __init__(self) -> None:
        self.tasks: deque[asyncio.Task[DownloadResult]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def add(self, task: asyncio.Task[DownloadResult]) -> None:
        """A download's done callback."""
        self.tasks.append(task)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Until a download ends."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


async def _one(
    ctx: Context,
    request: DownloadRequest,
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None,
    progress: ProgressCallback | None,
) -> DownloadResult:
    try:
        job = await jobs.check(
            ctx,
            request.bucket,
            request.key,
            request.path,
            strategy=strategy,
            extra_args=request.extra_args if request.extra_args is not None else extra_args,
            size=request.size,
            etag=request.etag,
            timeout=timeout,
            checksum=request.checksum,
        )
        if type(request) is _Placed:
            job.where = request.where
        return await transfer.run(ctx, job, progress)
    except DownloadError as error:
        size = request.size if is_int_at_least(request.size, 0) else None
        return failed(request.bucket, request.key, request.path, error, strategy, size=size)


def failed(
    bucket: str,
    key: str,
    path: str | os.PathLike[str],
    error: DownloadError,
    strategy: str | Strategy,
    *,
    size: int | None = None,
) -> DownloadResult:
    """The result of a download that failed; ``size`` is the object's, if known."""
    try:
        where = Path(os.fspath(path))
    except TypeError:
        where = Path()
    return DownloadResult(
        bucket=bucket,
        key=key,
        path=where,
        size=size,
        etag=None,
        strategy=_name(strategy),
        requests=error.requests,
        error=error,
    )


async def download_prefix(
    ctx: Context,
    bucket: str,
    prefix: str,
    dest_dir: str | os.PathLike[str],
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
    skip_existing: str | None = None,
    filters: Iterable[tuple[str, str]] | None = None,
    listed: Callable[[int, int], object] | None = None,
    listing: ListingProgress | None = None,
) -> AsyncGenerator[DownloadResult]:
    """See :meth:`Engine.download_prefix`."""
    on_its_loop(ctx)
    where = {"bucket": _text(bucket), "key": prefix if isinstance(prefix, str) else ""}
    if not isinstance(prefix, str):
        raise InvalidRequestError(f"prefix must be a string, got {prefix!r}", **where)
    if skip_existing is not None and skip_existing not in SKIP_MODES:
        raise InvalidRequestError(
            f"skip_existing must be None, 'size' or 'etag', got {skip_existing!r}", **where
        )
    try:
        kept = compile_filters(filters)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), **where) from None
    base = folder(prefix)
    root = await _check_dest_dir_off_loop(dest_dir, bucket=bucket, prefix=base)
    places = Places(root)
    skips = None if skip_existing is None else Skips(root, skip_existing)
    try:
        if skips is not None:
            await skips.load()
        requests = _list_requests(
            ctx,
            bucket=bucket,
            prefix=base,
            places=places,
            strategy=strategy,
            extra_args=extra_args,
            filters=kept,
            skips=skips,
            listed=listed,
            listing=listing,
        )
        results = download_many(
            ctx,
            requests,
            strategy=strategy,
            extra_args=extra_args,
            timeout=timeout,
            progress=progress,
        )
        # Closing this generator closes the inner one at once: in-flight downloads are
        # cancelled and their temp files removed now, not when the collector runs.
        # Then the listing's: download_many leaves the iterable it was given open, and
        # one left to the loop's shutdown is closed there alongside the listing inside
        # it ("aclose(): asynchronous generator is already running").
        async with contextlib.aclosing(requests), contextlib.aclosing(results):
            async for result in results:
                held = places.settle(result)
                if skips is not None:
                    await skips.remember(result, held)
                yield result
        # What killed runs left where this one wrote: it would stay there for good.
        await _remove_dead(places.root, places.visited_dirs())
    finally:
        if skips is not None:
            skips.close()


# ListObjectsV2 takes these of a download's arguments; the rest are per object.
_LIST_ARGS = ("RequestPayer", "ExpectedBucketOwner")


def _check_dest_dir(dest_dir: str | os.PathLike[str], *, bucket: str, prefix: str) -> Path:
    root = Path(os.fspath(dest_dir))
    if root.exists() and not root.is_dir():
        raise InvalidRequestError(f"{str(root)!r} is not a directory", bucket=bucket, key=prefix)
    return root


_check_dest_dir_off_loop = wrap(_check_dest_dir)
_remove_dead = wrap(dead_temps.remove_dead)


async def _list_requests(
    ctx: Context,
    *,
    bucket: str,
    prefix: str,
    places: Places,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    filters: Filters | None,
    skips: Skips | None,
    listed: Callable[[int, int], object] | None,
    listing: ListingProgress | None,
) -> AsyncGenerator[DownloadRequest | DownloadResult]:
    params = {name: extra_args[name] for name in _LIST_ARGS if extra_args and name in extra_args}
    items = to_fetch = 0
    pages = ctx.list_pages(bucket, prefix, params=params)
    # Read ahead of the downloads (within a bound): the totals are known early.
    objects = list_ahead(pages, bucket=bucket, prefix=prefix, filters=filters, progress=listing)
    # A directory that cannot be made (the root, say) fails the listing, as a page would.
    with translated(bucket, prefix):
        async with contextlib.aclosing(objects):
            async for item in objects:
                key, size, etag = item.key, item.size, item.etag
                items += 1
                if item.relative is None:
                    refusal = InvalidRequestError(str(item.refusal), bucket=bucket, key=key)
                    yield failed(bucket, key, places.root, refusal, strategy, size=size)
                    continue
                parts = item.relative
                target = places.root.joinpath(*parts)
                places.visited.add(parts[:-1])
                # Before the skip: what is looked at there is in the directory decided.
                where = await places.claim(key, target, parts)
                if isinstance(where, str):
                    refusal = InvalidRequestError(where, bucket=bucket, key=key)
                    yield failed(bucket, key, target, refusal, strategy, size=size)
                    continue
                if skips is not None and await skips.skips(target, size, etag, where):
                    yield DownloadResult(
                        bucket, key, target, size, etag, _name(strategy), requests=0, skipped=True
                    )
                    continue
                to_fetch += size or 0
                yield placed(bucket, key, target, size=size, etag=etag, where=where)
    if listed is not None:
        listed(items, to_fetch)
