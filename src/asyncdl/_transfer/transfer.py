"""One object's download, top to bottom: discover size and ETag, plan the fetch,
fetch into the temp file, verify, publish.

``jobs`` refuses bad input before anything is sent or written; :func:`run` does
the rest. Discovery is the strategy's first request (with retries), plus the
checksum HEAD when ``validate="required"`` needs one that the GETs will not carry.
The plan: one response holds the whole object (the first answer, or one plain
GET), or the rest is fetched by byte ranges, or along the upload's parts when only
those can check a COMPOSITE checksum (see ``parts``). After a checksum mismatch
there is one fresh attempt at most, pinned to the same ETag. Publishing comes
last, outside the timeout, and once started it is not interrupted.

With ``resume=True`` a download of an object larger than one write goes into a partial
file, kept on failure, and one an earlier attempt left is continued (see ``resume``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .._files.partial_file import PartialFile
from .._files.writer import TempFile
from .._wire.body_reader import SpoolTo
from .._wire.retry import logger, with_retries
from .._wire.s3_source import UNANNOUNCED_LENGTH, Response, S3Object
from ..errors import ChecksumError, ObjectChangedError, source_name, translate
from ..progress import ProgressCallback, Reporter
from ..results import DownloadResult, finished
from . import resume
from .context import Context
from .jobs import Job
from .part_numbers import fetch_by_part_number
from .parts import Fetch, Part, fetch_part, fetch_ranges
from .strategies import Discovery
from .verify import (
    NO_URL_CHECKSUM,
    Verification,
    Verifier,
    send_checksum_head,
    unverifiable,
)


async def run(ctx: Context, job: Job, progress: ProgressCallback | None) -> DownloadResult:
    """Download ``job`` and publish it; on failure the target is left as it was."""
    url = job.url
    obj = ctx.s3_object(job.bucket, job.key, job.extra_args) if url is None else ctx.url_object(url)
    reporter = Reporter(progress)
    # A body of unknown length is spooled beside the target, read as any other.
    obj.spool_to = SpoolTo(str(job.target), ctx.config.read_timeout, ctx.bandwidth, reporter)
    # No timeout, no Timeout object entered and left for nothing.
    deadline = None if job.timeout is None else asyncio.timeout(job.timeout)
    temp: TempFile | None = None
    found = resume.Resume()
    try:
        async with deadline or _NO_DEADLINE:
            discovery, verification, temp = await _fetch_verified(ctx, obj, job, reporter, found)
        # Every byte is in and checked: publishing is the last step, outside the
        # timeout, and once started it completes even if the task is cancelled (a
        # cancellation then propagates with the target already replaced).
        await temp.commit()
    except Exception as exc:
        ctx.counters.objects_failed += 1
        if temp is not None:
            temp.discard()
        await reporter.rewind()  # nothing of it was kept
        if isinstance(exc, TimeoutError) and deadline is not None and deadline.expired():
            error = obj.error(f"did not finish within {job.timeout:g}s")
        else:
            error = translate(exc, bucket=job.bucket, key=job.key)
        if temp is not None and temp.published:
            # Only the fsync of the directory after the rename can fail so late.
            error = obj.error(f"{str(job.target)!r} was replaced, but then: {error.message}")
        error.requests = obj.requests
        if error is exc:
            raise
        raise error from exc
    except BaseException:
        if temp is not None:
            temp.discard()  # a no-op once the commit began
        raise
    ctx.counters.objects_done += 1
    return finished(
        job.bucket,
        job.key,
        job.target,
        size=discovery.size,
        etag=discovery.etag,
        strategy=job.strategy.name,
        requests=obj.requests,
        checksum=verification.checksum,
        verified=verification.verified,
        unverified_reason=(
            UNANNOUNCED_LENGTH
            if obj.close_delimited and not verification.verified
            else verification.reason
        ),
        reused_bytes=found.reused,
        partial_discarded=found.discarded,
    )


async def _fetch_verified(
    ctx: Context, obj: S3Object, job: Job, progress: Reporter, found: resume.Resume
) -> tuple[Discovery, Verification, TempFile]:
    """Discover and fetch into a verified temp file, not yet published; after a
    checksum mismatch, one fresh attempt at most, pinned to the same ETag (a mismatch
    is not retried blindly), which takes nothing from an earlier attempt's partial."""
    policy = ctx.config.validate
    discovery = None
    if ctx.config.resume:
        discovery = await resume.discover(
            ctx,
            obj,
            job.target,
            job.extra_args,
            size=job.size,
            etag=job.etag,
            checksum_head=_needs_checksum_head(ctx, obj, job),
            found=found,
            where=job.where,
        )
    if discovery is None:
        discovery = await _discover(ctx, obj, job)
    # No await from here until _fetch holds the open first answer and the checksum HEAD
    # under its cleanup: a cancellation in between would leak them.
    verifier = Verifier(policy, job.expected or discovery.checksum)
    if not obj.checksum_heads:
        verifier.missing_reason = NO_URL_CHECKSUM
        if policy == "required" and verifier.expected is None:
            # Nothing could bring a checksum later: fail before the bytes, not after.
            if discovery.first is not None:
                discovery.first.close()
            raise unverifiable(obj, f"validate='required' cannot verify it: {NO_URL_CHECKSUM}")
    if discovery.checksum_head is not None:
        verifier.expect(discovery.checksum_head, discovery.etag)
        discovery.checksum_head = None
    progress.total = discovery.size
    try:
        fetched = await _fetch(
            ctx, obj, job, discovery, verifier=verifier, progress=progress, found=found
        )
        return discovery, *fetched
    except ChecksumError as exc:
        if not exc.mismatch or discovery.etag is None or policy == "off":
            raise
        logger.info(
            "checksum mismatch on %s; one fresh attempt at ETag %s: %s",
            source_name(obj.bucket, obj.key),
            discovery.etag,
            exc.message,
        )
    await progress.rewind()  # the fresh attempt fetches every byte again
    found.adopt, found.reused = False, 0
    # From a server that ignored Range, the object again in one GET: not by ranges.
    fresh = Discovery(size=discovery.size, etag=discovery.etag, whole=discovery.range_ignored)
    verifier = Verifier(policy, verifier.expected)
    fetched = await _fetch(ctx, obj, job, fresh, verifier=verifier, progress=progress, found=found)
    return fresh, *fetched


async def _discover(ctx: Context, obj: S3Object, job: Job) -> Discovery:
    """Size and ETag (from the caller, or the strategy's first request), and the
    checksum HEAD when the policy needs one that the GETs will not carry.

    The HEAD goes out alongside the first GET, so latency stays one round trip, and
    nothing waits for it until every part is written: a part holding a slot of the
    budget while it waited for the HEAD's slot could deadlock the engine. The open
    first answer and the HEAD are handed on unawaited (the caller releases both).
    """
    head = None
    if _needs_checksum_head(ctx, obj, job):
        head = send_checksum_head(ctx.config, obj, job.etag)
    if job.size is not None and job.etag is not None:
        return Discovery(size=job.size, etag=job.etag, checksum_head=head)
    try:
        discovery = await _discover_with_retries(ctx, obj, job)
    except BaseException:
        if head is not None:
            await _reap(head)
        raise
    if (
        head is None
        and obj.checksum_heads
        and ctx.config.validate == "when_available"
        and job.expected is None
        and discovery.checksum is None
        and discovery.first is not None
        and discovery.first_end < discovery.size
        and discovery.etag is not None
    ):
        # The first answer's headers say more is to come: its ranged GETs carry no
        # checksum, so a HEAD asks for it now, alongside the fan-out, pinned to the
        # ETag the bytes are (it answers long before the parts do).
        head = send_checksum_head(ctx.config, obj, discovery.etag)
    discovery.checksum_head = head
    return discovery


def _needs_checksum_head(ctx: Context, obj: S3Object, job: Job) -> bool:
    """Whether a HEAD for S3's checksum goes out with the first request: for listed
    objects whose GETs will not carry it (several requests, or multipart: a COMPOSITE
    checksum is checked along the upload's parts), and for ``"required"`` GET-first
    (its ranged first answer carries none). HEAD-first's own HEAD asks for it."""
    if ctx.config.validate == "off" or job.expected is not None or not obj.checksum_heads:
        return False
    if job.size is not None and job.etag is not None:
        return job.size > ctx.config.chunk_size or _multipart(job.etag)
    return ctx.config.validate == "required" and job.strategy.name == "get-first"


async def _discover_with_retries(ctx: Context, obj: S3Object, job: Job) -> Discovery:
    chunk_size, size, etag = ctx.config.chunk_size, job.size, job.etag
    return await with_retries(
        ctx.config,
        lambda: job.strategy.discover(obj, chunk_size=chunk_size, size=size, etag=etag),
        bucket=obj.bucket,
        key=obj.key,
        what="discovery",
        counters=ctx.counters,
    )


async def _fetch(
    ctx: Context,
    obj: S3Object,
    job: Job,
    discovery: Discovery,
    *,
    verifier: Verifier,
    progress: Reporter,
    found: resume.Resume,
) -> tuple[Verification, TempFile]:
    """Write every byte of the object into a temp file and check it; the caller
    publishes it. On any failure the temp file is gone (a partial file stays)."""
    config = ctx.config
    first, size, etag = discovery.first, discovery.size, discovery.etag
    temp: TempFile | None = None
    try:
        # Held before any await, so a cancelled create is still cleaned up. Without an
        # ETag nothing pins the rest. An object that fits one write takes a plain temp
        # file unless it continues an earlier attempt's partial: what a partial of it
        # would keep is less than one write, cheaper fetched again than journaled (and
        # a listed one's is never looked for, see resume.discover).
        if (
            config.resume
            and etag is not None
            and (found.adopt or not resume.fits_one_write(config, size))
        ):
            temp = resume.partial_file_for(
                obj,
                job.target,
                job.extra_args,
                etag,
                size,
                fsync=config.fsync,
                found=found,
                where=job.where,
            )
        else:
            temp = TempFile(job.target, size, fsync=config.fsync, where=job.where)
        if verifier.pending is not None and discovery.checksum is not None:
            # The answer was the whole object and brought the checksum: the HEAD sent
            # for it is not needed.
            await verifier.abandon()
        if first is None and verifier.pending is not None and _multipart(etag):
            # Listed multipart object: whether its checksum is COMPOSITE decides how it
            # is fetched, so the HEAD is awaited first (no slot is held meanwhile).
            await verifier.settle(obj, etag)
        # One response holds the whole object (the open first one, or one plain GET,
        # which works for empty objects where any Range is a 416): no part tasks.
        whole_in_first = first is not None and discovery.first_end == size
        if (
            whole_in_first
            and not discovery.range_ignored  # a whole-object GET asked for the checksum
            and discovery.checksum is None
            and verifier.pending is None
            and obj.checksum_heads
        ):
            verifier.missing_reason = _FIT_FIRST_ANSWER
        one_plain_get = (
            first is None
            and not discovery.complete
            and (size <= config.chunk_size or discovery.whole)
            # A COMPOSITE checksum is checked only along upload parts, not in one GET.
            and not (verifier.wants_parts and size > 0)
        )
        if etag is None and not (whole_in_first or discovery.complete):
            # Without an ETag no request can be pinned to the version the others
            # fetched: one GET of the whole object is the only consistent answer (a
            # retry starts it over, see parts.fetch_part).
            logger.info(
                "%s: the server sent no ETag, so ranged GETs cannot be pinned to "
                "one version of the object; fetching it in one GET",
                source_name(obj.bucket, obj.key),
            )
            if first is not None:
                first.close()
                first = None
            one_plain_get = True
            verifier.missing_reason = "the server sent no ETag to pin a checksum HEAD to"
        if (
            not (whole_in_first or one_plain_get or discovery.complete)
            or size > config.write_size
            or found.adopt
        ):
            await temp.open()
        # Otherwise one sequential writer, small enough for one write: the file is
        # created, written, closed and renamed in one executor hop, not three.
        fetch = Fetch(ctx, obj, temp, etag, size, verifier, progress)
        # Only a resumed discovery (no first answer) adopts a partial file.
        gaps = await resume.reuse(temp, verifier, obj, progress, found) if found.adopt else None
        if gaps is not None:
            await fetch_ranges(fetch, None, 0, 0, gaps)
        elif whole_in_first or one_plain_get:
            response, first = first, None
            await fetch_part(fetch, Part(0, size), response)
        elif not discovery.complete:
            first, opened = None, first
            await _fetch_body(fetch, opened, discovery.first_end)
        return await verifier.finish(temp, obj, etag), temp
    except BaseException as exc:
        failure = first_failure(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if first is not None:
            first.close()
        if isinstance(temp, PartialFile):
            # A partial file of an object that changed, or whose bytes did not check
            # out, is of no use to the next attempt.
            temp.drop = isinstance(failure, ObjectChangedError | ChecksumError)
        if temp is not None:
            temp.discard()
        await verifier.abandon()
        if isinstance(temp, PartialFile):
            await temp.released()
        if failure is not exc:
            # Keep the failure's own cause; the group around it is noise.
            raise failure from failure.__cause__
        raise


async def _fetch_body(fetch: Fetch, first: Response | None, first_end: int) -> None:
    """Fetch an object of more than one request: by byte ranges, or along its upload
    parts when only those can check its COMPOSITE checksum."""
    verifier = fetch.verifier
    offset = 0
    if first is not None and (
        verifier.wants_parts or (verifier.pending is not None and _multipart(fetch.etag))
    ):
        # The first answer's bytes are on their way: write them (which frees its slot),
        # then learn from the HEAD sent with it whether a multipart object's checksum
        # is COMPOSITE before choosing how to fetch the rest.
        opened, first = first, None
        await fetch_part(fetch, Part(0, first_end), opened)
        offset = first_end
        await verifier.settle(fetch.obj, fetch.etag)
    if verifier.wants_parts:
        if await fetch_by_part_number(fetch, offset):
            return
        # Fail before the bytes, not after them, when nothing could check them.
        verifier.refuse_if_uncheckable(fetch.obj)
    await fetch_ranges(fetch, first, first_end, offset)


async def _reap(task: asyncio.Task[Any]) -> None:
    """Cancel a side task and wait for it, so nothing is left running or unretrieved."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
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


_NO_DEADLINE = contextlib.nullcontext()

_FIT_FIRST_ANSWER = (
    "the object fit in the first, ranged answer, which carries no checksum, and no "
    "request is added just to get one: validate='required', strategy='head-first' or "
    "listing metadata (size and ETag) have such an object checked"
)


def _multipart(etag: str | None) -> bool:
    """A multipart upload's ETag ends in ``-<parts>``; its checksum may be COMPOSITE."""
    return etag is not None and "-" in etag.strip('"')
