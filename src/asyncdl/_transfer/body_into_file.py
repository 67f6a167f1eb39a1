"""A part's body written into the temp file straight from the socket, when nothing
needs its bytes on the way: the engine's own HTTP client hands the rest of a body
framed by Content-Length to a diversion (:mod:`asyncdl._wire.own_direct`) that
receives it into a buffer of its own and writes it from there, no object per read.

Taken by a part only when its bytes go to the file as they came and only there: not
a stream's (its reader takes the pieces), not under a bandwidth cap (it takes each
read's bytes), not a part cut short or resumed from a whole answer (bytes skipped or
dropped), not a partial (each write appends a journal line), and while the
download's writes may run on the loop. The checksum runs over each write as it is
made; the stall watch is told of each read; the byte count and progress are told
of the bytes written every ``_REPORT_EVERY`` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .._files import quick_io
from .._wire.body_reader import BodyReader
from .._wire.own_answer import OwnResponse
from .._wire.own_direct import CutOff, Into
from ..errors import RetryableError, describe

#: Seconds between reports of the bytes a body written this way has written so far
#: (the part's position, the byte count, progress): each is a task switch, and a
#: part's body is written in tens of milliseconds on a fast link.
_REPORT_EVERY = 0.25

#: Told the bytes written since it was last told, and the CRC over the part so far.
Advance = Callable[[int, Any], None]


async def write_rest(
    body: OwnResponse,
    fd: int,
    offset: int,
    reader: BodyReader,
    *,
    crc: Callable[[Any, Any], Any] | None,
    crc_value: Any,
    advance: Advance,
    report: Callable[[int], Awaitable[None]] | None,
) -> bool:
    """Write the rest of ``body`` into ``fd`` from ``offset``; False when it cannot be
    (the caller reads it as pieces). ``advance`` is told each run of bytes written,
    and ``report`` (progress) of them; a cut raises ``RetryableError`` with the bytes
    before it written and told."""
    policy = quick_io.QUICK_WRITES
    if not policy.allowed():
        return False  # writes go off the loop for now: the pieces' way
    diversion = body.divert(Into(fd, offset, policy, crc, crc_value, reader.touch))
    if diversion is None:
        return False
    told = 0

    def tell() -> int:
        nonlocal told
        new = diversion.written - told
        if new:
            told = diversion.written
            advance(new, diversion.crc_value)
        return new

    try:
        # Told as it goes, with or without a progress callback: the byte count
        # (``engine.stats()``, what an exporter samples) moves while a long body is
        # written, not all at its end.
        while not diversion.done.done():
            await asyncio.wait((diversion.done,), timeout=_REPORT_EVERY)
            if (new := tell()) and report is not None:
                await report(new)
        diversion.done.result()
    except CutOff as exc:
        raise RetryableError(f"the body broke off: {describe(exc)}") from None
    finally:
        diversion.abandon()  # nothing once it ended; else the connection is closed
        new = tell()
        if new and report is not None and not _cancelled():
            await report(new)
    return True


def _cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
