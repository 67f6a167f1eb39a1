"""The ``asyncdl`` command: ``ls``, ``cp``, ``cp --recursive``, ``sync``, ``cat``, ``clean``
and ``demo``.

Exit status: 0 when every object was downloaded, 1 when any failed (one
``error: s3://bucket/key: ...`` line each, then ``N of M objects failed``), 2 for a
usage error (one line; nothing sent, nothing on disk), 130 on Ctrl-C, 143 on
SIGTERM and 129 on SIGHUP (the running downloads are cancelled first: temp files
removed, partial files kept for the next run to resume; a signal inherited as
ignored, as under ``nohup``, stays ignored; see ``interrupts``). Tracebacks only
with ``--debug``. Needs the ``cli`` extra: ``pip install 'asyncdl[cli]'``.

``app`` holds the group and the options every command shares, ``commands`` the
commands, ``work`` what they run, ``params`` what the arguments accept and
``output`` what is printed, ``destinations`` where ``cp`` and ``sync`` write (DEST
checked); ``sync`` and ``sync_work`` are ``sync``'s command and run,
``ls`` and ``ls_work`` ``ls``'s, ``filter_options`` the options ``cp -r`` and ``sync``
share, ``clean`` removes old partial files.
"""

from __future__ import annotations

from importlib.util import find_spec

try:
    import click  # noqa: F401 - checked here so a missing extra fails with one clear line

    # rich is only found, not imported: the progress bar imports it when it is drawn.
    if find_spec("rich") is None:
        raise ModuleNotFoundError("No module named 'rich'", name="rich")
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the install
    raise SystemExit(
        f"asyncdl: the command line needs the 'cli' extra ({missing.name} is not installed): "
        "pip install 'asyncdl[cli]'"
    ) from None

from . import commands as _commands  # noqa: F401 - registers the commands with the group
from . import ls as _ls  # noqa: F401 - registers "ls"
from . import sync as _sync  # noqa: F401 - registers "sync"
from .app import INTERRUPTED, cli, main

__all__ = ["INTERRUPTED", "cli", "main"]
