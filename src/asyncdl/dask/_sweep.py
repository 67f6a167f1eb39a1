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

from .. import own_files
from ..file_records import RUN_JOURNAL_DIR
from ..writer import is_temp_file

#: Where a run keeps its journals (defined beside the other names of asyncdl's own
#: files, which no key may take).
JOURNAL_DIR = RUN_JOURNAL_DIR
_SUFFIX = ".dirs"
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
    every run journaled there), then its journals; return how many files went."""
    journals = os.path.join(dest_dir, JOURNAL_DIR)
    try:
        names = os.listdir(journals)
    except OSError:
        return 0
    read: list[str] = []
    dirs_of: dict[str, set[str]] = {}
    for name in names:
        run = name.split(".", 1)[0]
        if not name.endswith(_SUFFIX) or not _RUN.fullmatch(run):
            continue
        if run_id is not None and run != run_id:
            continue
        read.append(name)
        dirs_of.setdefault(run, set()).update(_journaled(os.path.join(journals, name)))
    removed = 0
    for run, dirs in dirs_of.items():
        for relative in dirs:
            directory = os.path.join(dest_dir, relative)
            try:
                entries = os.listdir(directory)
            except OSError:
                continue  # never created, or gone since
            for entry in entries:
                if is_temp_file(entry, run=run):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(directory, entry))
                        removed += 1
    for name in read:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(journals, name))
    with contextlib.suppress(OSError):
        os.rmdir(journals)  # only if no other run's journal is left
    return removed


def _journaled(path: str) -> set[str]:
    """The directories a journal names, relative to ``dest_dir``; nothing outside it."""
    found: set[str] = set()
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                relative = json.loads(line)
            except ValueError:
                continue  # a line its process was still writing when killed
            if not isinstance(relative, str):
                continue
            pure = PurePosixPath(relative)
            if not pure.is_absolute() and ".." not in pure.parts:
                found.add(os.path.join(*pure.parts) if pure.parts else ".")
    return found
