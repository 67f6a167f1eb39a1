"""Single file-system calls a download's file makes, each with what a file system may
answer instead of doing it: a target's mode kept by its replacement, a directory
synced after a rename, the longest name a directory takes, a file preallocated (never
past the room its file system has: ``disk_room``)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .._wire.ranges import LARGEST_SIZE
from . import disk_room


def mode_of(target: str | Path, dir_fd: int | None = None) -> int | None:
    """An existing target's permission bits, which its replacement keeps (set-id and
    sticky bits are not kept: writing a file clears them too). A link at the target is
    replaced, not written through, so the file it points at lends no mode: ``None``."""
    try:
        st = os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None


def fsync_directory(directory: Path, dir_fd: int | None = None) -> None:
    """Make the rename durable: it is written in the directory (held open at
    ``dir_fd``, if given), not in the file."""
    if os.name == "nt":
        return  # a directory cannot be opened there; NTFS journals the rename itself
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY) if dir_fd is None else os.dup(dir_fd)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot sync a directory; nothing more can be done there.
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def name_max(directory: Path | int) -> int | None:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # AttributeError: no pathconf (Windows)
        return None


#: What a file system answers when it cannot hold a file of the size asked (no EDQUOT
#: on Windows).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})


def preallocate(fd: int, size: int) -> None:
    """Give the file its ``size`` up front: a full disk shows before the first byte.

    Never past the room its file system has (``disk_room``): asked in steps, each
    checked first. A file system that cannot hold that size says so with the size in
    the error: the size is mostly the server's word (a listing's, a
    ``Content-Range``'s), and "File too large" alone would blame the disk for a claim
    it cannot check."""
    if size <= 0:
        return
    if size > LARGEST_SIZE:
        raise OSError(errno.EFBIG, f"the object's {size} bytes are more than a file holds")
    room = disk_room.Room(fd, size)
    try:
        done = 0
        while done < size:
            if done:
                room.check(size - done)
            length = min(disk_room.STEP, size - done)
            if not _preallocate(fd, done, length, size):
                return  # not preallocated here: the size is set, the file sparse
            room.given(length)
            done += length
    except disk_room.NoRoom:
        raise
    except OSError as exc:
        if exc.errno not in _NO_ROOM:
            raise
        raise OSError(exc.errno, f"{exc.strerror} for the object's {size} bytes") from exc
    finally:
        room.release()


def _preallocate(fd: int, offset: int, length: int, size: int) -> bool:
    """Allocate ``length`` bytes at ``offset``; False where the file system cannot
    preallocate, its ``size`` then set instead."""
    try:
        if not hasattr(os, "posix_fallocate"):  # macOS, Windows
            raise OSError(errno.EOPNOTSUPP, "no posix_fallocate")
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        # Some file systems (and tmpfs on old kernels) cannot preallocate; the size is
        # still set so positional writes never extend the file piecemeal.
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        os.ftruncate(fd, size)
        return False
    return True
