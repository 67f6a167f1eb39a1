"""The rest of a body written into its file straight from the socket, on the engine's
own HTTP client: for a body framed by Content-Length, the connection's protocol gives
way to a :class:`Diversion` (an ``asyncio.BufferedProtocol``) that the loop receives
into (``recv_into`` a buffer of its own, reused) and that writes each read from that
buffer with ``os.pwrite`` at the body's offset in the file, in the loop's callback.

Read as pieces, every byte is received into a new ``bytes`` (one allocation per read,
and its pages), handed through the answer and the reader, then written: the
diversion makes no object per read and copies nothing in user space
(benchmarks/README.md has what a 512 MiB object costs this way).

Each write stays within a multiple of :data:`STEP` in the file (``file_writes``
says why). A checksum is run over each write's bytes as it is made. The writes are
timed by the download's write policy (``quick_io.QUICK_WRITES``): once it sends
writes off the loop (a slow file system), the diversion hands the body back to its
connection, and the bytes it holds go on as pieces; the rest is read as before.

Everything else about the body is its answer's: the connection ends the answer where
the framing says, a cut fails it (the bytes written before the cut stay written and
counted), and bytes past its end drop the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")

#: Bytes one write takes at most, never across a multiple of it (``WRITE_STEP``).
STEP = 32 * 1024
#: The diversion's buffer: a multiple of STEP. 128 and 256 KiB cost 8-12 % less CPU per
#: byte than 512 KiB and 1 MiB (benchmarks/README.md, "The recv-into floor").
BUFFER = 256 * 1024


class CutOff(Exception):
    """The connection closed before the body's end."""


class WritePolicy(Protocol):
    """Whether writes may run on the loop, and their timing (``quick_io.QuickWrites``)."""

    def allowed(self) -> bool: ...

    def timed(self, function: Callable[[], _T]) -> _T: ...


@dataclass(frozen=True, slots=True)
class Into:
    """Where and how a diverted body is written: the file and the offset of the body's
    next byte, the write policy, the CRC run over the writes (``None``: none) and its
    value so far, and what to tell of each read (the stall watch)."""

    fd: int
    offset: int
    policy: WritePolicy
    crc: Callable[[Any, Any], Any] | None
    crc_value: Any
    touch: Callable[[], None]


class Diverted(Protocol):
    """What a diversion asks of the connection it stands in for."""

    def diversion_ended(self, overrun: bool) -> None:
        """The body was all written (``overrun``: bytes came past its end)."""

    def diversion_handed_back(self, left: int, held: bytes) -> None:
        """Writes must leave the loop: ``held`` (received, unwritten) and ``left``
        bytes after them go on as pieces."""

    def diversion_lost(self, exc: Exception | None) -> None:
        """The connection was lost under the diversion."""

    def drop(self) -> None:
        """Close the connection: its framing is no longer known."""


class Diversion(asyncio.BufferedProtocol):
    """The rest of one body (``left`` bytes) written as ``into`` says, received into
    ``buffer`` (``BUFFER`` bytes, the connection's: no other diversion uses it
    meanwhile, as the connection carries one answer at a time)."""

    def __init__(
        self,
        conn: Diverted,
        left: int,
        into: Into,
        buffer: bytearray,
    ) -> None:
        self._conn = conn
        self._fd = into.fd
        self._offset = offset = into.offset
        #: Body bytes not yet written, those received into the buffer included.
        self.left = left
        #: Bytes written so far, and the CRC over them from ``into.crc_value``.
        self.written = 0
        self.crc_value = into.crc_value
        self._crc = into.crc
        self._policy = into.policy
        self._touch = into.touch
        #: The connection's (see ``BUFFER``), reused by its later bodies.
        self._buffer = buffer
        self._view = memoryview(self._buffer)
        # The buffer's index of each byte is its file offset modulo STEP: whole steps
        # are written where they are, and a full buffer is all written.
        self._filled = self._start = offset % STEP
        #: Done once the body is written (or handed back); failed with what broke it.
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Writes go on: not once the body is written, handed back, failed or left.
        self._writing = True
        #: The connection's transport reads into this diversion.
        self._attached = True

    # --- asyncio.BufferedProtocol -----------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        if not self._writing:
            return  # failed or left: the connection is being closed
        self._filled += nbytes
        self._touch()
        try:
            if self._policy.allowed():
                self._policy.timed(self._write)
            if self._writing and not self._policy.allowed():
                self._hand_back()
        except OSError as exc:
            self.fail(exc)
            self.abandon()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost ends the body

    def connection_lost(self, exc: Exception | None) -> None:
        self._write_held()  # good bytes, as a piece read before a cut is
        if self._attached:
            self._attached = False
            self._conn.diversion_lost(exc)
        if not self.done.done():
            self.done.set_exception(CutOff("the connection closed before the answer ended"))

    def pause_writing(self) -> None:  # the request went out before the body came
        pass

    def resume_writing(self) -> None:
        pass

    # --- the caller's side ------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """No more writes; ``done`` raises ``exc`` (a stall verdict, a write's error).
        The caller abandons the diversion then."""
        self._write_held()
        if not self.done.done():
            self.done.set_exception(exc)

    def abandon(self) -> None:
        """The caller left (or the body failed): nothing more is written, and the
        connection, still in the middle of the body, is closed."""
        self._writing = False
        # How it ended is nobody's news once the caller left: an outcome never awaited
        # (the close that this causes fails it) would be logged as never retrieved.
        done = self.done
        if not done.done():
            done.cancel()
        elif not done.cancelled():
            done.exception()
        if self._attached:
            self._conn.drop()

    # --- writing ----------------------------------------------------------------------
    def _write_held(self) -> None:
        """Write what was received and not yet written (the body goes no further); no
        more writes after it. An error here is the body's failure's to report: the
        bytes not written are fetched again."""
        if self._writing:
            self._writing = False
            with contextlib.suppress(OSError):
                self._write(held=True)

    def _write(self, *, held: bool = False) -> None:
        """Write the whole steps received (``held``: all that was received)."""
        stop = self._filled
        overrun = stop - self._start > self.left
        if overrun:
            stop = self._start + self.left
        complete = stop - self._start == self.left
        if not (complete or held):
            stop -= stop % STEP
        start, offset, view, fd = self._start, self._offset, self._view, self._fd
        crc, value = self._crc, self.crc_value
        try:
            while start < stop:
                end = min(stop, start + STEP - offset % STEP)
                # pwrite may write less than asked (a signal): it goes on from there.
                written = os.pwrite(fd, view[start:end], offset)
                if crc is not None:
                    value = crc(view[start : start + written], value)
                start, offset = start + written, offset + written
        finally:
            self.crc_value = value
            self.left -= start - self._start
            self.written += start - self._start
            self._start, self._offset = start, offset
        if complete and self._attached:
            self._writing = self._attached = False
            self._conn.diversion_ended(overrun)
            if not self.done.done():
                self.done.set_result(None)
        elif self._filled == len(self._buffer):
            self._filled = self._start = 0

    def _hand_back(self) -> None:
        self._writing = self._attached = False
        held = bytes(self._view[self._start : self._filled])
        self._conn.diversion_handed_back(self.left, held)
        if not self.done.done():
            self.done.set_result(None)
