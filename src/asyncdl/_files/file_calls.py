"""Single file-system calls a download's file makes, each with what a file system may
answer instead of doing it: a target's mode kept by its replacement, a directory
synced after a rename, the longest name a directory takes, a file preallocated (never
past the room its file system has)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path


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


#: The largest size a file can have (an ``off_t``'s).
_OFF_T_MAX = 2**63 - 1

#: What a file system answers when it cannot hold a file of the size asked (no EDQUOT
#: on Windows).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})


def preallocate(fd: int, size: int) -> None:
    """Give the file its ``size`` up front: a full disk shows before the first byte.

    A file system that cannot hold that size says so with the size in the error: the
    size is mostly the server's word (a listing's, a ``Content-Range``'s), and "File
    too large" alone would blame the disk for a claim it cannot check."""
    if size <= 0:
        return
    if size > _OFF_T_MAX:
        raise OSError(errno.EFBIG, f"the object's {size} bytes are more than a file holds")
    device, need = _reserve(fd, size)
    try:
        _preallocate(fd, size)
    except OSError as exc:
        if exc.errno not in _NO_ROOM:
            raise
        raise OSError(exc.errno, f"{exc.strerror} for the object's {size} bytes") from exc
    finally:
        _release(device, need)


#: Bytes each file system (by ``st_dev``) has been asked to preallocate and has not yet
#: answered: its free space does not show them until it does.
_pending: dict[int, int] = {}
_pending_lock = threading.Lock()


def _forget_pending() -> None:
    # A child forked while another thread held the lock would find it held forever;
    # the preallocations under way are its parent's, not its own.
    global _pending_lock  # noqa: PLW0603
    _pending.clear()
    _pending_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_pending)


def _reserve(fd: int, size: int) -> tuple[int, int]:
    """Refuse ``size`` if the file system has no room for it, before asking it to
    allocate; else count it as pending until :func:`_release`.

    ext4 (and others) allocate what they can before they answer ENOSPC: a size past
    the free space, a hostile listing's or an object too big for the disk, would fill
    the disk to its last block (for a moment, under every other process writing to it)
    before the download failed. Two downloads' preallocations at once are checked
    against the free space less what the other is being given. The free space is what
    an unprivileged process may use (``f_bavail``): a download never takes the blocks
    a file system keeps for root, even when run as root. Where the system cannot say
    (no ``fstatvfs``, a file system reporting no size), nothing is refused here."""
    with _pending_lock:
        # Read under the lock: a preallocation that ends meanwhile is then counted
        # twice (in the free space and as pending), never not at all.
        try:
            held = os.fstat(fd)
            fs = os.fstatvfs(fd)
        except (OSError, AttributeError):  # AttributeError: no fstatvfs (Windows)
            return 0, 0
        if fs.f_blocks <= 0 or fs.f_frsize <= 0 or fs.f_bavail > fs.f_blocks:
            return 0, 0  # a file system that reports no sizes, or none that hold
        # What the file has already (one made anew has none): fallocate adds the rest.
        need = max(0, size - held.st_blocks * 512)
        free = fs.f_bavail * fs.f_frsize - _pending.get(held.st_dev, 0)
        if need > free:
            raise OSError(
                errno.ENOSPC,
                f"{os.strerror(errno.ENOSPC)} for the object's {size} bytes: "
                f"{max(free, 0)} bytes free",
            )
        _pending[held.st_dev] = _pending.get(held.st_dev, 0) + need
    return held.st_dev, need


def _release(device: int, need: int) -> None:
    if not need:
        return
    with _pending_lock:
        left = _pending.get(device, 0) - need
        if left > 0:
            _pending[device] = left
        else:
            _pending.pop(device, None)


def _preallocate(fd: int, size: int) -> None:
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
