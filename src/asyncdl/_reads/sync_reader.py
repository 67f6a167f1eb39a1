"""A :class:`~asyncdl.RandomAccessReader` as a blocking binary file for a worker
thread: for a library that reads files (``zipfile``, ``pyarrow``) while the engine's
loop runs, each read is handed to the loop (``run_coroutine_threadsafe``) and waited
for. Used on the loop's own thread it would wait for itself forever: it refuses."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import operator
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class PositionalReads(Protocol):
    """What a :class:`SyncReader` reads through: ``RandomAccessReader``'s ``read_at``
    and ``size``."""

    size: int | None

    def read_at(self, offset: int, n: int = -1) -> Coroutine[Any, Any, bytes]: ...


class SyncReader(io.RawIOBase):
    """A :class:`RandomAccessReader` as a blocking binary file, for a worker thread
    (:meth:`RandomAccessReader.sync`). Each read runs on the reader's loop and is
    waited for; its own offset, so the async reader's is left alone. Closing it does
    not close the reader. On the loop's own thread every call raises ``RuntimeError``
    (it would wait for itself)."""

    def __init__(self, reader: PositionalReads, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._reader, self._loop = reader, loop
        self._loop_thread = threading.get_ident()
        self._pos = 0
        #: Threads sharing the file take and move its offset one at a time.
        self._offset_lock = threading.Lock()

    def readable(self) -> bool:
        """``True``."""
        return True

    def seekable(self) -> bool:
        """``True``."""
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Read into ``buffer`` from this file's offset, which moves past the bytes read.

        Args:
            buffer: A writable bytes-like object; as many bytes as it holds are asked
                for.

        Returns:
            How many bytes were read (0 at the end).
        """
        view = memoryview(buffer).cast("B")
        if view.readonly:  # before the read: its bytes would be lost, the offset moved
            raise TypeError("readinto() needs a writable buffer")
        with self._offset_lock:
            data = self._wait(self._reader.read_at(self._pos, len(view)))
            self._pos += len(data)
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """All that is left, in one read."""
        with self._offset_lock:
            data = self._wait(self._reader.read_at(self._pos, -1))
            self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move this file's offset, as a file's ``seek`` does; the reader's own offset
        stays where it is.

        Args:
            offset: Bytes from where ``whence`` says.
            whence: ``io.SEEK_SET`` (0), ``io.SEEK_CUR`` (1) or ``io.SEEK_END`` (2,
                which needs the reader open).

        Returns:
            The new offset.
        """
        offset = operator.index(offset)  # TypeError for 1.5, as a file's seek raises
        if type(whence) is not int:
            raise TypeError(f"whence must be an int, got {whence!r}")
        with self._offset_lock:
            return self._seek(offset, whence)

    def _seek(self, offset: int, whence: int) -> int:
        if whence == io.SEEK_SET:
            base = 0
        elif whence == io.SEEK_CUR:
            base = self._pos
        elif whence == io.SEEK_END:
            size = self._reader.size
            if size is None:
                raise ValueError("the reader is not open yet")
            base = size
        else:
            raise ValueError(f"whence must be 0, 1 or 2, got {whence!r}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        """This file's offset."""
        return self._pos

    def _wait(self, work: Any) -> bytes:
        if threading.get_ident() == self._loop_thread:
            work.close()
            raise RuntimeError(
                "SyncReader used on its event loop's thread would wait for itself: "
                "use it in a worker thread (asyncio.to_thread), or the async reader here"
            )
        if self.closed:
            work.close()
            raise ValueError("I/O operation on closed file")
        if self._loop.is_closed() or not self._loop.is_running():
            work.close()
            raise RuntimeError("the reader's event loop is not running")
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        while True:
            try:
                result: bytes = future.result(timeout=0.5)
                return result
            except concurrent.futures.CancelledError:
                # Nobody here cancels it: its loop did, ending (asyncio.run cancels
                # every task it leaves behind).
                raise RuntimeError("the reader's event loop stopped under the read") from None
            except concurrent.futures.TimeoutError:
                if not self._loop.is_running():
                    future.cancel()
                    raise RuntimeError("the reader's event loop stopped") from None
