"""ListObjectsV2, page by page, each page retried like a GET.

An engine's own client has botocore's retries off (asyncdl owns them), so one
503 SlowDown or reset on any page would end a listing of millions of keys. Each
page gets ``config.max_attempts``; a retry asks for the page that failed again
(its ContinuationToken), never for the listing from the start. What the pages hold
(the objects, and where each lands) is ``listing``'s to read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from ..config import TransferConfig
from ..errors import DownloadError, EngineClosed, OtherLoop, translate
from ..stats import OK, THROTTLED, Counters, outcome
from .adaptive import Budget
from .retry import after_failure


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
            try:
                epoch = await budget.acquire() if budget is not None else 0
            except (EngineClosed, OtherLoop) as exc:  # no request sent: nothing to retry
                raise translate(exc, bucket=bucket, key=prefix) from None
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
    # Every token handed out so far: one a server gives again (A, B, A...) would keep
    # the listing going forever. One per page, so a few KiB for a million keys.
    tokens: set[str] = set()
    try:
        page = await fetch(dict(request))
        while True:
            if _next_token(page, bucket=bucket, prefix=prefix):
                token = page["NextContinuationToken"]
                if token in tokens:
                    raise DownloadError(
                        "the listing repeated a continuation token", bucket=bucket, key=prefix
                    )
                tokens.add(token)
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


def _next_token(page: Mapping[str, Any], *, bucket: str, prefix: str) -> bool:
    """Whether another page follows ``page``; a ``DownloadError`` for an answer that
    cannot say whether the listing is whole.

    S3 sends IsTruncated on every page, and NextContinuationToken exactly when it is
    true. A 200 without IsTruncated is no listing (a proxy's login page, an empty body,
    another document, which a parser reads as a page of nothing), and a page that
    says more follow without naming the next (or names one on the last page) cannot
    be followed: either would pass for a whole listing, and ``sync --delete`` deletes
    what a whole listing does not name.
    """
    token = page.get("NextContinuationToken")
    if "IsTruncated" not in page:
        raise DownloadError(
            "the answer to a listing request is not a listing (no IsTruncated)",
            bucket=bucket,
            key=prefix,
        )
    if page["IsTruncated"] is True:
        if not isinstance(token, str) or not token:
            raise DownloadError(
                "a listing page says more follow but names no next page (no NextContinuationToken)",
                bucket=bucket,
                key=prefix,
            )
        return True
    if token:
        raise DownloadError(
            "the last listing page names a next one (IsTruncated is not true, yet a "
            "NextContinuationToken is given)",
            bucket=bucket,
            key=prefix,
        )
    return False
