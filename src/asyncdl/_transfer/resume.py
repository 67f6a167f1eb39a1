"""Continuing a download from an earlier attempt's partial file (``resume=True``).

At the start, :func:`discover` looks for the target's journal (one ``open`` when
there is none; nothing at all for a listed object that fits one write, which is
never journaled). One of the same object (bucket, key, VersionId, target) is
continued when the object is still the same: the listed size and ETag say so, or a
HEAD pinned with ``If-Match`` to the journal's ETag (it brings the checksum too;
412: the object changed). Where HEAD is refused (some bucket policies allow GET
only), a one-byte ranged GET pinned the same way confirms it, as a URL's downloads
do; the checksum then goes unread, and the result says why. Otherwise it is
discarded (removed) and the result says why. When the partial file opens (its
ranges read back and checked first, unless ``fsync=True`` wrote them all: see
``partial_file``), :func:`reuse` takes its recorded ranges: their CRCs feed the check
as if the bytes had just arrived, and only the gaps are fetched. The files
themselves, their lock and their journal: ``partial_file``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from .._files import partial_paths, quick_io
from .._files.held_dirs import HeldDir
from .._files.journal import Header
from .._files.partial_file import PartialFile
from .._files.partial_paths import Busy
from .._files.writer import TempFile
from .._wire.ranges import ByteRange
from .._wire.request_args import ExtraArgs
from .._wire.retry import logger, with_retries
from .._wire.s3_source import ObjectMeta, RangeNotSatisfiable, S3Object
from ..config import TransferConfig
from ..errors import (
    AccessDeniedError,
    DownloadError,
    ObjectChangedError,
    TargetBusyError,
    source_name,
)
from ..progress import Reporter
from .context import Context
from .parts import write_target
from .strategies import Discovery
from .verify import Verifier, send_checksum_head


@dataclass(slots=True)
class Resume:
    """What a ``resume=True`` download found of an earlier attempt, and kept of it."""

    #: Take over the partial file's recorded bytes when it opens.
    adopt: bool = False
    #: Why an earlier attempt's partial file was found and not used.
    discarded: str | None = None
    #: Bytes taken from the partial file.
    reused: int = 0


def fits_one_write(config: TransferConfig, size: int) -> bool:
    """Whether an object of ``size`` bytes is written in one write (one part, that
    gathers all of it before it writes: ``parts.write_target``): it is never
    journaled, so a download of it makes no partial file and looks for none."""
    return size <= min(config.chunk_size, write_target(config))


def partial_file_for(
    obj: S3Object,
    target: Path,
    extra_args: ExtraArgs,
    etag: str,
    size: int,
    *,
    fsync: bool,
    found: Resume,
    where: HeldDir | None = None,
) -> PartialFile:
    """The file a ``resume=True`` download of ``size`` bytes at ``etag`` writes into
    (``where``: its directory, held open)."""
    header = Header(obj.bucket, obj.key, _version(extra_args), etag, size, target.name)
    error = busy(obj, target)
    return PartialFile(target, header, error, fsync=fsync, adopt=found.adopt, where=where)


def _version(extra_args: ExtraArgs) -> str | None:
    version = extra_args.get("VersionId")
    return None if version is None else str(version)


def busy(obj: S3Object, target: Path) -> Busy:
    def error() -> TargetBusyError:
        message = (
            f"another download is writing {str(target)!r} (its partial file is locked); "
            "nothing of it was touched"
        )
        return TargetBusyError(message, bucket=obj.bucket, key=obj.key)

    return error


async def discover(
    ctx: Context,
    obj: S3Object,
    target: Path,
    extra_args: ExtraArgs,
    *,
    size: int | None,
    etag: str | None,
    checksum_head: bool,
    found: Resume,
    where: HeldDir | None = None,
) -> Discovery | None:
    """The discovery of a download that continues an earlier attempt's partial file,
    or ``None`` (the usual discovery follows): there is none, or it was discarded, and
    ``found.discarded`` says why. ``size``/``etag``: what a listing said;
    ``checksum_head``: whether a listed object needs the HEAD for its checksum."""
    if size is not None and fits_one_write(ctx.config, size):
        return None  # never journaled
    error = busy(obj, target)
    # Its header alone: a journal's ranges are read once, when the partial is adopted.
    dir_fd = None if where is None else where.fd
    journal = await quick_io.QUICK_IO.call(
        partial_paths.lookup, target, error, header_only=True, dir_fd=dir_fd
    )
    if journal is None:
        return None
    header, why = journal.header, journal.damaged
    if header is not None and why is None:
        ours = (obj.bucket, obj.key, _version(extra_args), target.name)
        if (header.bucket, header.key, header.version, header.target) != ours:
            why = f"it is of another object ({source_name(header.bucket, header.key)})"
        elif etag is not None and etag != header.etag:
            why = f"the object changed (ETag {etag}, the partial's {header.etag})"
        elif size is not None and size != header.size:
            why = f"the object changed ({size} bytes, the partial's {header.size})"
    discovery = None
    if why is None and header is not None:
        if size is not None and etag is not None:
            head = send_checksum_head(ctx.config, obj, etag) if checksum_head else None
            discovery = Discovery(size=size, etag=etag, checksum_head=head)
        else:
            discovery = await _pinned_head(ctx, obj, header)
            if discovery is None:
                why = f"the object changed (its ETag is no longer {header.etag})"
            elif discovery.size != header.size:
                why = f"the object changed ({discovery.size} bytes, the partial's {header.size})"
                discovery = None
    if discovery is not None:
        found.adopt = True
        return discovery
    found.discarded = f"a partial file was found, but {why}; it was discarded"
    await quick_io.QUICK_IO.call(partial_paths.remove, target, error, dir_fd=dir_fd)
    return None


async def _pinned_head(ctx: Context, obj: S3Object, header: Header) -> Discovery | None:
    """A HEAD pinned to the partial's ETag: the object's size and checksum, or ``None``
    when it changed (412). A refused HEAD (403) is asked again as a pinned one-byte
    GET. Any other failure fails the download; the partial stays."""
    try:
        meta = await with_retries(
            ctx.config,
            lambda: obj.head(if_match=header.etag),
            bucket=obj.bucket,
            key=obj.key,
            what="discovery",
            counters=ctx.counters,
        )
    except ObjectChangedError:
        return None
    except AccessDeniedError as refused:
        return await _pinned_get(ctx, obj, header, refused)
    return Discovery(size=meta.size, etag=meta.etag or header.etag, checksum=meta.checksum)


async def _pinned_get(
    ctx: Context, obj: S3Object, header: Header, refused: DownloadError
) -> Discovery | None:
    """A GET of the first byte pinned to the partial's ETag: its Content-Range has the
    size. Its answer carries no checksum; where the policy wants one, the refused HEAD
    is what the check hears of (no second HEAD is sent to be refused again)."""

    async def probe() -> int:
        try:
            response = await obj.get(ByteRange(0, 1), if_match=header.etag)
        except RangeNotSatisfiable:
            return 0  # empty now: not the partial's object
        try:
            content_range = response.content_range
            if response.status == 200 and content_range is None:
                return response.content_length  # Range ignored: the whole object's
            if response.status != 206 or content_range is None or content_range.start != 0:
                raise obj.error(f"unexpected answer to a one-byte ranged GET: {response.status}")
            return content_range.total
        finally:
            response.close()

    try:
        size = await with_retries(
            ctx.config,
            probe,
            bucket=obj.bucket,
            key=obj.key,
            what="discovery",
            counters=ctx.counters,
        )
    except ObjectChangedError:
        return None
    checksum_head = None
    if ctx.config.validate != "off" and obj.checksum_heads:

        async def head_refused() -> ObjectMeta:
            raise refused

        checksum_head = asyncio.create_task(head_refused())
    return Discovery(size=size, etag=header.etag, checksum_head=checksum_head)


async def reuse(
    temp: TempFile, verifier: Verifier, obj: S3Object, progress: Reporter, found: Resume
) -> list[tuple[int, int]] | None:
    """Take the bytes an earlier attempt left in the partial file: their recorded CRCs
    feed the check as if they had just been fetched. Returns the ranges still to
    fetch, or ``None`` when nothing is reused: a COMPOSITE checksum is checked along
    upload parts, which are then all fetched again (the simple way that stays correct).
    ``None`` too for a file that took nothing over."""
    if not isinstance(temp, PartialFile):
        return None
    if temp.refused is not None:
        found.discarded = f"a partial file was found, but {temp.refused}; it was discarded"
    if temp.unmatched:
        # Written with fsync=False, then a crash of the machine (or a hand): what the
        # journal recorded was not all on the disk.
        what = f"{temp.unmatched} recorded bytes did not read back as its journal recorded them"
        logger.info(
            "%s: of its partial file, %s; fetched again", source_name(obj.bucket, obj.key), what
        )
        if not temp.adopted:
            found.discarded = f"a partial file was found, but {what}; it was discarded"
    if not temp.adopted:
        return None
    # The checksum's algorithm says which recorded CRC counts: wait for the HEAD that
    # brings it, if one is on its way (no slot is held meanwhile).
    await verifier.settle(obj, temp.header.etag)
    if verifier.wants_parts:
        return None
    algorithm = verifier.expected.algorithm if verifier.expected is not None else None
    gaps: list[tuple[int, int]] = []
    position = reused = 0
    for start, end, crcs in temp.adopted:
        if start > position:
            gaps.append((position, start))
        # A range recorded without this algorithm's CRC is read back from the file.
        verifier.add_part(start, end, crcs.get(algorithm) if algorithm is not None else None)
        reused += end - start
        position = end
    if position < temp.size:
        gaps.append((position, temp.size))
    found.reused = reused
    await progress.add(reused)
    return gaps
