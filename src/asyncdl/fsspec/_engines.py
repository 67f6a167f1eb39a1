"""The engines of asyncdl's fsspec file system: one per event loop it runs on,
opened there on first use (an engine's connections belong to the loop that opened
them), closed each on its own loop, by the file system's ``close``/``aclose`` or as
that loop shuts down (``asyncio.run``'s end); and ``config`` as ``storage_options``
carry it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

from fsspec.asyn import sync

from ..config import TransferConfig
from ..engine import Engine


def transfer_config(config: object) -> TransferConfig | None:
    """``config`` as ``storage_options`` carry it: a TransferConfig, a dict of its
    fields (what a JSON or YAML file of options holds), or None."""
    if config is None or isinstance(config, TransferConfig):
        return config
    if isinstance(config, Mapping):
        try:
            return TransferConfig(**config)
        except TypeError as exc:  # a field TransferConfig does not have
            raise ValueError(f"config: {exc}") from None
    raise ValueError(f"config must be a TransferConfig or a dict of its fields, got {config!r}")


@dataclass
class Opened:
    """The engine a file system opened on one event loop (shared with the finalizer,
    which must not hold the file system itself)."""

    loop: asyncio.AbstractEventLoop
    engine: Engine | None = None
    task: asyncio.Task[Engine] | None = None
    #: Started on the loop once the engine is open: the loop's ``shutdown_asyncgens``
    #: (``asyncio.run`` and ``asyncio.Runner`` call it as they end) closes it, and so
    #: the engine, on the loop while it still runs. An async generator rather than a
    #: task: a task would sit in ``asyncio.all_tasks()``, where code that waits for
    #: every task to finish would wait for it forever.
    keeper: AsyncGenerator[None] | None = None


async def close_opened(opened: Opened) -> None:
    keeper, opened.keeper = opened.keeper, None
    engine, opened.engine, opened.task = opened.engine, None, None
    try:
        if engine is not None:
            await engine.aclose()
    finally:
        if keeper is not None:
            await keeper.aclose()


async def keep(opened: Opened) -> AsyncGenerator[None]:
    """``Opened.keeper``: it yields once, and closes the engine when it is closed."""
    try:
        yield
    finally:
        opened.keeper = None  # this very generator: close_opened must not close it again
        await close_opened(opened)


def close_all(engines: dict[asyncio.AbstractEventLoop, Opened]) -> None:
    """Close each engine on its loop, where that loop still runs (a closed loop took
    its engine's connections with it)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for opened in list(engines.values()):
        loop = opened.loop
        if opened.engine is None or loop.is_closed() or not loop.is_running():
            continue
        with contextlib.suppress(Exception):  # at exit or in a collection: best effort
            if running is None:  # no loop in this thread: wait for it, briefly
                sync(loop, close_opened, opened, timeout=5)
            else:  # on a loop (its own, or another's): hand it over, never block one
                asyncio.run_coroutine_threadsafe(close_opened(opened), loop)
    engines.clear()


async def engine_on_loop(
    engines: dict[asyncio.AbstractEventLoop, Opened], settings: Mapping[str, Any]
) -> Engine:
    """The engine of the running loop in ``engines``, made with ``settings`` and opened
    on first use there; the engines of loops closed since are forgotten."""
    loop = asyncio.get_running_loop()
    for gone in [old for old in engines if old.is_closed()]:
        del engines[gone]  # its connections went with its loop
    opened = engines.setdefault(loop, Opened(loop))
    if opened.task is None:
        engine = Engine(**settings)

        async def opening() -> Engine:
            await engine.open()
            keeper = keep(opened)
            await anext(keeper)  # started: the loop keeps it (weakly) till it shuts down
            opened.keeper = keeper
            return engine

        opened.engine, opened.task = engine, loop.create_task(opening())
    task = opened.task
    try:
        return await asyncio.shield(task)
    except Exception:
        if opened.task is task:  # a failed opening is not kept: the next call retries
            opened.engine = opened.task = None
        raise
