"""FastAPI: one Engine for the app's lifetime, shared by every request.

    from asyncdl.contrib.fastapi import EngineDep, lifespan

    app = FastAPI(lifespan=lifespan(config=asyncdl.TransferConfig(max_concurrency=64)))

    @app.get("/size/{key}")
    async def size(key: str, engine: EngineDep) -> int:
        async with engine.stream("bucket", key) as stream:
            return stream.size

Requests share the engine's one client, connection pool and concurrency budget;
no client is created per request. Needs the ``asyncdl[fastapi]`` extra.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from ..config import TransferConfig
from ..engine import Engine

_STATE = "asyncdl_engine"


def lifespan(
    config: TransferConfig | None = None,
    *,
    client: Any = None,
    inner: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A FastAPI ``lifespan`` that opens one :class:`Engine` (and its client) at start-up
    and closes it at shutdown; ``inner`` is the app's own lifespan, run inside it."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        async with Engine(client, config=config) as engine:
            setattr(app.state, _STATE, engine)
            try:
                if inner is None:
                    yield
                else:
                    async with inner(app):
                        yield
            finally:
                delattr(app.state, _STATE)

    return run


def get_engine(request: Request) -> Engine:
    """The app's engine (a FastAPI dependency)."""
    engine: Engine | None = getattr(request.app.state, _STATE, None)
    if engine is None:
        raise RuntimeError("no asyncdl engine: create the app with lifespan=asyncdl lifespan()")
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]
