"""Old partial files (``resume=True``) and stale temp files in a directory: finding
them, and removing those no running download holds (``asyncdl clean``).

A partial file and its journal (see ``resume``) are one leftover; a busy one (its
journal locked by a running download) is listed and never removed. A temp file
(``.NAME.XXXXXXXX.asyncdl-tmp``, from a ``resume=False`` download that was killed)
holds no lock: it counts as busy while it changed in the last :data:`TEMP_QUIET`
seconds, as a running download's does. Nothing else is ever touched.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import partial_paths
from .writer import is_temp_file

#: A temp file that changed within this many seconds may be a running download's.
TEMP_QUIET = 60.0


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
        path = leftover.paths[0]
        try:
            if time.time() - os.lstat(path).st_mtime < TEMP_QUIET:
                return False
            os.unlink(path)
        except FileNotFoundError:
            pass
        return True
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


def _temp(path: Path) -> Leftover:
    st = os.lstat(path)
    age = time.time() - st.st_mtime
    return Leftover("temp", (path,), None, None, None, None, None, _used(st), age, age < TEMP_QUIET)


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
