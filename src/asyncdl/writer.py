"""The temp file a download writes into, and the atomic rename that publishes it.

The file is created exclusively next to the target (same file system, so
``os.replace`` is atomic), preallocated to the object's size so a full disk shows
up before the first byte is fetched, and written with positional writes so parts
land in any order. Blocking calls run in aiofiles' executor.

Cancellation can leave a write running in its executor thread after the awaiting
task is gone. Closing the descriptor under it could let the number be reused by
another open file and the late write land there, so :meth:`TempFile.discard`
leaves the close and unlink to whichever write finishes last.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from pathlib import Path

from aiofiles.os import wrap

_TEMP_SUFFIX = ".asyncdl-tmp"
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def temp_path_for(target: Path) -> Path:
    return target.with_name(f".{target.name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")


def is_temp_file(name: str) -> bool:
    """Whether a file name is one of asyncdl's temp files (tests and cleanup use it)."""
    return name.startswith(".") and name.endswith(_TEMP_SUFFIX)


class TempFile:
    """A preallocated temp file next to ``target``; :meth:`commit` or :meth:`discard` it."""

    def __init__(self, target: Path, path: Path, fd: int, fsync: bool, size: int = 0) -> None:
        self.target = target
        self.path = path
        self._fd = fd
        self._fsync = fsync
        self._size = size
        self._lock = threading.Lock()
        self._pending = 0
        self._closed = False
        #: A deferred file's whole content, held until commit writes it in one go.
        self._whole: bytes | None = None

    @classmethod
    def deferred(cls, target: Path, size: int, *, fsync: bool = False) -> TempFile:
        """A temp file that exists only once needed: if its one write holds every byte,
        :meth:`commit` creates, writes, closes and renames it in a single executor hop.
        Any other write pattern (a retry resuming mid-body) creates it at that point.
        For one sequential writer only: concurrent parts need :meth:`create`."""
        return cls(target, temp_path_for(target), -1, fsync, size)

    @property
    def _created(self) -> bool:
        return self._fd >= 0 or self._closed

    @classmethod
    async def create(cls, target: Path, size: int, *, fsync: bool = False) -> TempFile:
        return await _create(target, size, fsync)

    @classmethod
    def _create_sync(cls, target: Path, size: int, fsync: bool) -> TempFile:
        for _ in range(8):
            path = temp_path_for(target)
            try:
                fd = os.open(path, _FLAGS, 0o666)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(errno.EEXIST, "could not create a unique temp file", str(target))
        try:
            _preallocate(fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls(target, path, fd, fsync, size)

    async def write(self, offset: int, data: bytes) -> None:
        if not self._created:
            if offset == 0 and len(data) == self._size and self._whole is None:
                self._whole = data
                return
            await self._materialize()
        await _write(self, offset, data)

    async def _materialize(self) -> None:
        created = await _create(self.target, self._size, self._fsync)
        self.path, self._fd = created.path, created._fd
        created._fd, created._closed = -1, True  # ownership moved here
        if self._whole is not None:
            whole, self._whole = self._whole, None
            await _write(self, 0, whole)

    def _write_sync(self, offset: int, data: bytes) -> None:
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, "temp file already discarded", str(self.path))
            self._pending += 1
        try:
            view = memoryview(data)
            while view:
                written = os.pwrite(self._fd, view, offset)
                view = view[written:]
                offset += written
        finally:
            with self._lock:
                self._pending -= 1
                last_after_discard = self._closed and self._pending == 0
            if last_after_discard:
                self._remove()

    async def commit(self) -> None:
        """Make the temp file the target, atomically. On failure the temp file is gone."""
        if not self._created:
            await _publish(self)
            return
        await _commit(self)

    def _publish_sync(self) -> None:
        """Create, write, close and rename a deferred file in one go."""
        data = self._whole if self._whole is not None else b""
        if len(data) != self._size:
            raise RuntimeError(f"commit of {len(data)} bytes of a {self._size}-byte file")
        fd = os.open(self.path, _FLAGS, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        try:
            os.replace(self.path, self.target)
        except BaseException:
            os.unlink(self.path)
            raise

    def _commit_sync(self) -> None:
        with self._lock:
            if self._closed or self._pending:
                raise RuntimeError("commit of a discarded or busy temp file")
            self._closed = True
        try:
            if self._fsync:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            os.replace(self.path, self.target)
        except BaseException:
            self._remove()
            raise

    def discard(self) -> None:
        """Remove the temp file. Synchronous, so it runs even in a cancelled task."""
        if not self._created:
            self._whole = None
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = self._pending > 0
        if not busy:
            self._remove()

    def _remove(self) -> None:
        fd, self._fd = self._fd, -1
        try:
            if fd >= 0:
                os.close(fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def _preallocate(fd: int, size: int) -> None:
    if size <= 0:
        return
    try:
        if not hasattr(os, "posix_fallocate"):  # macOS, Windows
            raise OSError(errno.EOPNOTSUPP, "no posix_fallocate")
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        # Some file systems (and tmpfs on old kernels) cannot preallocate; the size is
        # still set so positional writes never extend the file piecemeal.
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        os.ftruncate(fd, size)


_create = wrap(TempFile._create_sync)
_write = wrap(TempFile._write_sync)
_commit = wrap(TempFile._commit_sync)
_publish = wrap(TempFile._publish_sync)
