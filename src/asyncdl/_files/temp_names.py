"""Temp file names: ``.NAME.XXXXXXXX.asyncdl-tmp`` next to the target
(``.NAME.RUN-XXXXXXXX.asyncdl-tmp`` in a Dask run, so that its sweep removes its own
leftovers and nothing else), with NAME cut short where the whole would pass the file
system's limit on a name's bytes: any name the file system takes as a target must
work.
"""

from __future__ import annotations

import os
import random
import re
from contextvars import ContextVar
from pathlib import Path

_TEMP_SUFFIX = ".asyncdl-tmp"
#: Bytes in a name on nearly every file system; a smaller limit is asked of the file
#: system only when a name is refused (no extra call on the usual path).
NAME_MAX = 255
_RANDOM = re.compile(r"[0-9a-f]{8}")

#: The run a download belongs to, put into its temp file's name: set by
#: ``asyncdl.dask`` around a partition's downloads (tasks inherit it), ``None``
#: elsewhere. Lower-case hex.
TEMP_RUN: ContextVar[str | None] = ContextVar("asyncdl_temp_run", default=None)


def temp_path_for(target: Path, run: str | None = None, name_max: int | None = None) -> Path:
    """A fresh temp path next to ``target``, within ``name_max`` bytes (default 255)."""
    return target.with_name(temp_name(target.name, run, name_max))


def temp_name(name: str, run: str | None, name_max: int | None) -> str:
    """A fresh temp name for the target ``name``, within ``name_max`` bytes (255)."""
    # Unique, not secret: the file is created O_EXCL (a taken name gets another), so
    # no os.urandom call (a syscall, and the GIL given up, per object) is needed; the
    # random module reseeds itself in a forked child.
    token = f"{random.getrandbits(32):08x}"
    tail = f".{run}-{token}{_TEMP_SUFFIX}" if run else f".{token}{_TEMP_SUFFIX}"
    room = (name_max or NAME_MAX) - 1 - len(tail)
    return f".{cut_name(name, room)}{tail}"


def cut_name(name: str, room: int) -> str:
    """The longest start of ``name`` within ``room`` bytes as the file system encodes
    it, whole characters only (a UTF-8 name is never cut inside a character)."""
    if len(os.fsencode(name)) <= room:
        return name
    used = 0
    for count, char in enumerate(name):
        used += len(os.fsencode(char))
        if used > room:
            return name[:count]
    return name


def is_temp_file(name: str, *, run: str | None = None) -> bool:
    """Whether a file name is one of asyncdl's temp files (tests and cleanup use it);
    with ``run``, one of that Dask run's."""
    if not (name.startswith(".") and name.endswith(_TEMP_SUFFIX)):
        return False
    if run is None:
        return True
    stem = name[: -len(_TEMP_SUFFIX)]
    marker = f".{run}-"
    return (
        len(stem) > len(marker) + 9
        and stem[-8 - len(marker) : -8] == marker
        and _RANDOM.fullmatch(stem[-8:]) is not None
    )
