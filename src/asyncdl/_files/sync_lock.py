"""The lock a ``sync --delete`` run holds on its synced directory, and the moment its
listing began, by the directory's own clock.

Two overlapping runs (cron jobs) would otherwise race: run A lists, run B lists and
downloads a new object, then A's delete phase finds B's file, vouched for by its
record and missing from A's listing, and deletes it while the object is still in
the bucket. So a ``--delete`` run holds ``flock`` on ``DEST/.asyncdl-sync-lock``
from before its listing until its removals are done, and another waits for it (or,
asked not to wait, fails at once). The name is one of asyncdl's own
(``file_records.is_own_name``): a key named so is refused, and listings, removals,
records and ``asyncdl clean`` never take the file for a target.

The file is removed by its holder as it lets go, under the lock. A run waiting on
the file it opened finds, once it gets the lock, that the name no longer names it
(or names another's), and tries again: only the file the name names counts. Like
asyncdl's other files in a shared directory, it is opened without following a link
and must be this user's alone (``own_files``): one planted there by someone else is
an error, not a lock to trust.

The lock does not stop a run without ``--delete`` (which takes none) from writing
meanwhile. So the holder also writes to the file as it takes the lock: the file's
change time is then the moment the listing began, stamped by the clock that stamps
every file in the directory (an NFS server's, say, not this host's). A removal
leaves alone a file changed since (``stale``).

Where ``flock`` is missing (Windows) or the file system refuses it, the run goes on
unlocked, that change time still guarding its removals.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from . import own_files
from .file_records import SYNC_LOCK

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
#: errnos of a file system that cannot lock (some network file systems).
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}
#: What of the holder's note is read, at most (it is a line of a pid and a host).
_NOTE_MAX = 256
_TRIES = 8


@dataclass(slots=True)
class Held:
    """A synced directory's lock, held (see :func:`try_lock`)."""

    root: Path
    #: The descriptors of the directory and of the lock's file.
    dir_fd: int
    fd: int
    #: The lock's file's change time once stamped: when the run's listing began, by
    #: the directory's clock. A file changed since is another run's.
    since_ns: int
    #: Whether the run made the directory (removed again if it is left empty).
    made_root: bool


def try_lock(root: Path) -> Held | str:
    """Lock the synced directory ``root`` (made if missing, in an existing directory)
    and stamp the moment; or, when another run holds it, what it says of itself (its
    pid and host). ``OSError`` when the lock's file cannot be made or opened (one not
    this user's alone is planted there, say). Blocking."""
    made_root = False
    try:
        dir_fd = os.open(root, _DIR)  # the destination the user named: a link is theirs
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(root)
            made_root = True
        dir_fd = os.open(root, _DIR)
    try:
        for _ in range(_TRIES):
            fd = own_files.open_file(dir_fd, SYNC_LOCK, os.O_RDWR, create=True)
            try:
                if not _lock(fd):
                    note = os.pread(fd, _NOTE_MAX, 0).decode("utf-8", "replace").strip()
                    os.close(fd)
                    os.close(dir_fd)
                    return note
                if not _named(dir_fd, fd):
                    os.close(fd)  # let go by a run that removed it: the name again
                    continue
                since = _stamp(fd)
            except BaseException:
                os.close(fd)
                raise
            return Held(root, dir_fd, fd, since, made_root)
        raise OSError(errno.EAGAIN, "the lock's file keeps being replaced", str(root / SYNC_LOCK))
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(dir_fd)
        raise


def release(held: Held) -> None:
    """Remove the lock's file (if the name still names it) and let go; the directory
    too if this run made it and left it empty. Blocking."""
    try:
        if _named(held.dir_fd, held.fd):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SYNC_LOCK, dir_fd=held.dir_fd)
    finally:
        os.close(held.fd)
        os.close(held.dir_fd)
    if held.made_root:
        with contextlib.suppress(OSError):  # not empty: the run's files are in it
            os.rmdir(held.root)


def _lock(fd: int) -> bool:
    """Take the lock without waiting; False: another run holds it."""
    if fcntl is None:  # pragma: no cover - Windows: no lock, the stamp still guards
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LOCKS:
            raise
    return True


def _named(dir_fd: int, fd: int) -> bool:
    """Whether the lock's name still names the file open at ``fd``."""
    try:
        now = os.stat(SYNC_LOCK, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(now, os.fstat(fd))


def _stamp(fd: int) -> int:
    """Write who holds the lock (for a run that finds it held), and return the file's
    change time that this write set."""
    note = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, note, 0)
    return os.fstat(fd).st_ctime_ns
