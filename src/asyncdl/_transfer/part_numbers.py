"""Fetching a multipart object by its upload parts (``PartNumber`` GETs), so that its
COMPOSITE checksum (one per upload part) is checked part by part: the probe that finds
whether the server answers them, then the parts in parallel, each drained and retried
as a byte range is (``parts``)."""

from __future__ import annotations

import asyncio

from .._wire.s3_source import Response
from ..errors import ChecksumError, ObjectChangedError
from .parts import Fetch, Part, after_part_failure, fetch_part

NO_PART_GETS = (
    "the server answers a PartNumber GET with the whole object, not the upload part, "
    "so the object's COMPOSITE checksum (one per upload part) cannot be checked"
)


async def fetch_by_part_number(fetch: Fetch, written: int) -> bool:
    """Fetch every upload part with ``PartNumber`` GETs, in parallel; ``False`` (and
    nothing written) when the server does not answer them part by part."""
    ctx, verifier = fetch.ctx, fetch.verifier
    if ctx.part_gets is False:
        verifier.parts_reason = NO_PART_GETS
        return False
    first = await _request_numbered(fetch, 1, probe=True)
    if first is None:
        ctx.part_gets = False
        verifier.parts_reason = NO_PART_GETS
        return False
    ctx.part_gets = True
    # Bytes written before the parts were known are fetched again with part 1.
    await fetch.progress.add(-written)
    verifier.start_parts()
    count = first.parts_count or 1
    window = asyncio.Semaphore(ctx.config.max_concurrency)
    try:
        async with asyncio.TaskGroup() as tasks:
            await window.acquire()
            tasks.create_task(_run_numbered(fetch, 1, first, window))
            first = None  # the task owns it now
            for number in range(2, count + 1):
                await window.acquire()
                tasks.create_task(_run_numbered(fetch, number, None, window))
    finally:
        if first is not None:
            first.close()
    return True


async def _request_numbered(fetch: Fetch, number: int, *, probe: bool = False) -> Response | None:
    """GET upload part ``number``, with retries; on a ``probe``, ``None`` when the
    server answers with anything but that part."""
    obj, expected = fetch.obj, fetch.verifier.expected
    assert expected is not None
    failures = 0
    while True:
        try:
            response = await obj.get_part(number, if_match=fetch.etag)
        except Exception as exc:
            failures = await after_part_failure(fetch, exc, failures, f"upload part {number}")
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
    if content_range.total != fetch.size:
        response.close()
        raise obj.error(
            f"object size changed from {fetch.size} to {content_range.total}",
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
    fetch: Fetch, number: int, response: Response | None, window: asyncio.Semaphore
) -> None:
    try:
        if response is None:
            response = await _request_numbered(fetch, number)
            assert response is not None
        content_range = response.content_range
        assert content_range is not None
        fetch.verifier.note_part(
            number, content_range.start, content_range.end, response.part_checksum
        )
        part = Part(content_range.start, content_range.end)
        opened, response = response, None
        # A retry of a cut part resumes with a pinned Range GET: its bounds are known.
        await fetch_part(fetch, part, opened)
    finally:
        if response is not None:
            response.close()
        window.release()
