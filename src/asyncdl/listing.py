"""ListObjectsV2, page by page, each page retried like a GET.

An engine's own client has botocore's retries off (asyncdl owns them), so one
503 SlowDown or reset on any page would end a listing of millions of keys. Each
page gets ``config.max_attempts``; a retry asks for the page that failed again
(its ContinuationToken), never for the listing from the start.

:func:`list_prefix` reads the objects of a folder's pages, each with its place under
a destination (nothing written).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator, Mapping
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


@contextlib.contextmanager
def translated(bucket: str, prefix: str) -> Iterator[None]:
    """A listing's failure as a ``DownloadError`` on the prefix."""
    try:
        yield
    except DownloadError:
        raise
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=prefix) from exc
