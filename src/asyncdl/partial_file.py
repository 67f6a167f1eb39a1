"""A resumable download's files (``resume=True``): the partial file it writes into,
kept on failure, and its journal (see ``journal``), locked while the download runs.

Next to the target ``NAME``: ``.NAME.asyncdl-partial`` (the bytes at their offsets,
preallocated to the object's size) and ``.NAME.asyncdl-journal``. A write's line is
appended after ``pwritev`` returned, in the same executor call (with ``fsync=True``
after the partial was ``fdatasync``-ed): a killed process loses nothing it recorded;
a power loss, only with ``fsync=True``. So a partial is adopted as it is only when its
journal says every line was written so (its header's ``fsync``); otherwise each
recorded range is read back and checked against its CRCs first, and one that does
not match is fetched again (a power loss leaves preallocated extents reading back as
zeros while the journal, written later, survived).

Planted files: the partial and the journal are opened with ``O_NOFOLLOW``, and must be
regular files; the partial is created with ``O_EXCL`` (what was at its name removed
first), the journal too when there is none. A symbolic link (or any other non-regular
file) at either name is not one asyncdl made: it is removed (the link, never what it
points to) and the download starts fresh, ``partial_discarded`` saying why.

The download holds ``flock(LOCK_EX | LOCK_NB)`` on the journal from when it opens the
partial until it publishes or fails (no lock where ``fcntl`` is missing: Windows);
a second download of the same target fails at once (``TargetBusyError``), and a
killed process's lock goes with it. Reading a journal takes the lock shared, for
the few microseconds it reads, on a descriptor opened read-only.

Compacting the journal (see ``journal``) writes the new one under a fresh name
(``O_EXCL``), takes its lock, syncs it with ``fsync=True``, and renames it over the
old one; only then is the old descriptor (and its lock) let go. The lock lives on
the file, not the name: whoever opened the old file and then got its lock finds the
name no longer names it (the check in :func:`_open_locked`) and tries again, finding
the new file locked. There is no moment the name names an unlocked journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiofiles.os import wrap

from . import journal
from .checksums import CRC_ALGORITHMS, crc_function
from .file_writes import CrcOf, crc_of, write_all
from .journal import Found, Header, Recorded
from .writer import (
    TempFile,
    _Discarded,
    _fsync_directory,
    cut_name,
    preallocate,
    temp_path_for,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PARTIAL_SUFFIX = ".asyncdl-partial"
JOURNAL_SUFFIX = ".asyncdl-journal"
_NAME_MAX = 255
_HASH = 8
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Never through a link; never blocked on a FIFO planted at the name (regular files
#: ignore ``O_NONBLOCK``).
_SAFE = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_FLAGS = os.O_RDWR | os.O_APPEND | _SAFE
_READ_FLAGS = os.O_RDONLY | _SAFE
_PARTIAL_FLAGS = os.O_RDWR | _SAFE
_READ_SIZE = 1024 * 1024
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


class NotRegular(OSError):
    """A partial's or journal's name holds something asyncdl never makes there: a
    symbolic link, a FIFO, a device."""


def _open_regular(path: Path, flags: int, mode: int = 0o666) -> int:
    """``path`` opened with ``flags`` (``O_NOFOLLOW`` among them), if it is a regular
    file; else :class:`NotRegular`."""
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        # A link at the name: ELOOP (EMLINK on FreeBSD).
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise NotRegular(
                errno.ELOOP, "a symbolic link, not a regular file", str(path)
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, "not a regular file", str(path))
    return fd


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
    ``create`` is false): read-only when ``shared`` (a reader's), else for appending.
    The lock is on the file the path still names: a journal unlinked by the download
    that held it, or replaced by a compacted one, is not one to lock.

    :class:`NotRegular` when the name holds no regular file; with ``create`` that is
    removed instead (a link is removed, never what it points to), and a journal made."""
    flags = _READ_FLAGS if shared else _FLAGS
    for _ in range(8):
        try:
            fd = _open_regular(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = _open_regular(path, flags | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                continue  # made meanwhile: opened (and locked) as any other
        except NotRegular:
            if not create:
                raise
            os.unlink(path)
            continue
        try:
            _lock(fd, busy, shared=shared)
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
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
    try:
        fd = _open_locked(path, busy, shared=True)
    except NotRegular:
        return Found(damaged="its journal is not a regular file (a symbolic link?)")
    if fd is None:
        return None
    try:
        found = journal.read(fd)
        if found.header is not None and found.damaged is None:
            try:
                st = os.lstat(partial)
            except FileNotFoundError:
                return Found(damaged="its partial file is missing")
            on_disk = st.st_size
            if not stat.S_ISREG(st.st_mode):
                found.damaged = "its partial file is not a regular file (a symbolic link?)"
            elif on_disk != found.header.size:
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
    """Remove a partial file and its journal, under the journal's lock. Either may be
    a link (or some other file) planted at its name: the link is removed, not what it
    points to; no download ever holds such a journal, so it needs no lock."""
    try:
        fd = _open_locked(path, busy)
    except NotRegular:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        os.unlink(path)
        return True
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
            fd = _open_regular(path, _READ_FLAGS)
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
        #: Bytes the journal recorded that did not read back as recorded (fetched again).
        self.unmatched = 0
        #: Remove the partial and journal too when discarded (they are of no use).
        self.drop = False
        #: What a write at this offset continues: where its journal line begins,
        #: whether that is where the part began (the verifier's running CRC is then
        #: of the line's bytes), and the line's CRC32 so far.
        self._starts: dict[int, tuple[int, bool, int]] = {}
        self._starts_lock = threading.Lock()
        #: Held to append to the journal or to replace it.
        self._journal_lock = threading.Lock()
        self._journal_size = 0
        self._compact_at = journal.COMPACT_AT
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
            fd = _open_regular(self.files[0], _PARTIAL_FLAGS)
        except (FileNotFoundError, NotRegular):
            return None  # a link planted since the lookup: _fresh removes it
        try:
            if os.fstat(fd).st_size != self.size:
                os.close(fd)
                return None
            ranges = found.ranges
            if not found.durable:
                # The journal may have outlived the bytes (fsync=False, then a power
                # loss): trusted only as far as the bytes read back match it.
                ranges = self._checked(fd, ranges)
                self.unmatched = sum(e - s for s, e, _ in found.ranges) - sum(
                    e - s for s, e, _ in ranges
                )
                if ranges and self._fsync:
                    _datasync(fd)  # so that the new header may say they are durable
            if not ranges:
                os.close(fd)
                return None
            # Written again, merged: a range that did not match is gone (else the line
            # of the part that fetches it again, if cut short, would lose to it), so is
            # a line a crash cut short, and the header says how this run writes.
            ranges = journal.merge(ranges, open_starts=(), size=self.size)
            self._replace_journal(journal.content(self.header, ranges, fsync=self._fsync))
        except BaseException:
            os.close(fd)
            raise
        self.adopted = ranges
        return fd

    def _checked(self, fd: int, ranges: list[Recorded]) -> list[Recorded]:
        """The ranges whose bytes, read back from the partial, match a CRC the journal
        records of them (CRC32 by preference: the cheapest to compute)."""
        kept: list[Recorded] = []
        for start, end, crcs in ranges:
            algorithm = "CRC32" if "CRC32" in crcs else next(iter(sorted(crcs)), None)
            if (
                algorithm in CRC_ALGORITHMS
                and self._crc_of_file(fd, algorithm, start, end) == (crcs[algorithm])
            ):
                kept.append((start, end, crcs))
        return kept

    def _crc_of_file(self, fd: int, algorithm: str, start: int, end: int) -> int | None:
        update, crc, offset = crc_function(algorithm), 0, start
        while offset < end:
            if self._closed:
                raise _Discarded  # a cancelled download stops reading a large partial
            block = os.pread(fd, min(_READ_SIZE, end - offset), offset)
            if not block:
                return None
            crc = update(block, crc)
            offset += len(block)
        return crc

    def _fresh(self) -> int:
        # The journal is emptied first: bytes left in the partial then mean nothing.
        os.ftruncate(self._journal_fd, 0)
        line = self.header.line(fsync=self._fsync)
        os.write(self._journal_fd, line)
        self._journal_size = len(line)
        # Whatever is at the partial's name goes (an old partial, or a link planted
        # there: the link, not what it points to): the partial is always made anew.
        for _ in range(8):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.files[0])
            try:
                fd = os.open(self.files[0], _PARTIAL_FLAGS | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "the partial keeps being made", str(self.files[0]))
        try:
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
        # continue the part whose last write ended here; if none did, they start a
        # line of their own, without the verifier's CRC (it runs from the part's start).
        fresh = previous in (0, None) or previous == (0, 0, 0)
        with self._starts_lock:
            known = None if fresh else self._starts.get(offset)
        start, theirs, own = (offset, fresh, 0) if known is None else known
        self._enter()
        try:
            write_all(self._fd, chunks, offset)
            value = crc_of(chunks, crc, previous)
            if self._fsync:
                _datasync(self._fd)
            crcs = journal.crcs_of(crc, value) if theirs else {}
            if "CRC32" not in crcs:
                # The journal's own, so that every range can be checked when read back.
                update = crc_function("CRC32")
                for chunk in chunks:
                    own = update(chunk, own)
                crcs["CRC32"] = own
            with self._starts_lock:
                # Before the line: a compaction meanwhile must not merge this range
                # into the one before it, which the part's next line would overlap.
                self._starts.pop(offset, None)
                self._starts[end] = (start, theirs, crcs["CRC32"])
            line = journal.line_of([start, end, crcs])
            with self._journal_lock:
                os.write(self._journal_fd, line)
                self._journal_size += len(line)
                if self._journal_size > self._compact_at:
                    self._compact()
        finally:
            self._leave()
        return value

    def _compact(self) -> None:
        """Merge the journal's contiguous ranges (under ``_journal_lock``). A failure
        leaves the journal as it was, and is tried again once it has doubled."""
        try:
            found = journal.read(self._journal_fd)
            if found.damaged is None:
                with self._starts_lock:
                    open_starts = {start for start, _, _ in self._starts.values()}
                ranges = journal.merge(found.ranges, open_starts=open_starts, size=self.size)
                self._replace_journal(journal.content(self.header, ranges, fsync=found.durable))
                return
        except OSError:
            pass
        self._compact_at = 2 * self._journal_size

    def _replace_journal(self, content: bytes) -> None:
        """:meth:`_rewrite`, or where a file open elsewhere cannot be renamed over
        (Windows), the journal emptied and written again in place: a crash in between
        leaves it with fewer lines or none (then the partial is discarded), never with
        a range it did not have."""
        try:
            self._rewrite(content)
        except PermissionError:
            if os.name != "nt":
                raise
            os.ftruncate(self._journal_fd, 0)
            view = memoryview(content)
            while view:
                view = view[os.write(self._journal_fd, view) :]
            if self._fsync:
                os.fsync(self._journal_fd)
            self._journal_size = len(content)
            self._compact_at = max(journal.COMPACT_AT, 2 * len(content))

    def _rewrite(self, content: bytes) -> None:
        """Replace the journal with ``content``, atomically, its lock held throughout:
        see the module's note."""
        path = self.files[1]
        for _ in range(8):
            temp = temp_path_for(path)
            try:
                fd = os.open(temp, _FLAGS | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no unique temp name", str(path))
        try:
            _lock(fd, self._busy, shared=False)  # a fresh name: nobody else holds it
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
            os.replace(temp, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        old, self._journal_fd = self._journal_fd, fd
        os.close(old)
        if self._fsync:
            _fsync_directory(path.parent)
        self._journal_size = len(content)
        self._compact_at = max(journal.COMPACT_AT, 2 * len(content))

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


def _datasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


_open = wrap(PartialFile._open_sync)
