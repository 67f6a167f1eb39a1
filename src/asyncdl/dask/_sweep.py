"""A Dask run's leftover temp files: where the run writes, and the sweep after it.

Only a process killed mid-download leaves a temp file (every other failure removes
its own), and a killed process remembers nothing. So before a partition downloads,
its worker appends the directories it is about to write into to a journal under
``dest_dir/.asyncdl-runs/`` (one file per run and process, as the ETag sidecar:
appends never interleave, on NFS either), and the run's temp files carry the run's
id in their names (``writer.TEMP_RUN``). After the run, each host reads the run's
journals, lists those directories and no others (never the whole tree), removes
the temp files named with that run's id, then the journals.

So a concurrent run, a CLI or library download into the same tree, and a real
object whose name looks like a temp file are never touched.

Dask may still run a partition once the run's results are in: when a dead worker
took a partition's input with it, the partition runs again elsewhere while a worker
that had already started it goes on (Dask cannot stop a running task, only forget
it), and a task queued on a worker may start before the worker hears it is no
longer wanted. Such a stray would journal after the sweep, or still be writing when
``download_manifest`` returns. So the run first ends on every worker (``end_run``):
none of its partitions starts there after that, and those still running are waited
for; only then does each host sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from .._files import own_files
from .._files.file_records import RUN_JOURNAL_DIR
from .._files.writer import is_temp_file

#: Where a run keeps its journals (defined beside the other names of asyncdl's own
#: files, which no key may take).
JOURNAL_DIR = RUN_JOURNAL_DIR
_SUFFIX = ".dirs"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: A journal line is one directory's name; the journals of a run are read up to this.
_LONGEST_LINE = 64 * 1024
_JOURNALS_READ = 256 * 1024 * 1024
_RUN = re.compile(r"[0-9a-f]+")
_lock = threading.Lock()

_runs_lock = threading.Lock()
#: Partitions of each run running in this process.
_running: Counter[str] = Counter()
#: Runs this process was told have ended: a few bytes per run, kept for the process's life.
_ended: set[str] = set()


@contextlib.contextmanager
def partition_of(run_id: str) -> Iterator[bool]:
    """Held while a partition of run ``run_id`` runs in this process; ``False`` if the
    run has already ended (then the partition must write nothing)."""
    with _runs_lock:
        live = run_id not in _ended
        if live:
            _running[run_id] += 1
    try:
        yield live
    finally:
        if live:
            with _runs_lock:
                _running[run_id] -= 1
                if not _running[run_id]:
                    del _running[run_id]


async def end_run(run_id: str | None) -> None:
    """On a worker, once the run's results are in: no partition of ``run_id`` starts
    here after this, and it returns when those still running here are done.
    ``None`` (no run to end) returns at once."""
    if run_id is None:
        return
    with _runs_lock:
        _ended.add(run_id)
    # On the worker's event loop: a stray partition runs in one of its threads.
    while True:
        with _runs_lock:
            if not _running[run_id]:
                return
        await asyncio.sleep(0.05)


def record_dirs(dest: Path, run_id: str, dirs: Iterable[Path]) -> None:
    """Note, past a kill of this process, that run ``run_id`` writes into ``dirs``
    (directories under ``dest``). Blocking: call it from the task's thread."""
    # One JSON string per line: a directory name may hold a newline.
    lines = "".join(json.dumps(d.relative_to(dest).as_posix()) + "\n" for d in set(dirs))
    if not lines:
        return
    dest.mkdir(parents=True, exist_ok=True)
    name = f"{run_id}.{socket.gethostname()}-{os.getpid()}{_SUFFIX}"
    # The destination may be shared: the journals' directory is made private and the
    # journal opened as the record sidecar is (never through a link, nobody else's).
    dir_fd = own_files.open_dir(dest, JOURNAL_DIR, create=True)
    try:
        with _lock:
            fd = own_files.open_file(dir_fd, name, os.O_WRONLY | os.O_APPEND, create=True)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)


def sweep(dest_dir: str, run_id: str | None) -> int:
    """Remove the temp files run ``run_id`` left under ``dest_dir`` (with ``None``:
    every run journaled there), then its journals; return how many files went.

    Only journals this user alone may write are read (the destination may be shared:
    anyone could plant one), never through a link nor from a FIFO; a directory one
    names is entered from ``dest_dir`` down without following a link."""
    try:
        journals = own_files.open_dir(Path(dest_dir), JOURNAL_DIR, create=False)
    except OSError:
        return 0
    try:
        read: list[str] = []
        dirs_of: dict[str, set[str]] = {}
        budget = [_JOURNALS_READ]
        for name in os.listdir(journals):
            run = name.split(".", 1)[0]
            if not name.endswith(_SUFFIX) or not _RUN.fullmatch(run):
                continue
            if run_id is not None and run != run_id:
                continue
            dirs = _journaled(journals, name, budget)
            if dirs is not None:
                read.append(name)
                dirs_of.setdefault(run, set()).update(dirs)
        removed = sum(
            _remove_temp_files(dest_dir, relative, run)
            for run, dirs in dirs_of.items()
            for relative in dirs
        )
        for name in read:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=journals)
    finally:
        os.close(journals)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(dest_dir, JOURNAL_DIR))  # only if no other run's is left
    return removed


def _remove_temp_files(dest_dir: str, relative: str, run: str) -> int:
    """Remove run ``run``'s temp files in ``dest_dir/relative``, reached one directory
    at a time without following a link (one made there since leads nowhere)."""
    try:
        fd = os.open(dest_dir, _DIR_FLAGS)
    except OSError:
        return 0
    try:
        for part in PurePosixPath(relative).parts:
            try:
                inner = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                return 0  # never created, gone since, or not a directory of its own
            os.close(fd)
            fd = inner
        removed = 0
        for entry in os.listdir(fd):
            if is_temp_file(entry, run=run):
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=fd)
                    removed += 1
        return removed
    finally:
        os.close(fd)


def _journaled(journals: int, name: str, budget: list[int]) -> set[str] | None:
    """The directories a journal names, relative to ``dest_dir`` (nothing outside it);
    ``None`` if the journal is not ours to read."""
    try:
        fd = own_files.open_file(journals, name, os.O_RDONLY)
    except OSError:
        return None
    found: set[str] = set()
    try:
        for line in own_files.lines_of(fd, longest=_LONGEST_LINE, budget=budget):
            try:
                relative = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a line its process was still writing when killed
            if not isinstance(relative, str):
                continue
            pure = PurePosixPath(relative)
            if not pure.is_absolute() and ".." not in pure.parts:
                found.add(pure.as_posix())
    except OSError:
        return None
    finally:
        os.close(fd)
    return found
