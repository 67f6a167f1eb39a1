"""A resumable download's files at their names, next to the target ``NAME``:
``.NAME.asyncdl-partial`` and ``.NAME.asyncdl-journal`` (see ``partial_file``). Their
names, opening them safely, the journal's lock, and looking at or removing them from
outside a download (``lookup``, ``peek``, ``remove``: ``resume``, ``asyncdl clean``).

Planted files: the partial and the journal are opened with ``O_NOFOLLOW``, and are
asyncdl's only if they are regular files of this process's user alone (``own_files``:
owned by the effective uid, not writable by the group or others) with no other name
(``st_nlink == 1``: a hard link's other name is someone else's file). They are made
``0o600``, with ``O_EXCL`` (what was at the name removed first), and a journal is
never emptied in place: a fresh one is renamed over it. Anything else at either name
(a symbolic or hard link, a FIFO, another user's file, one others may write) is not
one asyncdl made: its name is removed (never what it points to), its content never
trusted (nor its journal's ``fsync``), and the download starts fresh,
``partial_discarded`` saying why. A name that cannot be removed (a directory, or a
file this user may not remove) is an error saying which, and nothing is made.

The download holds ``flock(LOCK_EX | LOCK_NB)`` on the journal from when it opens the
partial until it publishes or fails (no lock where ``fcntl`` is missing: Windows);
a second download of the same target fails at once (``TargetBusyError``), and a
killed process's lock goes with it. Reading a journal takes the lock shared, for
the few microseconds it reads, on a descriptor opened read-only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from . import journal
from .held_dirs import at
from .journal import Found
from .own_files import is_ours
from .writer import cut_name

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PARTIAL_SUFFIX = ".asyncdl-partial"
JOURNAL_SUFFIX = ".asyncdl-journal"
#: A compacted (or fresh) journal's name until it is renamed over the journal: a temp
#: file's suffix (``writer.is_temp_file``), so that ``asyncdl clean`` knows it.
_COMPACTING_SUFFIX = ".asyncdl-tmp"
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


def compaction_path(path: Path) -> Path:
    """The name a journal's replacement is written under before it is renamed over
    ``path``: one per journal, so that the download holding the journal's lock removes
    what a kill left there (only that download ever writes it)."""
    room = _NAME_MAX - 1 - len(_COMPACTING_SUFFIX)
    return path.with_name(f".{cut_name(path.name, room)}{_COMPACTING_SUFFIX}")


class NotRegular(OSError):
    """A partial's or journal's name holds something asyncdl never makes there: a
    symbolic or hard link, a FIFO, a device, another user's file, one others may
    write. Its ``strerror`` says which."""


class Unusable(OSError):
    """A partial's or journal's name holds something that is not asyncdl's and that it
    may not remove (a directory, or a file in a directory this user may not change)."""


def why_not_ours(st: os.stat_result) -> str | None:
    """Why what ``st`` describes is not a partial or journal this process may trust and
    write (``None``: it may)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not a regular file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not is_ours(st):
        return "not this user's alone (another user's, or others may write it)"
    if st.st_nlink != 1:
        return "a hard link (the file has another name)"
    return None


#: Times a file replaced as it is opened is opened again.
_REOPENS = 8


def open_regular(
    path: Path, flags: int, mode: int = 0o600, *, ours: bool = True, dir_fd: int | None = None
) -> int:
    """``path`` opened with ``flags`` (``O_NOFOLLOW`` among them), if it is a regular
    file, and (with ``ours``) this user's alone with no other name; else
    :class:`NotRegular`. With ``dir_fd`` (here and below): ``path``'s directory held
    open there (``held_dirs``), its name opened in it."""
    for _ in range(_REOPENS):
        try:
            fd = os.open(at(path, dir_fd), flags, mode, dir_fd=dir_fd)
        except OSError as exc:
            # A link at the name: ELOOP (EMLINK on FreeBSD). A directory: EISDIR when
            # opened for writing. Another user's file: maybe EACCES.
            if exc.errno not in (
                errno.ELOOP,
                errno.EMLINK,
                errno.EISDIR,
                errno.EACCES,
                errno.EPERM,
            ):
                raise
            try:
                why = _why(os.lstat(at(path, dir_fd), dir_fd=dir_fd), ours=ours)
            except OSError:
                why = None
            if why is None:
                raise
            raise NotRegular(exc.errno, why, str(path)) from None
        st = os.fstat(fd)
        if st.st_nlink == 0 and stat.S_ISREG(st.st_mode):
            # Opened just before a rename replaced it (a journal's compaction) or an
            # unlink removed it: no hard link, nothing damaged; the name is asked again.
            os.close(fd)
            continue
        why = _why(st, ours=ours)
        if why is not None:
            os.close(fd)
            raise NotRegular(errno.EINVAL, why, str(path))
        return fd
    raise OSError(errno.EAGAIN, "the file keeps being replaced", str(path))


def _why(st: os.stat_result, *, ours: bool) -> str | None:
    if ours or not stat.S_ISREG(st.st_mode):
        return why_not_ours(st)
    return None


def remove_name(path: Path, dir_fd: int | None = None) -> None:
    """Remove whatever ``path`` names (a link, never what it points to), if anything;
    :class:`Unusable` when that is not allowed (a directory is never removed)."""
    try:
        os.unlink(at(path, dir_fd), dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError) as exc:
        is_dir = _lexists(path, dir_fd, stat.S_ISDIR)
        what = "a directory" if is_dir else "a file this user may not remove"
        raise Unusable(
            exc.errno,
            f"asyncdl keeps a resumable download's partial file or journal at this name, "
            f"and it holds {what} that is not asyncdl's; move it away, or download "
            "without resume (--no-resume)",
            str(path),
        ) from None


def _lexists(path: Path, dir_fd: int | None, kind: Callable[[int], bool] | None = None) -> bool:
    """Whether ``path`` names anything (a link too; of ``kind``, if given)."""
    try:
        st = os.stat(at(path, dir_fd), dir_fd=dir_fd, follow_symlinks=kind is not None)
    except (OSError, ValueError):
        return False
    return kind is None or kind(st.st_mode)


def remove_unheld(
    path: Path, busy: Busy, *, partial: Path | None = None, dir_fd: int | None = None
) -> None:
    """:func:`remove_name` of a journal's name that holds no journal of ours (and of
    ``partial`` first, if given), unless what it holds is locked: another user's
    download of the same target, in a shared directory, whose files are not ours to
    trust, but whose names it publishes by (``busy()`` is raised then). Its lock is
    held while the names go, and only if the name still holds the file locked (another
    download may have made its own journal there since: then nothing is removed, and
    the caller looks again). :class:`Unusable` when it holds a file this user may not
    open: its lock cannot be tried, so nothing is removed."""
    try:
        fd = os.open(at(path, dir_fd), _READ_FLAGS, dir_fd=dir_fd)
    except PermissionError as exc:
        # Another user's file this user may not read: its lock cannot be tried, and a
        # download of theirs may hold it, stalled past any age. Left alone.
        raise Unusable(
            exc.errno,
            "asyncdl keeps a resumable download's journal at this name, and it holds "
            "another user's file this user may not read (their download may be running); "
            "move it away, or download without resume (--no-resume)",
            str(path),
        ) from None
    except OSError:
        # A link, a directory, a FIFO's or socket's name: no lock to see.
        if partial is not None:
            remove_name(partial, dir_fd)
        remove_name(path, dir_fd)
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            lock(fd, busy, shared=False)
        try:
            if not os.path.samestat(st, os.lstat(at(path, dir_fd), dir_fd=dir_fd)):
                return
        except FileNotFoundError:
            return
        if partial is not None:
            remove_name(partial, dir_fd)
        remove_name(path, dir_fd)
    finally:
        os.close(fd)


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
    path: Path,
    busy: Busy,
    *,
    create: bool = False,
    shared: bool = False,
    ours: bool = True,
    dir_fd: int | None = None,
) -> int | None:
    """The journal at ``path``, open and locked, or ``None`` if there is none (and
    ``create`` is false): read-only when ``shared`` (a reader's), else for appending.
    The lock is on the file the path still names: a journal unlinked by the download
    that held it, or replaced by a compacted one, is not one to lock.

    :class:`NotRegular` when the name holds no journal of ours (with ``ours`` false: no
    regular file, to look at only); with ``create`` that is removed instead (a link is
    removed, never what it points to), and a journal made."""
    flags = _READ_FLAGS if shared else JOURNAL_FLAGS
    for _ in range(8):
        try:
            fd = open_regular(path, flags, ours=ours, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = open_regular(path, flags | os.O_CREAT | os.O_EXCL, dir_fd=dir_fd)
            except (FileExistsError, NotRegular):
                continue  # made, or made and replaced, meanwhile: looked at again
        except NotRegular:
            if not create:
                raise
            remove_unheld(path, busy, dir_fd=dir_fd)
            continue
        try:
            lock(fd, busy, shared=shared)
            if os.path.samestat(os.fstat(fd), os.lstat(at(path, dir_fd), dir_fd=dir_fd)):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "the journal keeps being replaced", str(path))


def lookup(
    target: Path, busy: Busy, *, header_only: bool = False, dir_fd: int | None = None
) -> Found | None:
    """The journal of ``target`` as read now (``None``: there is none; one ``open``
    finds that). Raises ``busy()`` when a running download holds it. ``header_only``:
    its ranges are not read (the download that adopts the partial reads them)."""
    partial, path = paths_for(target)
    try:
        fd = open_locked(path, busy, shared=True, dir_fd=dir_fd)
    except NotRegular as exc:
        return Found(damaged=f"its journal is {exc.strerror}")
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size == 0 and not _lexists(partial, dir_fd):
            # Just made by a download that has not locked it yet (or one killed then):
            # nothing to continue, nor to remove (the download opening it starts fresh).
            return None
        found = journal.read(fd, header_only=header_only)
        if found.header is not None and found.damaged is None:
            try:
                st = os.lstat(at(partial, dir_fd), dir_fd=dir_fd)
            except FileNotFoundError:
                return Found(damaged="its partial file is missing")
            on_disk = st.st_size
            why = why_not_ours(st)
            if why is not None:
                found.damaged = f"its partial file is {why}"
            elif on_disk != found.header.size:
                size = found.header.size
                found.damaged = f"its partial file has {on_disk} bytes, the journal says {size}"
        return found
    finally:
        os.close(fd)  # the download takes the lock again when it opens the partial


def remove(target: Path, busy: Busy, *, dir_fd: int | None = None) -> bool:
    """Remove ``target``'s partial and journal, unless a running download holds them
    (then ``busy()`` is raised); whether there was either."""
    return remove_pair(*paths_for(target), busy, dir_fd=dir_fd)


def remove_pair(partial: Path, path: Path, busy: Busy, *, dir_fd: int | None = None) -> bool:
    """Remove a partial file and its journal, under the journal's lock. Either may be
    a link (or some other file) planted at its name: the link is removed, not what it
    points to; no download ever holds such a journal, so it needs no lock."""
    try:
        fd = open_locked(path, busy, dir_fd=dir_fd)
    except NotRegular:
        remove_unheld(path, busy, partial=partial, dir_fd=dir_fd)
        return True
    try:
        if fd is None and not _lexists(partial, dir_fd):
            return False
        remove_name(partial, dir_fd)
        if fd is not None:
            os.unlink(at(path, dir_fd), dir_fd=dir_fd)
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
        fd = open_locked(path, _Held, shared=True, ours=False)
    except _Held:
        busy = True
        try:
            fd = open_regular(path, _READ_FLAGS, ours=False)
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
