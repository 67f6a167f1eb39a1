"""A whole body of unknown length (a chunked 200 from a server that ignores Range) that
a download reads to its end before it places its bytes: it is spooled beside the
target, not in the system's temp directory, and read as every body is, within the
engine's bandwidth cap and read timeout, with progress as its bytes arrive.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import asyncdl

from ..conftest import CHUNK, payload
from .test_url_raw_http import RawServer, reply

Send = Callable[[asyncio.StreamWriter], Awaitable[None]]


class SlowServer:
    """An HTTP/1.1 server whose answer ``send(writer)`` writes at its own pace."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SlowServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        for task in self._handlers:
            task.cancel()
        self._server.close()
        await self._server.wait_closed()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            await self._send(writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


_HEAD = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n'


async def test_a_body_of_unknown_length_is_spooled_beside_the_target(
    engine: asyncdl.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The system's temp directory may be small (a tmpfs) or missing: the spool goes
    where the object is going anyway."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    body = payload(3 * CHUNK + 5)
    (tmp_path / "out").mkdir()
    async with RawServer(lambda request: reply(200, {"ETag": '"v1"'}, body, chunked=True)) as s:
        await engine.download_url(s.url("/obj"), tmp_path / "out" / "obj")
    assert (tmp_path / "out" / "obj").read_bytes() == body
    assert os.listdir(tmp_path / "out") == ["obj"]


async def test_a_stalled_body_of_unknown_length_fails_within_the_read_timeout(
    client: object, tmp_path: Path
) -> None:
    """The client is borrowed (its own read timeout is botocore's 60 s): the engine's
    ``read_timeout`` is what a stalled spool, or a stalled stream, waits."""

    async def stall(writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + b"%x\r\n" % CHUNK + payload(CHUNK)[:1000])
        await writer.drain()
        await asyncio.sleep(3600)

    config = asyncdl.TransferConfig(read_timeout=1, max_attempts=1)
    async with asyncdl.Engine(client, config=config) as engine, SlowServer(stall) as server:
        for read in (
            lambda: engine.download_url(server.url("/a"), tmp_path / "a"),
            lambda: _read_all(engine.stream_url(server.url("/b"))),
        ):
            began = time.monotonic()
            with pytest.raises(asyncdl.DownloadError, match="no bytes for 1s"):
                async with asyncio.timeout(30):
                    await read()
            assert time.monotonic() - began < 10
    assert os.listdir(tmp_path) == []


async def _read_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


async def test_a_spooled_body_reports_progress_as_it_arrives(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(8 * CHUNK)
    finished: list[float] = []

    async def trickle(writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD)
        for i in range(0, len(body), CHUNK):
            writer.write(b"%x\r\n%s\r\n" % (CHUNK, body[i : i + CHUNK]))
            await writer.drain()
            await asyncio.sleep(0.2)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        finished.append(time.monotonic())

    calls: list[tuple[float, int]] = []
    async with SlowServer(trickle) as server:
        await engine.download_url(
            server.url("/p"),
            tmp_path / "p",
            progress=lambda delta: calls.append((time.monotonic(), delta)),
        )
    assert (tmp_path / "p").read_bytes() == body
    assert sum(delta for _, delta in calls) == len(body)
    assert calls[0][0] < finished[0] - 0.5, "no progress until the body had ended"
