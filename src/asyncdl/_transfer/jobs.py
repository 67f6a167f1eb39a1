"""A download as asked, every part of it checked: :func:`check` (an S3 object) and
:func:`check_url` (a URL) refuse bad input before anything is sent or written, and
return the :class:`Job` that ``transfer.run`` carries out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .._files import quick_io
from .._files.held_dirs import HeldDir
from .._wire.checksums import ExpectedChecksum, parse_checksum
from .._wire.request_args import (
    ExtraArgs,
    check_bucket_and_key,
    check_extra_args,
    check_size_and_etag,
    check_target,
)
from .._wire.url_source import check_url as check_url_text
from ..config import finite
from ..errors import InvalidRequestError
from .context import Context
from .strategies import GetFirst, Strategy, resolve_strategy


# Not frozen: a frozen dataclass pays an object.__setattr__ per field on creation, and
# one Job is made per object of a bulk download. Nothing changes a Job once made.
@dataclass(slots=True)
class Job:
    """A download as asked, every part of it checked."""

    bucket: str
    key: str
    target: Path
    strategy: Strategy
    extra_args: ExtraArgs
    #: What the caller (a listing, say) knows of the object.
    size: int | None
    etag: str | None
    expected: ExpectedChecksum | None
    timeout: float | None
    #: A download from this URL instead of ``bucket``/``key`` (``key`` is the URL as
    #: shown, ``bucket`` empty).
    url: str | None = None
    #: The target's directory, held open since a listing decided it (``held_dirs``):
    #: the download's files are made in it, not by their paths (``None``: by paths).
    where: HeldDir | None = None


async def check(
    ctx: Context,
    bucket: str,
    key: str,
    path: str | os.PathLike[str],
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    size: int | None,
    etag: str | None,
    timeout: float | None,
    checksum: str | None,
) -> Job:
    """The download as a :class:`Job`, or ``InvalidRequestError``: nothing is sent and
    nothing touched on disk before every argument is known good."""
    check_bucket_and_key(bucket, key)
    where = {"bucket": bucket, "key": key}
    args = check_extra_args(extra_args, **where)
    target: Path = await quick_io.QUICK_IO.call(check_target, path, **where)
    size, etag = check_size_and_etag(size, etag, bucket=bucket, key=key)
    try:
        chosen = resolve_strategy(strategy, ctx.client)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), **where) from None
    _check_timeout(timeout, where)
    expected = _checksum(checksum, where)
    return Job(bucket, key, target, chosen, args, size, etag, expected, timeout)


async def check_url(
    url: str,
    path: str | os.PathLike[str],
    *,
    timeout: float | None,
    checksum: str | None,
) -> Job:
    """A download from ``url`` as a :class:`Job` (GET-first, no arguments: the URL
    carries them), or ``InvalidRequestError`` before anything is sent or written."""
    shown = check_url_text(url)
    where = {"bucket": "", "key": shown}
    target: Path = await quick_io.QUICK_IO.call(check_target, path, **where)
    _check_timeout(timeout, where)
    expected = _checksum(checksum, where)
    if expected is not None and expected.composite:
        raise InvalidRequestError(
            "a COMPOSITE checksum is checked along upload parts, which a URL cannot fetch",
            **where,
        )
    return Job("", shown, target, GetFirst(), {}, None, None, expected, timeout, url=url)


def _check_timeout(timeout: float | None, where: dict[str, str]) -> None:
    if timeout is not None and (not finite(timeout) or timeout <= 0):
        raise InvalidRequestError(
            f"timeout must be a number of seconds > 0, got {timeout!r}", **where
        )


def _checksum(checksum: str | None, where: dict[str, str]) -> ExpectedChecksum | None:
    if checksum is None:
        return None
    try:
        return parse_checksum(checksum)
    except (ValueError, AttributeError) as exc:
        raise InvalidRequestError(str(exc), **where) from None
