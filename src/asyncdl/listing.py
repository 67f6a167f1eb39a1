"""ListObjectsV2, page by page, each page retried like a GET.

An engine's own client has botocore's retries off (asyncdl owns them), so one
503 SlowDown or reset on any page would end a listing of millions of keys. Each
page gets ``config.max_attempts``; a retry asks for the page that failed again
(its ContinuationToken), never for the listing from the start.

:func:`list_prefix` reads the objects of a folder's pages, each with its place under
a destination (nothing written); :func:`list_ahead` does the same from a task of its
own that reads up to ``LIST_AHEAD`` keys ahead of its consumer, so that a prefix's
totals are known long before its downloads are done.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from .adaptive import Budget
from .config import TransferConfig
from .errors import DownloadError, translate
from .filters import Filters
from .key_paths import relative_path
from .retry import after_failure
from .stats import OK, THROTTLED, Counters, outcome


async def list_pages(
    client: Any,
    config: TransferConfig,
    *,
    bucket: str,
    prefix: str,
    delimiter: str | None = None,
    params: Mapping[str, object] | None = None,
    page_size: int | None = None,
    counters: Counters | None = None,
    budget: Budget | None = None,
) -> AsyncGenerator[dict[str, Any]]:
    """Every page of ``s3://bucket/prefix`` (``params``: RequestPayer and such), in order.

    ``page_size`` is ListObjectsV2's MaxKeys (S3 gives 1,000 without it). When a page
    runs out of attempts or fails for good, its error is raised as a ``DownloadError``
    whose key is the prefix. Each page asked for is counted in ``counters`` (an
    engine's stats), by its outcome. With an engine's ``budget`` each page request
    holds one of its slots, as a GET does, and a throttled page lowers its limit: S3
    rates LISTs and GETs of a prefix together.

    The next page is asked for as soon as a page arrives, while its keys are worked
    on: a bulk download of many pages would otherwise stall at each page's end for a
    LIST round trip (100-300 ms on S3) with its slots idle. One page ahead at most; a
    listing closed early cancels the one in flight.
    """
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, **(params or {})}
    if delimiter:
        request["Delimiter"] = delimiter
    if page_size is not None:
        request["MaxKeys"] = page_size
    counts = counters.lists if counters is not None else [0] * 6

    async def fetch(page_request: dict[str, Any]) -> dict[str, Any]:
        failures = 0
        while True:
            epoch = await budget.acquire() if budget is not None else 0
            try:
                page: dict[str, Any] = await client.list_objects_v2(**page_request)
            except BaseException as exc:
                where = outcome(exc)
                counts[where] += 1
                if budget is not None:
                    if where == THROTTLED:
                        budget.throttled(epoch)
                    budget.release()
                if not isinstance(exc, Exception):
                    raise
                failures = await after_failure(
                    config,
                    exc,
                    failures,
                    bucket=bucket,
                    key=prefix,
                    what="a listing page",
                    counters=counters,
                )
                continue
            counts[OK] += 1
            if budget is not None:
                budget.release_ok()
            return page

    ahead: asyncio.Task[dict[str, Any]] | None = None
    try:
        page = await fetch(dict(request))
        while True:
            token = page.get("NextContinuationToken")
            more = bool(page.get("IsTruncated") and token)
            if more:
                if token == request.get("ContinuationToken"):
                    # As botocore's paginator: a server that hands back the same page
                    # forever must not keep a listing going forever.
                    raise DownloadError(
                        "the listing repeated its continuation token", bucket=bucket, key=prefix
                    )
                request["ContinuationToken"] = token
                ahead = asyncio.create_task(fetch(dict(request)))
            yield page
            if ahead is None:
                return
            page, ahead = await ahead, None
    finally:
        if ahead is not None:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Listed:
    """One object of a prefix's listing, and where it lands under the destination."""

    key: str
    size: int
    etag: str | None
    #: Its path under the destination; ``None`` when the key is refused (``refusal``).
    relative: PurePosixPath | None
    refusal: str | None = None


async def list_prefix(
    pages: AsyncGenerator[dict[str, Any]],
    *,
    bucket: str,
    prefix: str,
    filters: Filters | None,
) -> AsyncGenerator[Listed]:
    """The objects in ``pages``, the listing of the folder ``prefix`` (ending in ``/``,
    or empty), that ``filters`` include, folder markers left out, each with its place;
    nothing is written. A listing that fails raises its ``DownloadError``."""
    with translated(bucket, prefix):
        async with contextlib.aclosing(pages):  # closed early: the page ahead is cancelled
            async for page in pages:
                for entry in page.get("Contents", ()):
                    key, size = entry["Key"], int(entry["Size"])
                    if key.endswith("/") and size == 0:
                        continue  # a folder marker, not a file
                    if filters is not None and not filters.includes(key[len(prefix) :]):
                        continue
                    try:
                        relative, refusal = relative_path(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, entry.get("ETag"), relative, refusal)


#: Keys :func:`list_ahead` holds at most, read but not yet taken (one page more while
#: it waits for room). About 190 bytes each (the key, the ETag, the size), so some 19 MB
#: at most, whatever the prefix: a listing's pages come at a thousand keys a request,
#: much faster than tiny objects download, and would otherwise pile up.
LIST_AHEAD = 100_000

#: ``progress(objects, size, ended)``: see :func:`list_ahead`.
ListingProgress = Callable[[int, int, bool], object]


class _Batch:
    """The objects of one page that the filters keep, held compactly while they wait:
    three flat sequences, no object per key."""

    __slots__ = ("etags", "keys", "sizes")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sizes = array("q")
        self.etags: list[str | None] = []

    def add_page(self, page: Mapping[str, Any], prefix: str, filters: Filters | None) -> int:
        """Take the page's objects (folder markers and what the filters exclude left
        out); their bytes."""
        total = 0
        for entry in page.get("Contents", ()):
            key, size = entry["Key"], int(entry["Size"])
            if key.endswith("/") and size == 0:
                continue  # a folder marker, not a file
            if filters is not None and not filters.includes(key[len(prefix) :]):
                continue
            self.keys.append(key)
            self.sizes.append(size)
            self.etags.append(entry.get("ETag"))
            total += size
        return total


async def list_ahead(
    pages: AsyncGenerator[dict[str, Any]],
    *,
    bucket: str,
    prefix: str,
    filters: Filters | None,
    progress: ListingProgress | None = None,
    ahead: int = LIST_AHEAD,
) -> AsyncGenerator[Listed]:
    """What :func:`list_prefix` yields, the pages read by a task of its own up to
    ``ahead`` keys ahead of the consumer.

    ``progress(objects, size, ended)`` is called after each page: the objects listed so
    far (those this generator will yield), their listed bytes, and whether the listing
    has ended (once more with ``True`` at its end; never after a failure). A listing
    that fails raises its ``DownloadError`` once the objects read before the failure
    have been yielded, as :func:`list_prefix` does. Closing the generator stops the
    listing (the page in flight is cancelled).
    """
    reading = _Ahead(ahead)
    reader = asyncio.create_task(reading.read(pages, prefix, filters, progress))
    try:
        with translated(bucket, prefix):
            while (batch := await reading.next()) is not None:
                for key, size, etag in zip(batch.keys, batch.sizes, batch.etags, strict=True):
                    try:
                        relative, refusal = relative_path(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, etag, relative, refusal)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


class _Ahead:
    """The batches :func:`list_ahead`'s reader has read and its consumer not yet taken."""

    def __init__(self, ahead: int) -> None:
        self._ahead = ahead
        self._waiting: deque[_Batch] = deque()
        self._held = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._ended = False
        self._failure: BaseException | None = None

    async def read(
        self,
        pages: AsyncGenerator[dict[str, Any]],
        prefix: str,
        filters: Filters | None,
        progress: ListingProgress | None,
    ) -> None:
        objects = size = 0
        try:
            async with contextlib.aclosing(pages):
                async for page in pages:
                    batch = _Batch()
                    size += batch.add_page(page, prefix, filters)
                    objects += len(batch.keys)
                    if batch.keys:
                        self._waiting.append(batch)
                        self._held += len(batch.keys)
                        self._ready.set()
                    if progress is not None:
                        progress(objects, size, False)
                    while self._held >= self._ahead:
                        self._room.clear()
                        await self._room.wait()
            if progress is not None:
                progress(objects, size, True)
        except Exception as exc:  # raised where the consumer reaches it
            self._failure = exc
        finally:
            self._ended = True
            self._ready.set()

    async def next(self) -> _Batch | None:
        """The next batch; ``None`` at the listing's end; its failure, once every batch
        read before it has been taken."""
        while not self._waiting:
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                return None
            self._ready.clear()
            await self._ready.wait()
        batch = self._waiting.popleft()
        self._held -= len(batch.keys)
        self._room.set()
        return batch


@contextlib.contextmanager
def translated(bucket: str, prefix: str) -> Iterator[None]:
    """A listing's failure as a ``DownloadError`` on the prefix."""
    try:
        yield
    except DownloadError:
        raise
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=prefix) from exc
