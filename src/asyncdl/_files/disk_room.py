"""Whether a file system has room for a preallocation, asked before each step of it.

ext4 (and others) allocate what they can before they answer ENOSPC: a size past the
free space, a hostile listing's or an object too big for the disk, would fill the
disk to its last block (for a moment, under every other process writing to it)
before the download failed. So a preallocation is refused up front when it cannot
fit, and made in steps of :data:`STEP`, each asked again: what another process took
meanwhile shows at the next step, not after the disk is full.

"Room" is the free space an unprivileged process may use (``f_bavail``), less what
this process's other preallocations under way are still being given, less a margin
for the file system's own blocks (ext4's extent tree takes up to one block in 340
more where the free space lies in single blocks): a download never takes the blocks
a file system keeps for root, even when run as root. Where the system cannot say (no
``fstatvfs``, a file system reporting no sizes), nothing is refused here.

Another process's preallocation is seen only in the free space: two that each take
more than half of it can both be refused at a later step (the disk keeps its room),
and on btrfs, whose free space shows an allocation late, not at all.
"""

from __future__ import annotations

import errno
import os
import threading

#: Bytes asked of the file system in one call: ext4's longest extent (32768 blocks of
#: 4 KiB), so that the steps make no more extents than one call would.
STEP = 128 * 1024 * 1024

#: Bytes each file system (by ``st_dev``) is still to give this process's
#: preallocations under way: its free space does not show them yet.
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


class NoRoom(OSError):
    """ENOSPC said before the file system was asked: the size and the room named."""


def margin(remaining: int, block: int) -> int:
    """Room kept beyond ``remaining`` bytes for the file system's own blocks: a share
    for the extent tree, and a few blocks for its first nodes (at most 64 KiB: CephFS
    and NFS report blocks of MiBs that are no unit of allocation)."""
    return remaining // 256 + min(4 * block, 64 * 1024)


class Room:
    """One preallocation's claim on its file system's free space, from its first
    check to :meth:`release`."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._size = size
        self._device: int | None = None
        #: What this preallocation counts in ``_pending``.
        self._mine = 0
        self.check(size)

    def check(self, remaining: int) -> None:
        """Refuse (ENOSPC, naming the size and the room) when ``remaining`` bytes
        do not fit; else count them as this preallocation's until given."""
        with _pending_lock:
            # Read under the lock: a preallocation that ends meanwhile is then counted
            # twice (in the free space and as pending), never not at all.
            try:
                device = os.fstat(self._fd).st_dev
                fs = os.fstatvfs(self._fd)
            except (OSError, AttributeError):  # AttributeError: no fstatvfs (Windows)
                return
            if fs.f_blocks <= 0 or fs.f_frsize <= 0 or fs.f_bavail > fs.f_blocks:
                return  # a file system that reports no sizes, or none that hold
            mine = self._mine if device == self._device else 0
            others = _pending.get(device, 0) - mine
            room = fs.f_bavail * fs.f_frsize - others
            kept = margin(remaining, fs.f_frsize)
            if remaining + kept > room:
                still = "" if remaining == self._size else f" ({remaining} still to allocate)"
                raise NoRoom(
                    errno.ENOSPC,
                    f"{os.strerror(errno.ENOSPC)} for the object's {self._size} bytes"
                    f"{still}: {max(room, 0)} bytes free, of which {kept} are kept for "
                    "the file system's own blocks",
                )
            self._take_back(self._mine)
            _pending[device] = others + remaining
            self._device, self._mine = device, remaining

    def given(self, length: int) -> None:
        """``length`` bytes were allocated: the free space shows them now."""
        with _pending_lock:
            self._take_back(min(length, self._mine))

    def release(self) -> None:
        with _pending_lock:
            self._take_back(self._mine)

    def _take_back(self, length: int) -> None:
        if self._device is None or not length:
            return
        left = _pending.get(self._device, 0) - length
        if left > 0:
            _pending[self._device] = left
        else:
            _pending.pop(self._device, None)
        self._mine -= length
