"""Child processes for the tests that signal them: started as a shell starts a
foreground job, whatever started pytest, and always reaped.

A child inherits an ignored signal. pytest started as a background job of a
non-interactive shell (or by some CI runners) ignores SIGINT, and under ``nohup``
SIGHUP, so a plain ``Popen`` child would too: Python then installs no
``KeyboardInterrupt`` handler, the command keeps the ignored signal ignored (as it
must), and a test that sends it waits in vain.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: The signals that stop a command, which the tests send: each at its default in a child.
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Runs before the real program and is replaced by it (exec keeps a disposition of
# SIG_DFL or SIG_IGN): the stop signals back to their default, then the signals asked
# to be ignored.
_LAUNCHER = (
    "import os, signal, sys\n"
    f"for number in {tuple(int(number) for number in STOPS)}:\n"
    "    signal.signal(number, signal.SIG_DFL)\n"
    "for number in filter(None, sys.argv[1].split(',')):\n"
    "    signal.signal(int(number), signal.SIG_IGN)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@contextmanager
def spawned(
    argv: Sequence[str], *, ignoring: Sequence[signal.Signals] = (), **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """``Popen(argv, **popen)`` with the stop signals at their default and ``ignoring``
    ignored (as ``nohup`` leaves SIGHUP); on the way out (a failed assertion included) the child is
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
    with ignored(signal.SIGINT):
        yield


@contextmanager
def stops_ignored() -> Iterator[None]:
    """This process ignores every stop signal, as pytest does when a background job
    started under ``nohup`` starts it (SIGINT and SIGHUP) or a runner ignores SIGTERM."""
    with ignored(*STOPS):
        yield


@contextmanager
def ignored(*signals: signal.Signals) -> Iterator[None]:
    previous = [(number, signal.signal(number, signal.SIG_IGN)) for number in signals]
    try:
        yield
    finally:
        for number, handler in reversed(previous):
            signal.signal(number, handler)
