"""A resumable download's files (``resume=True``): the partial file it writes into,
kept on failure, and its journal (see ``journal``), locked while the download runs.

Next to the target ``NAME``: ``.NAME.asyncdl-partial`` (the bytes at their offsets,
preallocated to the object's size) and ``.NAME.asyncdl-journal``. A write's line is
appended after ``pwritev`` returned, in the same executor call (with ``fsync=True``
after the partial was ``fdatasync``-ed): a killed process loses nothing it recorded;
a power loss, only with ``fsync=True``.

The download holds ``flock(LOCK_EX | LOCK_NB)`` on the journal from when it opens the
partial until it publishes or fails (no lock where ``fcntl`` is missing: Windows);
a second download of the same target fails at once (``TargetBusyError``), and a
killed process's lock goes with it. Reading a journal takes the lock shared, for
the few microseconds it reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiofiles.os import wrap

from . import journal
from .file_writes import CrcOf, crc_of, write_all
from .journal import Found, Header, Recorded
from .writer import TempFile, cut_name, preallocate

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PARTIAL_SUFFIX = ".asyncdl-partial"
JOURNAL_SUFFIX = ".asyncdl-journal"
_NAME_MAX = 255
_HASH = 8
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FLAGS = os.O_RDWR | os.O_APPEND | _CLOEXEC
#: Tries for the lock a download holds alone (a reader holds it a few microseconds).
_LOCK_TRIES = 5
#: Seconds a failed download waits for a write still running to release its lock.
_RELEASE_WAIT = 10.0
#: Makes the error a download gets when another one holds the journal's lock.
Busy = Callable[[], Exception]


def paths_for(target: Path) -> tuple[Path, Path]:
    """The partial file and the journal of ``target``, in its directory. A name too long
    for both suffixes is cut, and a hash of the whole name added, so two long names
    that share a start never share a partial."""
    name = target.name
    room = _NAME_MAX - 1 - len(JOURNAL_SUFFIX)
    if len(os.fsencode(name)) > room:
        digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:_HASH]
        name = f"{cut_name(name, room - _HASH - 1)}-{digest}"
    return (
        target.with_name(f".{name}{PARTIAL_SUFFIX}"),
        target.with_name(f".{name}{JOURNAL_SUFFIX}"),
    )


def _lock(fd: int, busy: Busy, *, shared: bool) -> None:
    """Lock, or raise ``busy()``. A writer waits a moment for readers (who hold the lock
    for microseconds), not for another writer (who holds it for a whole download)."""
    if fcntl is None:  # pragma: no cover - Windows
        return
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    for attempt in range(1 if shared else _LOCK_TRIES):
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if shared or attempt + 1 == _LOCK_TRIES:
                raise busy() from None
            time.sleep(0.002)


def _open_locked(
    path: Path, busy: Busy, *, create: bool = False, shared: bool = False
) -> int | None:
    """The journal at ``path``, open and locked, or ``None`` if there is none (and
    ``create`` is false). The lock is on the file the path still names: a journal
    unlinked by the download that held it is not one to lock."""
    for _ in range(8):
        try:
            fd = os.open(path, _FLAGS | (os.O_CREAT if create else 0), 0o666)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            _lock(fd, busy, shared=shared)
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "the journal keeps being replaced", str(path))


def lookup(target: Path, busy: Busy) -> Found | None:
    """The journal of ``target`` as read now (``None``: there is none; one ``open``
    finds that). Raises ``busy()`` when a running download holds it."""
    partial, path = paths_for(target)
    fd = _open_locked(path, busy, shared=True)
    if fd is None:
        return None
    try:
        found = journal.read(fd)
        if found.header is not None and found.damaged is None:
            try:
                on_disk = os.stat(partial).st_size
            except FileNotFoundError:
                return Found(damaged="its partial file is missing")
            if on_disk != found.header.size:
                size = found.header.size
                found.damaged = f"its partial file has {on_disk} bytes, the journal says {size}"
        return found
    finally:
        os.close(fd)  # the download takes the lock again when it opens the partial


def remove(target: Path, busy: Busy) -> bool:
    """Remove ``target``'s partial and journal, unless a running download holds them
    (then ``busy()`` is raised); whether there was either."""
    return remove_pair(*paths_for(target), busy)


def remove_pair(partial: Path, path: Path, busy: Busy) -> bool:
    """Remove a partial file and its journal, under the journal's lock."""
    fd = _open_locked(path, busy)
    try:
        try:
            os.unlink(partial)
        except FileNotFoundError:
            if fd is None:
                return False
        if fd is not None:
            os.unlink(path)
        return True
    finally:
        if fd is not None:
            os.close(fd)


class _Held(Exception):
    pass


def peek(path: Path) -> tuple[Found | None, bool]:
    """A journal's content (``None``: there is none, or it cannot be read), and whether
    a running download holds it."""
    busy = False
    try:
        fd = _open_locked(path, _Held, shared=True)
    except _Held:
        busy = True
        try:
            fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        except OSError:
            return None, busy
    except OSError:
        return None, False
    if fd is None:
        return None, busy
    try:
        return journal.read(fd), busy
    except OSError:
        return None, busy
    finally:
        os.close(fd)


class PartialFile(TempFile):
    """A :class:`~asyncdl.writer.TempFile` that, once opened, is the target's partial
    file: kept (its lock released) when the download fails, each write recorded in the
    journal, the journal removed once the file is published. ``adopt``: take over an
    earlier attempt's bytes when the journal is of the same object (:attr:`adopted`).
    A small file published in one write never opens: it stays a plain temp file."""

    def __init__(
        self, target: Path, header: Header, busy: Busy, *, fsync: bool, adopt: bool
    ) -> None:
        super().__init__(target, header.size, fsync=fsync)
        self.header = header
        self._busy = busy
        self._adopt = adopt
        self._journal_fd = -1
        #: Ranges taken over from an earlier attempt when opened.
        self.adopted: list[Recorded] = []
        #: Remove the partial and journal too when discarded (they are of no use).
        self.drop = False
        #: Where the part that a write at this offset continues began.
        self._starts: dict[int, int] = {}
        self._starts_lock = threading.Lock()
        #: Set once the lock is released (see :meth:`released`); made when opened.
        self._unlocked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @functools.cached_property
    def files(self) -> tuple[Path, Path]:
        """The partial file and the journal (worked out only when needed: a small file
        published in one write never needs them)."""
        return paths_for(self.target)

    async def open(self) -> None:
        """Lock the journal, and open the partial file: an earlier attempt's (with
        ``adopt``, when the journal is of the same object), else a fresh one."""
        self._loop, self._unlocked = asyncio.get_running_loop(), asyncio.Event()
        await _open(self)

    def _open_sync(self) -> None:
        self._enter()
        try:
            locked = _open_locked(self.files[1], self._busy, create=True)
            assert locked is not None  # created if missing
            self._journal_fd = locked
            try:
                fd = self._adopted() if self._adopt else None
                self._fd = fd if fd is not None else self._fresh()
            except BaseException:
                self._release()
                raise
            self.path = self.files[0]
        finally:
            self._leave()

    def _adopted(self) -> int | None:
        found = journal.read(self._journal_fd)
        if found.damaged or found.header != self.header or not found.ranges:
            return None
        try:
            fd = os.open(self.files[0], os.O_RDWR | _CLOEXEC)
        except FileNotFoundError:
            return None
        if os.fstat(fd).st_size != self.size:
            os.close(fd)
            return None
        # A line a crash cut short goes, or the next line appended would join it.
        os.ftruncate(self._journal_fd, found.length)
        self.adopted = found.ranges
        return fd

    def _fresh(self) -> int:
        # The journal is emptied first: bytes left in the partial then mean nothing.
        os.ftruncate(self._journal_fd, 0)
        os.write(self._journal_fd, self.header.line())
        fd = os.open(self.files[0], os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666)
        try:
            os.ftruncate(fd, 0)
            preallocate(fd, self.size)
            if self._fsync:
                os.fsync(self._journal_fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _write_sync(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[Any] | None, previous: Any
    ) -> Any:
        """Write (in the executor hop), then append the journal's line for the part the
        bytes belong to."""
        end = offset + sum(map(len, chunks))
        # A part's CRC so far is 0 where it starts: then the bytes start a range of their
        # own (a CRC run from 0 is the same whatever came before). Otherwise they
        # continue the part whose last write ended here; if none did, they are recorded
        # without a CRC (read back from the file when the check needs it).
        fresh = previous in (0, None) or previous == (0, 0, 0)
        with self._starts_lock:
            start = offset if fresh else self._starts.get(offset)
        self._enter()
        try:
            write_all(self._fd, chunks, offset)
            value = crc_of(chunks, crc, previous)
            if self._fsync:
                (getattr(os, "fdatasync", None) or os.fsync)(self._fd)
            crcs = journal.crcs_of(crc, value) if start is not None else {}
            line = journal.line_of([offset if start is None else start, end, crcs])
            os.write(self._journal_fd, line)
        finally:
            self._leave()
        with self._starts_lock:
            self._starts.pop(offset, None)
            if start is not None:
                self._starts[end] = start
        return value

    def _replace(self) -> None:
        super()._replace()
        if self._journal_fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.files[1])
            self._release()

    def _remove(self) -> None:
        try:
            super()._remove()
        finally:
            if self.drop and self._journal_fd >= 0:
                for path in self.files:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            self._release()

    def _release(self) -> None:
        fd, self._journal_fd = self._journal_fd, -1
        if fd >= 0:
            os.close(fd)
            if self._loop is not None and self._unlocked is not None:  # maybe in a thread
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                    self._loop.call_soon_threadsafe(self._unlocked.set)

    async def released(self) -> None:
        """Wait until the lock is released: after :meth:`discard`, a write still running
        in a worker thread finishes first (milliseconds), then the file is closed. A
        failed download returns only then, so that trying again at once does not find
        its own lock."""
        if self._journal_fd >= 0 and self._unlocked is not None:
            # Bounded: a write stuck on a hung file system must not hang the failure.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_RELEASE_WAIT):
                    await self._unlocked.wait()


_open = wrap(PartialFile._open_sync)
