"""Writing pieces into a file: one ``pwritev`` per write, and the writes of one turn
of the event loop in one executor hop.

A part's pieces are written as the network delivered them: joining them into one
buffer first would copy every byte (and fault in fresh pages for it). A thread
round trip costs tens of microseconds of CPU (a future, a wake-up on each side);
parts whose bytes arrived in the same turn of the loop write in the same hop, so
64 parts streaming at once cost about one hop per turn, not one per write.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_Crc = TypeVar("_Crc")
#: A running CRC: the value so far and more bytes give the new value.
CrcOf = Callable[[bytes, _Crc], _Crc]
#: A write waiting for its hop: offset, pieces, CRC, CRC so far, and its outcome.
_Job = tuple[int, Sequence[bytes], Any, Any, "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


class WriteHops:
    """Runs ``write(offset, pieces, crc, previous)`` (blocking; it returns the CRC so
    far) in the loop's executor, every write issued until the loop's next turn in one
    hop. A write whose caller was cancelled still runs, as an executor call would."""

    def __init__(self, write: Callable[[int, Sequence[bytes], Any, Any], Any]) -> None:
        self._write = write
        self._jobs: list[_Job] = []

    async def write(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[_Crc] | None, previous: _Crc
    ) -> _Crc:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_Crc] = loop.create_future()
        self._jobs.append((offset, chunks, crc, previous, done))
        if len(self._jobs) == 1:
            loop.call_soon(self._hop, loop)
        return await done

    def _hop(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs, self._jobs = self._jobs, []
        try:
            loop.run_in_executor(None, self._run, loop, jobs)
        except RuntimeError as exc:  # the executor is shut down
            _deliver([(job[-1], None, exc) for job in jobs])

    def _run(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        outcomes: list[_Outcome] = []
        for offset, chunks, crc, previous, done in jobs:
            try:
                outcomes.append((done, self._write(offset, chunks, crc, previous), None))
            except Exception as exc:  # the awaiting part's to handle
                outcomes.append((done, None, exc))
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_deliver, outcomes)


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


def write_all(fd: int, chunks: Sequence[bytes], offset: int) -> None:
    """Write ``chunks`` back to back from ``offset``: ``pwritev`` takes up to IOV_MAX
    of them per call, and a short write resumes where it stopped."""
    if not hasattr(os, "pwritev"):  # older macOS: one pwrite per chunk
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                written = os.pwrite(fd, view, offset)
                view = view[written:]
                offset += written
        return
    rest: list[Any] = list(chunks)
    while rest:
        batch = rest[:_IOV_MAX]
        written = os.pwritev(fd, batch, offset)
        offset += written
        done = 0
        while done < len(batch) and written >= len(batch[done]):
            written -= len(batch[done])
            done += 1
        del rest[:done]
        if written:
            rest[0] = memoryview(rest[0])[written:]
