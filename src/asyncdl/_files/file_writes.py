"""Writing pieces into a file: each write's pieces in calls of at most 32 KiB, on the
event loop while that is quick, else in the loop's executor, one hop at a time per file.

A part's pieces are written as the network delivered them: joining them into one
buffer first would copy every byte (and fault in fresh pages for it). Copying them
into the page cache from the thread that received them costs a fifth of what the
same copy costs from an executor thread (measured on a 512 MiB download: the
kernel's copy was a quarter of the client's CPU from the executor, and as cheap as
one plain stream's from the loop; the bytes sit in the caches of the core that read
the socket). A write on the loop is timed, as the other quick file calls are (see
:mod:`asyncdl._files.quick_io`): a file system whose writes are slow sends them back to
the executor. There a file takes one hop at a time, the writes issued meanwhile
all in the next: two threads writing one file wait for its lock in the kernel by
spinning, which cost as much CPU as the copies.

Each system call takes at most :data:`WRITE_STEP` bytes (see there): a write of
1 MiB is some 32 ``pwritev`` calls in the same hop, not one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import quick_io

_Crc = TypeVar("_Crc")
#: A running CRC: the value so far and more bytes give the new value.
CrcOf = Callable[[bytes, _Crc], _Crc]
#: A write waiting for its hop: offset, pieces, CRC, CRC so far, and its outcome.
_Job = tuple[int, Sequence[bytes], Any, Any, "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


#: Bytes a write may hold and still be made on the loop: a larger one (a
#: ``write_size`` raised well past its 1 MiB default) always goes to the executor.
LOOP_WRITE_MOST = 4 * 1024 * 1024

#: Bytes one write system call takes at most, and never across a multiple of it.
#: Linux (ext4 and XFS) gives a write's bytes page-cache folios as large as the call
#: allows: a 1 MiB call gets 1 MiB folios, carved from the allocator's large free
#: blocks, where calls of 32 KiB (order 3, the largest the per-CPU lists of freed
#: pages serve) mostly get pages just freed. A VM whose balloon reports free pages
#: to its host (Firecracker's does) has those large blocks handed back, and each of
#: their pages costs a fault in the host on first touch. Measured there, 512 MiB
#: written in 1 MiB calls took 0.9-1.5 s of system time after another program's
#: smaller writes or 10 s idle (0.10 s right after the same writes); in 32 KiB
#: calls 0.11-0.16 s. Elsewhere the smaller calls cost about 0.02 s more per 512 MiB.
WRITE_STEP = 32 * 1024


class WriteHops:
    """Runs ``write(offset, pieces, crc, previous)`` (blocking; it returns the CRC so
    far): on the loop while that is quick (:data:`~asyncdl._files.quick_io.QUICK_WRITES`) and
    no hop of this file is under way, else in the loop's executor, one hop at a time,
    every write issued while one is under way in the next. A write whose caller was
    cancelled still runs, as an executor call would."""

    def __init__(
        self, write: Callable[[int, Sequence[bytes], Any, Any], Any], *, on_loop: bool = True
    ) -> None:
        self._write = write
        #: False: every write in the executor (one that syncs to the disk, say).
        self._on_loop = on_loop
        self._jobs: list[_Job] = []
        #: From the first write queued until the hop that took the last one is back.
        self._busy = False

    async def write(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[_Crc] | None, previous: _Crc
    ) -> _Crc:
        policy = quick_io.QUICK_WRITES
        if (
            self._on_loop
            and not self._busy
            and policy.allowed()
            and _size(chunks) <= LOOP_WRITE_MOST
        ):
            result: _Crc = policy.timed(
                functools.partial(self._write, offset, chunks, crc, previous)
            )
            return result
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_Crc] = loop.create_future()
        self._jobs.append((offset, chunks, crc, previous, done))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._hop, loop)
        return await done

    def _hop(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs, self._jobs = self._jobs, []
        try:
            loop.run_in_executor(None, self._run, loop, jobs)
        except RuntimeError as exc:  # the executor is shut down
            self._landed(loop, [(job[-1], None, exc) for job in jobs])

    def _run(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        outcomes: list[_Outcome] = []
        for offset, chunks, crc, previous, done in jobs:
            try:
                outcomes.append((done, self._write(offset, chunks, crc, previous), None))
            except Exception as exc:  # the awaiting part's to handle
                outcomes.append((done, None, exc))
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(self._landed, loop, outcomes)

    def _landed(self, loop: asyncio.AbstractEventLoop, outcomes: list[_Outcome]) -> None:
        _deliver(outcomes)
        if self._jobs:
            self._hop(loop)
        else:
            self._busy = False


def _size(chunks: Sequence[bytes]) -> int:
    return sum(map(len, chunks))


def _deliver(outcomes: list[_Outcome]) -> None:
    for done, value, exc in outcomes:
        if done.done():  # its caller was cancelled; the write ran (or was refused) anyway
            continue
        if exc is None:
            done.set_result(value)
        else:
            done.set_exception(exc)


def crc_of(chunks: Sequence[bytes], crc: CrcOf[_Crc] | None, value: _Crc) -> _Crc:
    """``crc`` run over ``chunks`` from ``value`` (``value`` when ``crc`` is ``None``)."""
    if crc is not None:
        for chunk in chunks:
            value = crc(chunk, value)
    return value


def _iov_max() -> int:
    """Buffers one ``pwritev`` takes (POSIX promises at least 16; Linux and macOS 1024)."""
    try:
        return max(16, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):
        return 16


_IOV_MAX = _iov_max()
_PWRITEV = hasattr(os, "pwritev")
#: Positional write, where there is one (not on Windows).
_PWRITE: Callable[[int, Any, int], int] | None = getattr(os, "pwrite", None)


def write_all(fd: int, chunks: Sequence[bytes], offset: int) -> None:
    """Write ``chunks`` (of bytes) back to back from ``offset``, in calls of at most
    :data:`WRITE_STEP` bytes that never cross a multiple of it (each takes up to
    IOV_MAX buffers; a short write resumes where it stopped)."""
    batch: list[Any] = []
    room = WRITE_STEP - offset % WRITE_STEP
    for chunk in chunks:
        size = len(chunk)
        if size <= room:
            if size:
                batch.append(chunk)
                room -= size
        else:
            view = memoryview(chunk)
            start = 0
            if room < WRITE_STEP:  # the step under way (any batch is in it) is filled first
                batch.append(view[:room])
                offset, start = _write_batch(fd, batch, offset), room
                batch, room = [], WRITE_STEP
            # Whole steps straight from the piece: a large piece is most of the bytes.
            while size - start > WRITE_STEP:
                offset = _write_batch(fd, [view[start : start + WRITE_STEP]], offset)
                start += WRITE_STEP
            batch.append(view[start:])
            room -= size - start
        if room == 0 or len(batch) == _IOV_MAX:
            offset = _write_batch(fd, batch, offset)
            batch, room = [], WRITE_STEP - offset % WRITE_STEP
    if batch:
        _write_batch(fd, batch, offset)


def _write_batch(fd: int, batch: list[Any], offset: int) -> int:
    """Write every buffer of ``batch`` from ``offset``; the offset after them."""
    if _PWRITEV:
        written = os.pwritev(fd, batch, offset)
        if written == _size(batch):  # all of it, as a regular file's write does
            return offset + written
    else:
        written = 0
    return _write_rest(fd, batch, offset, written)


def _write_rest(fd: int, batch: list[Any], offset: int, written: int) -> int:
    """Write what is left of ``batch`` after ``written`` of its bytes went from
    ``offset`` (a short write, which a regular file rarely makes, or no ``pwritev``);
    the offset after it."""
    for buffer in batch:
        view = memoryview(buffer)
        if written >= len(view):
            written -= len(view)
            offset += len(view)
            continue
        view, offset, written = view[written:], offset + written, 0
        while view:
            if _PWRITE is not None:
                done = _PWRITE(fd, view, offset)
            else:  # no positional write (Windows): seek, then write
                os.lseek(fd, offset, os.SEEK_SET)
                done = os.write(fd, view)
            if not done:  # a file's write makes progress or fails: never spin
                raise OSError(errno.EIO, f"a write of {len(view)} bytes wrote none")
            view = view[done:]
            offset += done
    return offset
