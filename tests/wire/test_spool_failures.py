"""A whole-object answer of unknown length is spooled into an unnamed temp file
(``body_reader.spool``) before its bytes are placed. When that file cannot be made, or
the download is cancelled while it is being made, the answer's connection and the file
are let go at once, not left open until the collector finds them.

The server is a real one on loopback: it answers every GET with a chunked 200 that
never ends, and holds the connection until the client lets it go.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path
from typing import IO

import pytest

import asyncdl
from asyncdl._wire import body_reader

from .test_own_http_attack import Script, _engine, _Scripted

pytestmark = pytest.mark.usefixtures("aws_env")


def _endless(box: list[_Scripted]) -> Script:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await box[0].head(reader)
        head = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n\r\n'
        writer.write(head + b"400\r\n" + b"x" * 1024 + b"\r\n")
        await writer.drain()
        await reader.read()  # until the client lets the connection go

    return script


async def test_a_spool_that_cannot_be_made_lets_its_connection_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_room(directory: str | None) -> IO[bytes]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(body_reader, "_unnamed_file", no_room)
    box: list[_Scripted] = []
    async with _Scripted(_endless(box)) as server, _engine(server.endpoint) as engine:
        box.append(server)
        with pytest.raises(asyncdl.DownloadError, match="No space left"):
            await engine.download("b", "k", tmp_path / "k")
        # The engine is still open: its pool did not close the connection, the answer did.
        assert await server.all_closed()
    assert not (tmp_path / "k").exists()


def _executor() -> str:
    """What the loop's default executor holds (asyncio's and the pool's own fields)."""
    pool = getattr(asyncio.get_running_loop(), "_default_executor", None)
    if pool is None:
        return "no default executor yet"
    threads = len(getattr(pool, "_threads", ()))
    queued = getattr(getattr(pool, "_work_queue", None), "qsize", lambda: "?")()
    return f"default executor: {threads} threads, {queued} calls queued"


async def test_a_download_cancelled_while_its_spool_is_made_closes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()
    made: list[IO[bytes]] = []
    real = body_reader._unnamed_file

    def slow(directory: str | None) -> IO[bytes]:
        started.set()
        release.wait(10)
        made.append(real(directory))
        return made[-1]

    monkeypatch.setattr(body_reader, "_unnamed_file", slow)
    box: list[_Scripted] = []
    async with _Scripted(_endless(box)) as server, _engine(server.endpoint) as engine:
        box.append(server)
        download = asyncio.create_task(engine.download("b", "k", tmp_path / "k"))
        # Polled, not waited for in a thread: the tests share one loop, and its default
        # executor, where the spool's file is made, may be busy with earlier tests' work.
        for _ in range(3000):
            if started.is_set() or download.done():
                break
            await asyncio.sleep(0.01)
        if not started.is_set():
            state = download.exception() if download.done() else "still running"
            pytest.fail(f"never spooled: {state!r}; requests {server.heads}; {_executor()}")
        download.cancel()
        with pytest.raises(asyncio.CancelledError):
            await download
        release.set()  # the thread makes the file now that nobody waits for it
        for _ in range(200):
            if made and made[0].closed:
                break
            await asyncio.sleep(0.01)
        assert made
        assert made[0].closed
        assert await server.all_closed()
