"""Child processes for the tests that signal them: started as a shell starts a
foreground job, whatever started pytest, and always reaped.

A child inherits an ignored signal. pytest started as a background job of a
non-interactive shell (or by some CI runners) ignores SIGINT, so a plain ``Popen``
child would too: Python then installs no ``KeyboardInterrupt`` handler, Ctrl-C does
nothing, and a test that sends it waits in vain.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# Runs before the real program and is replaced by it (exec keeps a disposition of
# SIG_DFL or SIG_IGN): SIGINT back to its default, then the signals asked to be ignored.
_LAUNCHER = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "for number in filter(None, sys.argv[1].split(',')):\n"
    "    signal.signal(int(number), signal.SIG_IGN)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@contextmanager
def spawned(
    argv: Sequence[str], *, ignoring: Sequence[signal.Signals] = (), **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """``Popen(argv, **popen)`` with SIGINT at its default and ``ignoring`` ignored, as
    ``nohup`` would leave them; on the way out (a failed assertion included) the child is
    killed if it still runs, its pipes closed and its status collected."""
    ignored = ",".join(str(int(number)) for number in ignoring)
    launcher = [sys.executable, "-c", _LAUNCHER, ignored]
    with subprocess.Popen([*launcher, *argv], **popen) as child:
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT, as pytest does when a background job starts it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
