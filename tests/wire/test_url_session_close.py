"""The engine's own URL session as it closes: every socket it opened is closed, none
waited for longer than it takes to end it, none kept alive by the session's record."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import asyncdl
from asyncdl._wire import url_session

from .test_url_raw_http import RawServer, ranges_served
from .test_url_session import aws_settings  # noqa: F401 - autouse: no proxy of the machine's

ETAG = '"v1"'


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[url_session.OwnSession]:
    """Every own session the engine opens, in order."""
    made: list[url_session.OwnSession] = []
    opening = url_session.open_session

    async def spied(pool: int, connect: float, read: float) -> url_session.OwnSession:
        made.append(await opening(pool, connect, read))
        return made[-1]

    monkeypatch.setattr(url_session, "open_session", spied)
    return made


class Silent:
    """A TCP server that accepts and never says anything: a TLS handshake to it, or a
    request, hangs. ``accepted`` is set on its first connection."""

    def __init__(self) -> None:
        self.accepted = asyncio.Event()
        self.port = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        self.accepted.set()

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls) -> AsyncIterator[Silent]:
        silent = cls()
        server = await asyncio.start_server(silent._handle, "127.0.0.1", 0)
        silent.port = server.sockets[0].getsockname()[1]
        try:
            yield silent
        finally:
            for writer in silent._writers:
                writer.transport.abort()
            server.close()
            await server.wait_closed()


async def _download_while_closing(
    sessions: list[url_session.OwnSession], silent: Silent, tmp_path: Path
) -> tuple[asyncdl.Engine, asyncio.Task[object]]:
    """An engine whose download of an https:// URL is still in its TLS handshake."""
    config = asyncdl.TransferConfig(connect_timeout=600, read_timeout=600)
    engine = asyncdl.Engine(SimpleNamespace(), config=config)
    await engine.__aenter__()
    url = f"https://127.0.0.1:{silent.port}/obj"
    download = asyncio.ensure_future(engine.download_url(url, tmp_path / "obj"))
    await silent.accepted.wait()
    assert len(sessions) == 1
    return engine, download


async def test_closing_the_engine_ends_a_connection_still_being_opened(
    sessions: list[url_session.OwnSession], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download's connection is still in its TLS handshake when the engine closes: no
    pool holds it yet, so the session's close neither ends it nor sees it end, and waits
    its whole grace for a socket that stays open (until the connect timeout gives up on
    it). The grace is made short here only so that the failure is quick."""
    monkeypatch.setattr(url_session, "CLOSING_GRACE", 0.05)
    async with Silent.running() as silent:
        engine, download = await _download_while_closing(sessions, silent, tmp_path)
        try:
            await engine.aclose()
            still_open = [repr(s) for s in sessions[0]._sockets if s.fileno() != -1]
        finally:
            download.cancel()
            await asyncio.gather(download, return_exceptions=True)
        assert still_open == []


async def test_the_sockets_are_known_weakly() -> None:
    """The session's record of its sockets keeps none alive: a connection it closed long
    ago is no longer in it once collected."""
    async with RawServer(ranges_served(b"x" * 100, etag=ETAG, chunked=False)) as server:
        own = await url_session.open_session(4, 5.0, 5.0)
        try:
            for _ in range(20):
                async with own.http.get(server.url("/obj")) as response:
                    await response.read()
            gc.collect()
            assert len(own._sockets) <= 1
        finally:
            await own.close()
    assert all(s.fileno() == -1 for s in own._sockets)
