"""The temp file a download writes into, and the atomic rename that publishes it.

The file is created exclusively next to the target (same file system, so
``os.replace`` is atomic), preallocated to the object's size so a full disk shows
up before the first byte is fetched, and written with positional writes so parts
land in any order. Blocking calls run in the loop's executor, except a part's writes:
its pieces go in ``pwritev`` calls of at most 32 KiB, on the loop while that is
quick, else in one executor hop at a time (``file_writes``).

Cancellation can leave an executor call running after the awaiting task is gone:
a create that has not yet returned its descriptor, or a write. Closing a
descriptor under a write could let its number be reused by another open file and
the late write land there; a create nobody waits for would leave its file behind.
So every executor call counts itself in, and :meth:`TempFile.discard` leaves the
close and unlink to whichever call finishes last.

Publishing is the other way round: once :meth:`TempFile.commit` has started, it
finishes, whatever happens to the task that awaits it, and :attr:`TempFile.published`
says whether the target was replaced. A cancellation cannot stop a rename already
running in a thread; only by waiting for it can the caller tell what is on disk.

A new file written in one go (a small object, no ``fsync``) needs no temp name at
all on Linux: it is written unnamed (``O_TMPFILE``) and linked at the target, which
appears whole or not at all (see :mod:`asyncdl._files.unnamed_files`). Temp files are named by
:mod:`asyncdl._files.temp_names`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from aiofiles.os import wrap

from .._wire.checksums import crc_function, sha_of
from . import quick_io
from .file_calls import fsync_directory as _fsync_directory
from .file_calls import mode_of as _mode_of
from .file_calls import name_max as _name_max
from .file_calls import preallocate as preallocate  # noqa: PLC0414 - re-exported: its old home
from .file_writes import CrcOf, WriteHops, crc_of, write_all
from .held_dirs import HeldDir
from .temp_names import NAME_MAX, temp_name
from .temp_names import TEMP_RUN as TEMP_RUN  # noqa: PLC0414 - re-exported: its old home
from .temp_names import cut_name as cut_name  # noqa: PLC0414
from .temp_names import is_temp_file as is_temp_file  # noqa: PLC0414
from .unnamed_files import link_unnamed

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_Crc = TypeVar("_Crc")
#: The limit on a name's bytes first assumed (see ``temp_names``).
_NAME_MAX = NAME_MAX
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_READ_SIZE = 1024 * 1024


class _Discarded(Exception):
    pass


class TempFile:
    """A temp file next to ``target`` for an object of ``size`` bytes.

    Construct it (no I/O), keep the reference, then :meth:`open` it, or let a
    small one stay deferred: if its one write holds every byte, :meth:`commit`
    creates, writes, closes and renames it in one go (on the event loop while that
    is quick, see :mod:`asyncdl._files.quick_io`; else in one executor hop), or where the
    target is new, writes it unnamed and links it there. Any other write opens it
    then. Either way :meth:`commit` or :meth:`discard` it.
    """

    def __init__(
        self, target: Path, size: int, *, fsync: bool = False, where: HeldDir | None = None
    ) -> None:
        self.target = target
        self.size = size
        self._run = TEMP_RUN.get()
        self._name_max = _NAME_MAX
        # Kept as a string: the file calls take one, and a Path is made only if asked.
        self._parent = os.path.dirname(str(target))
        #: ``target``'s directory held open (``held_dirs``): the files, and ``_at`` the target,
        #: named in it (else by path); referenced, so that it stays open while a call runs.
        self._where = where
        self._dir_fd = None if where is None else where.fd
        self._at = str(target) if where is None else target.name
        self._path = ""  # the temp name, chosen once needed: an unnamed publish needs none
        #: Whether the target was replaced (or made): true once ``os.replace`` (or a link) did.
        self.published = False
        self._fsync = fsync
        self._fd = -1
        #: Whether ``path`` is ours to unlink: a create that failed made nothing.
        self._created = False
        self._lock = threading.Lock()
        self._pending = 0
        self._closed = False
        #: A deferred file's whole content, held until commit writes it in one go.
        self._whole: bytes | None = None
        #: Writes go to the executor in hops that take all the writes of a loop turn; made
        #: by the first such write. Its reference back to this file is a cycle only the
        #: collector frees: a small file published in one go makes none.
        self._hops: WriteHops | None = None

    @property
    def opened(self) -> bool:
        return self._fd >= 0

    @property
    def path(self) -> Path:
        """Where the bytes are written until published."""
        self._path = self._path or self._fresh_path()
        return Path(self._path) if self._dir_fd is None else Path(self._parent, self._path)

    @path.setter
    def path(self, path: Path) -> None:
        self._path = os.fspath(path) if self._dir_fd is None else path.name

    def _fresh_path(self) -> str:
        name = temp_name(self.target.name, self._run, self._name_max)
        return name if self._dir_fd is not None else os.path.join(self._parent, name)

    # -- executor calls, each counted in and out --------------------------------
    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                raise _Discarded
            self._pending += 1

    def _leave(self) -> None:
        with self._lock:
            self._pending -= 1
            last_after_discard = self._closed and self._pending == 0
        if last_after_discard:
            self._remove()

    async def open(self) -> None:
        """Create and preallocate the file."""
        await _open(self)

    def _create(self) -> int:
        """Create the file exclusively, under a fresh name if one is taken, and a
        shorter one if the file system's names are shorter than usual."""
        for _ in range(8):
            self._path = self._path or self._fresh_path()
            try:
                fd = os.open(self._path, _FLAGS, 0o666, dir_fd=self._dir_fd)
                if hold(fd):
                    self._created = True
                    return fd
                os.close(fd)  # a sweep took it for a dead writer's (and removes it)
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENAMETOOLONG or self._name_max != _NAME_MAX:
                    raise
                limit = _name_max(self.target.parent if self._dir_fd is None else self._dir_fd)
                if limit is None or limit >= len(os.fsencode(os.path.basename(self._path))):
                    raise  # not the name's length: the whole path is too long
                self._name_max = limit
            self._path = self._fresh_path()
        raise FileExistsError(errno.EEXIST, "no unique temp file name", str(self.target))

    def _open_sync(self) -> None:
        self._enter()
        try:
            fd = self._create()
            try:
                preallocate(fd, self.size)
            except BaseException:
                os.close(fd)
                os.unlink(self._path, dir_fd=self._dir_fd)
                self._created = False
                raise
            self._fd = fd
        finally:
            self._leave()

    async def write(self, offset: int, data: bytes) -> None:
        await self.write_chunks(offset, [data], None, None)

    async def write_crc(self, offset: int, data: bytes, crc: CrcOf[_Crc], previous: _Crc) -> _Crc:
        """:meth:`write`, and the running CRC of the part extended by ``data``."""
        result: _Crc = await self.write_chunks(offset, [data], crc, previous)
        return result

    async def write_chunks(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[_Crc] | None, previous: _Crc
    ) -> _Crc:
        """Write ``chunks`` back to back from ``offset`` (vectored writes of at most
        ``file_writes.WRITE_STEP``: they are not joined), and return ``crc`` run over
        them from ``previous`` (``previous`` when ``crc`` is ``None``), computed in
        the same executor hop (awscrt releases the GIL: off the event loop). The
        running value is ``crc``'s own: one CRC, or several while the algorithm is not
        known yet (``checksums.every_crc``)."""
        if not self.opened:
            size = sum(map(len, chunks))
            if offset == 0 and size == self.size and self._whole is None:
                # A small deferred file: one write holds it all, its CRC right here.
                self._whole = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                return crc_of(chunks, crc, previous)
            await self.open()
            if self._whole is not None:
                whole, self._whole = self._whole, None
                await self._write_hops().write(0, [whole], None, None)
        result: _Crc = await self._write_hops().write(offset, chunks, crc, previous)
        return result

    def _write_hops(self) -> WriteHops:
        hops = self._hops
        if hops is None:
            hops = self._hops = WriteHops(self._write_sync, on_loop=self._writes_on_loop())
        return hops

    def _writes_on_loop(self) -> bool:
        """Whether a write may run on the event loop while writes are quick: yes, as
        it only copies into the page cache (``fsync`` syncs once, at commit)."""
        return True

    @contextlib.contextmanager
    def plain_writes(self) -> Iterator[int | None]:
        """The open file's descriptor, for writes made without this object (a body
        written straight from the socket, ``asyncdl._wire.own_direct``), or ``None``
        when a write must go through it (not open yet, discarded, or writes that do
        more than write: see :meth:`_plain`). The file is not closed while the
        block runs: its descriptor cannot name another file meanwhile."""
        if not self.opened or not self._plain():
            yield None
            return
        try:
            self._enter()
        except _Discarded:
            yield None
            return
        try:
            yield self._fd
        finally:
            self._leave()

    def _plain(self) -> bool:
        """Whether a write is only a write (a partial's also journals it)."""
        return True

    def _write_sync(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[_Crc] | None, previous: _Crc
    ) -> _Crc:
        self._enter()
        try:
            write_all(self._fd, chunks, offset)
        finally:
            self._leave()
        return crc_of(chunks, crc, previous)

    async def digest(self, algorithm: str, start: int = 0, end: int | None = None) -> str:
        """SHA1/SHA256 of bytes ``[start, end)`` as written (default: all), base64, as
        S3 writes it."""
        end = self.size if end is None else end
        if not self.opened:
            return _b64(sha_of(algorithm, (self._whole or b"")[start:end]).digest())
        return await _digest(self, algorithm, start, end)

    def _digest_sync(self, algorithm: str, start: int, end: int) -> str:
        self._enter()
        try:
            hasher = sha_of(algorithm)
            offset = start
            while offset < end:
                block = os.pread(self._fd, min(_READ_SIZE, end - offset), offset)
                if not block:
                    raise OSError(errno.EIO, "temp file shorter than written", self._path)
                hasher.update(block)
                offset += len(block)
            return _b64(hasher.digest())
        finally:
            self._leave()

    async def crc(self, algorithm: str, start: int, end: int) -> int:
        """The CRC of bytes ``[start, end)`` as written (for parts that streamed before
        the checksum's algorithm was known)."""
        if not self.opened:
            whole = self._whole or b""
            return crc_function(algorithm)(whole[start:end], 0)
        return await _crc(self, algorithm, start, end)

    def _crc_sync(self, algorithm: str, start: int, end: int) -> int:
        self._enter()
        try:
            update, crc, offset = crc_function(algorithm), 0, start
            while offset < end:
                block = os.pread(self._fd, min(_READ_SIZE, end - offset), offset)
                if not block:
                    raise OSError(errno.EIO, "temp file shorter than written", self._path)
                crc = update(block, crc)
                offset += len(block)
            return crc
        finally:
            self._leave()

    async def commit(self) -> None:
        """Make the temp file the target, atomically. On failure the temp file is gone.

        Once called, it runs to the end: a cancellation (or timeout) that lands
        meanwhile waits for it, then goes on; :attr:`published` tells whether the
        target was replaced."""
        self._hops = None  # every write is done: the cycle through it goes now
        policy = quick_io.QUICK_IO
        if not self.opened and not self._fsync and policy.allowed():
            policy.timed(self._publish_sync)
            return
        # A plain executor future, as aiofiles' wrappers use: no task made per object.
        work = self._commit_sync if self.opened else self._publish_sync
        step = asyncio.get_running_loop().run_in_executor(None, work)
        try:
            await asyncio.shield(step)
        except asyncio.CancelledError:
            while not step.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(step)
            if not step.cancelled():
                step.exception()  # the cancellation is what the caller hears of
            raise

    def _commit_sync(self) -> None:
        with self._lock:
            if self._closed or self._pending:
                raise RuntimeError("commit of a discarded or busy temp file")
            self._closed = True
        try:
            self._replace()
        except BaseException:
            if not self.published:
                self._remove()
            raise

    def _replace(self) -> None:
        """Close the written file and rename it onto the target: with the target's
        permission bits if there is one, durably if asked."""
        mode = _mode_of(self._at, self._dir_fd)
        fd, self._fd = self._fd, -1
        at = self._dir_fd
        try:
            if self._fsync:
                os.fsync(fd)
            if mode is not None:
                os.chmod(self._path, mode, dir_fd=at)
            if os.name != "nt":  # renamed while open, so still locked (see ``hold``)
                os.replace(self._path, self._at, src_dir_fd=at, dst_dir_fd=at)
                self.published = True
        finally:
            os.close(fd)
        if not self.published:  # Windows renames no open file
            os.replace(self._path, self._at)
        self.published = True
        if self._fsync:
            _fsync_directory(self.target.parent, at)

    def _publish_sync(self) -> None:
        """Create, write, close and rename a deferred file in one go (or link it, unnamed,
        where the target is new)."""
        data = self._whole if self._whole is not None else b""
        if len(data) != self.size:
            raise RuntimeError(f"commit of {len(data)} bytes of a {self.size}-byte file")
        self._enter()  # outside the try: a discarded file is never published
        try:
            if not self._fsync and link_unnamed(self._parent, self._at, data, self._dir_fd):
                self.published = True
                return
            fd = self._fd = self._create()
            write_all(fd, [data], 0)
            self._replace()
        except BaseException:
            if not self.published:
                self._remove()
            raise
        finally:
            with self._lock:
                self._pending -= 1
                self._closed = True

    def discard(self) -> None:
        """Remove the temp file. Synchronous, so it runs even in a cancelled task."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._whole = None
            self._hops = None  # a write still queued keeps what it needs
            busy = self._pending > 0
        if not busy:
            self._remove()

    def _remove(self) -> None:
        fd, self._fd = self._fd, -1
        try:
            if fd >= 0:
                os.close(fd)
        finally:
            if self._created:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path, dir_fd=self._dir_fd)


def hold(fd: int) -> bool:
    """Lock a temp file just made while it is open; False: a sweep took it first."""
    if fcntl is None:  # pragma: no cover - Windows: no sweep either
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return os.fstat(fd).st_nlink > 0  # not removed by a sweep that let go just before


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


_open = wrap(TempFile._open_sync)
_digest = wrap(TempFile._digest_sync)
_crc = wrap(TempFile._crc_sync)
