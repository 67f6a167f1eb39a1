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
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from ..writer import is_temp_file

JOURNAL_DIR = ".asyncdl-runs"
_SUFFIX = ".dirs"
_RUN = re.compile(r"[0-9a-f]+")
_lock = threading.Lock()


def record_dirs(dest: Path, run_id: str, dirs: Iterable[Path]) -> None:
    """Note, past a kill of this process, that run ``run_id`` writes into ``dirs``
    (directories under ``dest``). Blocking: call it from the task's thread."""
    # One JSON string per line: a directory name may hold a newline.
    lines = "".join(json.dumps(d.relative_to(dest).as_posix()) + "\n" for d in set(dirs))
    if not lines:
        return
    journals = dest / JOURNAL_DIR
    journals.mkdir(parents=True, exist_ok=True)
    name = f"{run_id}.{socket.gethostname()}-{os.getpid()}{_SUFFIX}"
    with _lock, open(journals / name, "a", encoding="utf-8") as journal:
        journal.write(lines)


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
