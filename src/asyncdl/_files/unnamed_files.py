"""Publishing a new small file with no name in between: written unnamed
(``O_TMPFILE``), then linked at its path, where it appears whole or not at all.

A new file in one write is most of a bulk download of small objects. This way it
costs one directory entry added (the link) instead of a temp name created, then
renamed (each a search of the directory, long in a directory of many files), and no
lock or stat: a file without a name is nobody else's, and a crash before the link
leaves nothing behind, not even a temp file. ``writer.TempFile`` publishes a
deferred file this way when it can, and by a named temp file otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from .file_writes import write_all


def link_unnamed(parent: str, target: str, data: bytes, dir_fd: int | None = None) -> bool:
    """Publish ``data`` as the new file ``target`` with no name in between: an unnamed
    file in ``parent`` (``O_TMPFILE``), written, then linked at ``target``. With
    ``dir_fd``, ``parent`` held open there, and ``target`` a name in it. False when
    that cannot be done here (no ``O_TMPFILE`` on the system or the file system, no
    ``/proc``) or ``target`` exists: the caller then writes a named temp file and
    renames it, which replaces a target and keeps its mode."""
    if _TMPFILE_FLAGS is None or parent in _NO_TMPFILE:
        return False
    # An existing target (a download again) is not worth writing twice; one that
    # appears meanwhile makes the link fail, and the named way replaces it. Asked with
    # access(), which answers a new target's absence (most targets) without the
    # exception an lstat() raises; any error it hides, the open or the link meets
    # (then the named way meets and reports it).
    if os.access(target, os.F_OK, dir_fd=dir_fd, follow_symlinks=False):
        return False
    try:
        if dir_fd is None:
            fd = os.open(parent or ".", _TMPFILE_FLAGS, 0o666)
        else:
            fd = os.open(".", _TMPFILE_FLAGS, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _TMPFILE_UNSUPPORTED:
            # Per directory, not per process: another file system may take it.
            if len(_NO_TMPFILE) >= _NO_TMPFILE_MAX:
                _NO_TMPFILE.clear()
            _NO_TMPFILE.add(parent)
        return False  # the named temp file meets (and reports) any other error
    try:
        write_all(fd, [data], 0)
        # /proc's link to the open file, followed: linkat(2) with AT_SYMLINK_FOLLOW,
        # which needs no privilege (AT_EMPTY_PATH does). The absolute path makes the
        # directory descriptor unused; giving one is what makes Python call linkat.
        os.link(
            f"/proc/self/fd/{fd}", target, src_dir_fd=fd, dst_dir_fd=dir_fd, follow_symlinks=True
        )
    except OSError:
        # The target appeared (a link never replaces), or /proc cannot link here: the
        # unnamed file goes with its descriptor, and the named way decides.
        with contextlib.suppress(OSError):
            os.close(fd)
        return False
    # The target is there, whole: what closing says cannot undo that (and the caller
    # must be told it was published).
    with contextlib.suppress(OSError):
        os.close(fd)
    return True


_TMPFILE = getattr(os, "O_TMPFILE", None)
_TMPFILE_FLAGS = (
    None
    if _TMPFILE is None or not sys.platform.startswith("linux")
    else _TMPFILE | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
)
#: What ``open(O_TMPFILE)`` answers where the file system (or kernel) lacks it.
_TMPFILE_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS})
#: Directories where it was refused; cleared when full (a bulk download meets many).
_NO_TMPFILE: set[str] = set()
_NO_TMPFILE_MAX = 1024
