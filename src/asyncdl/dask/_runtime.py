"""One event loop and one Engine per worker process, shared by every task it runs.

A Dask task is a plain function run in one of the worker's threads. Opening an
Engine per task would build a new aiobotocore client (and connection pool) for
every partition, and one per thread would split the process's request budget.
So each process lazily starts one long-lived asyncio loop in a daemon thread, and
keeps its engines there, one per ``TransferConfig`` (a frozen, hashable value that
travels with the task). Tasks submit coroutines with
``asyncio.run_coroutine_threadsafe`` and block their own thread until the result.
The endpoint and credentials come from the process's standard AWS environment.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..config import TransferConfig
from ..engine import Engine

T = TypeVar("T")

_lock = threading.Lock()
_runtime: Runtime | None = None


class Runtime:
    """The process's loop thread and its engines."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        # Touched only on the loop, so no lock: one opening task per config.
        self._engines: dict[TransferConfig, asyncio.Task[Engine]] = {}
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="asyncdl-dask-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop; block this (task) thread until it is done."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def engine(self, config: TransferConfig) -> Engine:
        """This process's open engine for ``config`` (opened on first use)."""
        task = self._engines.get(config)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            # First use, or an opening that failed: open (again).
            task = self.loop.create_task(_open(config))
            self._engines[config] = task
        # Shielded: one task cancelled while waiting must not cancel the opening
        # that other tasks of this process wait for too.
        return await asyncio.shield(task)

    def close(self) -> None:
        """Close the engines (their clients and pools) and stop the loop."""
        if self.loop.is_closed():
            return
        closing = asyncio.run_coroutine_threadsafe(self._close_engines(), self.loop)
        try:
            # Bounded: a wedged loop must not hold the process's exit forever; and at
            # exit nobody is left to tell of a failed close.
            with contextlib.suppress(Exception):
                closing.result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)

    async def _close_engines(self) -> None:
        engines, self._engines = self._engines, {}
        for task in engines.values():
            if task.done() and not task.cancelled() and task.exception() is None:
                await task.result().aclose()
            else:
                task.cancel()


async def _open(config: TransferConfig) -> Engine:
    engine = Engine(config=config)
    await engine.open()
    return engine


def runtime() -> Runtime:
    """The calling process's runtime, started on first use (a forked child starts its own)."""
    global _runtime  # noqa: PLW0603 - one per process, by design
    with _lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = Runtime()
            # Close the clients cleanly when the worker process exits normally (a
            # killed one leaves nothing but temp files, which the run removes).
            atexit.register(_runtime.close)
        return _runtime
