"""A resumable download's files at their names, next to the target ``NAME``:
``.NAME.asyncdl-partial`` and ``.NAME.asyncdl-journal`` (see ``partial_file``). Their
names, opening them safely, the journal's lock, and looking at or removing them from
outside a download (``lookup``, ``peek``, ``remove``: ``resume``, ``asyncdl clean``).

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
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from . import journal
from .journal import Found
from .writer import cut_name

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
#: A journal opened by the download that holds it: lines are appended.
JOURNAL_FLAGS = os.O_RDWR | os.O_APPEND | _SAFE
_READ_FLAGS = os.O_RDONLY | _SAFE
PARTIAL_FLAGS = os.O_RDWR | _SAFE
#: Tries for the lock a download holds alone (a reader holds it a few microseconds).
_LOCK_TRIES = 5
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


def open_regular(path: Path, flags: int, mode: int = 0o666) -> int:
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


def lock(fd: int, busy: Busy, *, shared: bool) -> None:
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


def open_locked(
    path: Path, busy: Busy, *, create: bool = False, shared: bool = False
) -> int | None:
    """The journal at ``path``, open and locked, or ``None`` if there is none (and
    ``create`` is false): read-only when ``shared`` (a reader's), else for appending.
    The lock is on the file the path still names: a journal unlinked by the download
    that held it, or replaced by a compacted one, is not one to lock.

    :class:`NotRegular` when the name holds no regular file; with ``create`` that is
    removed instead (a link is removed, never what it points to), and a journal made."""
    flags = _READ_FLAGS if shared else JOURNAL_FLAGS
    for _ in range(8):
        try:
            fd = open_regular(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = open_regular(path, flags | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                continue  # made meanwhile: opened (and locked) as any other
        except NotRegular:
            if not create:
                raise
            os.unlink(path)
            continue
        try:
            lock(fd, busy, shared=shared)
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
        fd = open_locked(path, busy, shared=True)
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
        fd = open_locked(path, busy)
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
        fd = open_locked(path, _Held, shared=True)
    except _Held:
        busy = True
        try:
            fd = open_regular(path, _READ_FLAGS)
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
