"""Old partial files (``resume=True``) and stale temp files in a directory: finding
them, and removing those no running download holds (``asyncdl clean``).

A partial file and its journal (see ``resume``) are one leftover; a busy one (its
journal locked by a running download) is listed and never removed. A temp file
(``.NAME.XXXXXXXX.asyncdl-tmp``, from a ``resume=False`` download that was killed) is
busy while its writer holds its lock (``writer.hold``: every live writer does, from
the moment it makes the file until it renames it), whatever its age: a download whose
bytes stall for minutes in its retries keeps its file. It is busy too while it changed
in the last :data:`TEMP_QUIET` seconds: a writer of an older asyncdl took no lock, nor
does any on Windows. The lock is tried again when the file is removed, and held while
it goes. One this user may not open (another user's, in a shared directory) has a lock
that cannot be tried: it is never removed (``PermissionError``). Nothing else is ever
touched.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import partial_paths
from .writer import is_temp_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: A temp file that changed within this many seconds may be a running download's.
TEMP_QUIET = 60.0
#: A temp file opened to try its lock: never through a link, never waiting on a FIFO.
_TEMP_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Leftover:
    """A partial file with its journal, or a stale temp file."""

    #: ``"partial"`` or ``"temp"``.
    kind: str
    #: The files it is made of (a partial and its journal; either may be missing).
    paths: tuple[Path, ...]
    #: The file it would have become, where known (from the journal's header).
    target: Path | None
    #: What the journal says it is of (``None`` for a temp file or a damaged journal).
    bucket: str | None
    key: str | None
    etag: str | None
    size: int | None
    #: Bytes the files take on disk.
    bytes_on_disk: int
    #: Seconds since any of its files last changed.
    age: float
    #: A running download holds it: it is never removed.
    busy: bool


class _Busy(Exception):
    pass


def find_partials(
    directory: str | os.PathLike[str],
    *,
    recursive: bool = True,
    errors: list[OSError] | None = None,
) -> list[Leftover]:
    """The partial files (with their journals) and stale temp files under
    ``directory`` (and its subdirectories when ``recursive``), by path.

    A file or directory that cannot be looked at (``EACCES``, say) raises its
    ``OSError``; with ``errors``, it is added there instead and the search goes on
    (``asyncdl clean`` reports it). Links are never followed: a link at one of these
    names is a leftover of its own (removing it leaves what it points to alone).
    """
    found: list[Leftover] = []
    for folder, names in _walk(Path(directory), recursive, errors):
        stems: set[str] = set()
        for name in names:
            for suffix in (partial_paths.PARTIAL_SUFFIX, partial_paths.JOURNAL_SUFFIX):
                if name.startswith(".") and name.endswith(suffix) and len(name) > len(suffix) + 1:
                    stems.add(name[1 : -len(suffix)])
            if is_temp_file(name):
                with _looking(errors):
                    found.append(_temp(folder / name))
        for stem in stems:
            with _looking(errors):
                found.append(_partial(folder, stem))
    return sorted(found, key=lambda leftover: leftover.paths)


@contextlib.contextmanager
def _looking(errors: list[OSError] | None) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        pass  # gone meanwhile: nothing to remove
    except OSError as exc:
        if errors is None:
            raise
        errors.append(exc)


def remove_partial(leftover: Leftover) -> bool:
    """Remove ``leftover``'s files unless it is (or has become) busy; whether it was.

    ``OSError`` when a file of it cannot be removed (an immutable file, another user's,
    a directory this process cannot write): its ``filename`` says which, if it can.
    A partial and its journal may then be half removed: what is left is found again.
    """
    if leftover.kind == "temp":
        return _remove_temp(leftover.paths[0])
    partial, journal = leftover.paths
    try:
        # Locked while it removes them: a download starting meanwhile waits for nothing.
        partial_paths.remove_pair(partial, journal, _Busy)
    except _Busy:
        return False
    return True


def _walk(
    directory: Path, recursive: bool, errors: list[OSError] | None
) -> Iterator[tuple[Path, list[str]]]:
    if not recursive:
        yield directory, os.listdir(directory)
        return
    # A directory that cannot be listed is skipped, as before, unless errors are kept.
    for folder, _, names in os.walk(directory, onerror=None if errors is None else errors.append):
        yield Path(folder), names


def _remove_temp(path: Path) -> bool:
    """Remove the temp file at ``path`` unless a writer holds it (its lock, or, for a
    writer that takes none, a change in the last :data:`TEMP_QUIET` seconds); whether
    it went (or was gone)."""
    try:
        fd = os.open(path, _TEMP_FLAGS)
    except FileNotFoundError:
        return True
    except PermissionError:
        # Another user's, not ours to read: its lock cannot be tried, and its writer may
        # be alive, stalled past any age. Not removed: an error saying so.
        raise
    except OSError:
        # A link (ELOOP), a socket's name: nothing that has a lock to try. A link is
        # removed, never what it points to.
        return _remove_by_age(path)
    try:
        st = os.fstat(fd)
        if time.time() - st.st_mtime < TEMP_QUIET:
            return False
        if fcntl is not None and stat.S_ISREG(st.st_mode):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # its writer is alive
        # Still the file the name names, locked while it goes: a writer that made a new
        # file there meanwhile (and locked it) keeps it.
        try:
            if not os.path.samestat(st, os.lstat(path)):
                return False
            os.unlink(path)
        except FileNotFoundError:
            pass
        return True
    finally:
        os.close(fd)


def _remove_by_age(path: Path) -> bool:
    try:
        if time.time() - os.lstat(path).st_mtime < TEMP_QUIET:
            return False
        os.unlink(path)
    except FileNotFoundError:
        pass
    return True


def _held(path: Path) -> bool:
    """Whether a writer holds the temp file at ``path`` now (its lock)."""
    if fcntl is None:  # pragma: no cover - Windows: no lock to see
        return False
    try:
        fd = os.open(path, _TEMP_FLAGS)
    except OSError:
        return False  # a link, gone, or not ours to read: no lock to see
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        # Shared, and let go at once: a look, which a writer's lock refuses.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _temp(path: Path) -> Leftover:
    st = os.lstat(path)
    age = time.time() - st.st_mtime
    # The lock is looked at only on an old file: a writer locks its file the moment it
    # makes it, and a look then could refuse it its lock (it would take another name).
    busy = age < TEMP_QUIET or _held(path)
    return Leftover("temp", (path,), None, None, None, None, None, _used(st), age, busy)


def _partial(folder: Path, stem: str) -> Leftover:
    partial = folder / f".{stem}{partial_paths.PARTIAL_SUFFIX}"
    journal = folder / f".{stem}{partial_paths.JOURNAL_SUFFIX}"
    stats = []
    for path in (partial, journal):
        with contextlib.suppress(FileNotFoundError):
            stats.append(os.lstat(path))
    if not stats:
        raise FileNotFoundError(partial)
    found, busy = partial_paths.peek(journal)
    header = found.header if found is not None else None
    target = None
    if header is not None and Path(header.target).name == header.target != "..":
        target = folder / header.target  # a name, never a path out of the folder
    return Leftover(
        "partial",
        (partial, journal),
        target,
        header.bucket if header is not None else None,
        header.key if header is not None else None,
        header.etag if header is not None else None,
        header.size if header is not None else None,
        sum(_used(st) for st in stats),
        time.time() - max(st.st_mtime for st in stats),
        busy,
    )


def _used(st: os.stat_result) -> int:
    """Bytes on disk: a preallocated partial file takes its full size at once."""
    blocks = getattr(st, "st_blocks", None)
    return blocks * 512 if blocks is not None else st.st_size
