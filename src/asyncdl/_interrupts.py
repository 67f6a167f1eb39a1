"""Running a command's event loop so that the signals that stop it cancel it cleanly.

Ctrl-C (SIGINT) is asyncio's own: ``asyncio.run`` cancels the work and waits for it
(the downloads in flight cancelled, their temp files removed) before
``KeyboardInterrupt`` comes out. SIGTERM (``kill``, ``timeout``, service managers,
container stops) and SIGHUP (the terminal went away) would end Python on the spot
and leave temp files behind; while the work runs, they cancel it the same way.

A signal the process inherited as ignored stays ignored, as POSIX asks of commands:
``nohup`` ignores SIGHUP, and a background job of a non-interactive shell ignores
SIGINT (Python then installs no ``KeyboardInterrupt`` handler). A signal that a
program embedding the command already handles is left to it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

#: Signals that cancel the work as Ctrl-C does (SIGHUP does not exist on Windows).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_Result = TypeVar("_Result")


class Stopped(Exception):
    """A signal cancelled the work, which has cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """As shells report a process ended by the signal: 128 + its number."""
        return 128 + self.signum


def run(
    work: Coroutine[Any, Any, _Result],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> _Result:
    """``asyncio.run(work)`` on a loop of ``loop_factory`` (asyncio's default when
    ``None``); :class:`Stopped` once Ctrl-C or a stop signal has cancelled it and it has
    cleaned up."""
    try:
        # asyncio.run takes a loop factory only from 3.12; its Runner, from 3.11.
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(_stoppable(work))
    except KeyboardInterrupt:
        raise Stopped(signal.SIGINT) from None


async def _stoppable(work: Coroutine[Any, Any, _Result]) -> _Result:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def stop(signum: int) -> None:
        if not received:  # a second signal must not interrupt the cleanup
            received.append(signum)
            task.cancel()

    installed = []
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_DFL:  # ignored, or someone else's
            continue
        try:
            loop.add_signal_handler(signum, stop, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            continue
        installed.append(signum)
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Stopped(received[0]) from None
        raise
    finally:
        # Back to SIG_DFL, which it was: the next signal ends the process as usual.
        for signum in installed:
            loop.remove_signal_handler(signum)
