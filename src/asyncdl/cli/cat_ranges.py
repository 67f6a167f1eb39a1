"""``asyncdl cat --range``: byte ranges of one object to stdout, in the order given,
all from one version of it (``Engine.read_ranges``: coalesced, pinned).

Closed ranges (``100-199``) need no size: the first GET brings it. An open
(``100-``) or suffix (``-50``) range is resolved against the size of a HEAD first
(one request more, and every GET pinned to its ETag); a URL has no HEAD (a
presigned URL is signed for GET only), so for one such ranges are refused before
anything is sent. The ranges are read into memory, then written: ``cat`` without
``--range`` streams a whole object instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from ..errors import DownloadError
from .app import Settings
from .output import Output, ReaderGone, silence_stdout
from .params import HttpUrl, RangeArg, S3Url
from .work import _open_engine, run


def check_ranges(source: S3Url | HttpUrl, ranges: tuple[RangeArg, ...]) -> None:
    """A usage error, before anything is sent, for what cannot be done from a URL."""
    if isinstance(source, HttpUrl) and any(r.end is None for r in ranges):
        raise click.UsageError(
            "--range FIRST- and -COUNT need the object's size, which a URL has no HEAD to "
            "tell: give FIRST-LAST ranges"
        )


def cat_ranges(settings: Settings, source: S3Url | HttpUrl, ranges: tuple[RangeArg, ...]) -> int:
    import sys  # noqa: PLC0415 - stdout as the command runs (CliRunner swaps it)

    stdout = sys.stdout.buffer
    output = Output(objects=1, quiet=settings.quiet, debug=settings.debug, bar=False)
    with output:
        run(_ranges_to(settings, source, ranges, stdout, output), settings.debug)
    return output.summary()


async def _ranges_to(
    settings: Settings,
    source: S3Url | HttpUrl,
    ranges: tuple[RangeArg, ...],
    sink: Any,
    output: Output,
) -> None:
    async with _open_engine(settings, output, source=source) as engine:
        try:
            if isinstance(source, HttpUrl):
                asked = [r.resolve(None) for r in ranges]
                pieces = await engine.read_ranges_url(source.url, asked)
            else:
                size = etag = None
                if any(r.end is None for r in ranges):
                    info = await engine.head(source.bucket, source.key)
                    size, etag = info.size, info.etag
                asked = [r.resolve(size) for r in ranges]
                pieces = await engine.read_ranges(
                    source.bucket, source.key, asked, size=size, etag=etag
                )
        except DownloadError as error:
            # A range past the end included: the size came with an answer, so a request
            # was sent and this is the object's failure, not a usage error.
            output.count(error)
            return
        try:
            for piece in pieces:
                # In a thread: a slow reader of the pipe must not block the loop.
                await asyncio.to_thread(sink.write, piece)
            await asyncio.to_thread(sink.flush)
        except BrokenPipeError:
            silence_stdout()
            raise ReaderGone from None
    output.count(None)
