"""An error answer whose body never arrives whole: every read of a body, an error
answer's too, is under the engine's ``read_timeout``. A 503 whose chunked body has a
malformed chunk-size line (which aiohttp's C parser never reports to the reader) or
that stalls mid-chunk fails within about ``read_timeout``, on the URL path and on the
lean S3 GET alike, and touches nothing on disk.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.moto_server import FAKE_ENV

from ..conftest import make_client
from .test_http_spool import SlowServer

_READ_TIMEOUT = 0.5
#: Well over the read timeout, well under the hang the bug was.
_IN_TIME = 8.0

_HEAD = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def _bad_chunk_size(writer: asyncio.StreamWriter) -> None:
    """A 503 whose first chunk-size line, sent after its head, is not hexadecimal; the
    connection stays open."""
    writer.write(_HEAD)
    await writer.drain()
    # Apart from the head: the client has handed the answer over before it parses this.
    await asyncio.sleep(0.2)
    writer.write(b"zz-not-a-size\r\n<Error><Code>SlowDown</Code>\r\n")
    await writer.drain()
    await asyncio.sleep(3600)


async def _stall_mid_chunk(writer: asyncio.StreamWriter) -> None:
    """A 503 that sends its first chunk's size line and nothing more (a borrowed
    client's own read timeout is botocore's 60 s)."""
    writer.write(_HEAD + b"400\r\n")
    await writer.drain()
    await asyncio.sleep(3600)


async def _read_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


async def _read_some(reader: asyncdl.RandomAccessReader) -> bytes:
    async with reader:
        return await reader.read(10)


def _url_calls(
    engine: asyncdl.Engine, url: str, target: Path
) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "read_ranges_url": lambda: engine.read_ranges_url(url, [(0, 10)]),
        "stream_url": lambda: _read_all(engine.stream_url(url)),
        "open_reader_url": lambda: _read_some(engine.open_reader_url(url)),
        "download_url": lambda: engine.download_url(url, target),
    }


def _s3_calls(engine: asyncdl.Engine, target: Path) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "read_ranges": lambda: engine.read_ranges("b", "k", [(0, 10)]),
        "stream": lambda: _read_all(engine.stream("b", "k")),
        "open": lambda: _read_some(engine.open_reader("b", "k")),
        "download": lambda: engine.download("b", "k", target),
    }


async def _fails_in_time(call: Callable[[], Awaitable[Any]]) -> asyncdl.DownloadError:
    began = time.monotonic()
    with pytest.raises(asyncdl.DownloadError) as raised:
        # The bound of the test, not of the engine: without it a regression hangs.
        async with asyncio.timeout(_IN_TIME + 5):
            await call()
    assert time.monotonic() - began < _IN_TIME, raised.value
    return raised.value


async def _ok_bad_chunk_size(writer: asyncio.StreamWriter) -> None:
    """A chunked 200 (Range ignored) whose first chunk-size line is not one."""
    writer.write(b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n\r\n')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.write(b"zz-not-a-size\r\n0123456789\r\n")
    await writer.drain()
    await asyncio.sleep(3600)


_SENDS = {
    "bad-chunk-size": _bad_chunk_size,
    "stall-mid-chunk": _stall_mid_chunk,
    "200-bad-chunk-size": _ok_bad_chunk_size,
}


@pytest.mark.parametrize("borrowed", [False, True], ids=["own-client", "borrowed-client"])
@pytest.mark.parametrize("send", list(_SENDS))
@pytest.mark.parametrize(
    "how", ["read_ranges_url", "stream_url", "open_reader_url", "download_url"]
)
async def test_a_url_error_body_that_never_ends_fails_within_the_read_timeout(
    how: str, send: str, borrowed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A borrowed client's own read timeout is botocore's 60 s: the engine's governs."""
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    config = asyncdl.TransferConfig(read_timeout=_READ_TIMEOUT, max_attempts=1)
    async with (
        SlowServer(_SENDS[send]) as server,
        make_client(server.url("")) as client,
        asyncdl.Engine(client if borrowed else None, config=config) as engine,
    ):
        call = _url_calls(engine, server.url("/obj?X-Amz-Signature=s"), tmp_path / "x")[how]
        error = await _fails_in_time(call)
    assert "?" not in str(error), error
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("send", list(_SENDS))
@pytest.mark.parametrize("how", ["read_ranges", "stream", "open", "download"])
async def test_an_s3_error_body_that_never_ends_fails_within_the_read_timeout(
    how: str, send: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean (signed) GET reads an error answer's body itself, as the URL path does."""
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    config = asyncdl.TransferConfig(read_timeout=_READ_TIMEOUT, max_attempts=1)
    async with (
        SlowServer(_SENDS[send]) as server,
        make_client(server.url("")) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        error = await _fails_in_time(_s3_calls(engine, tmp_path / "x")[how])
    # A broken 200 is a broken body, or (a reader's) one that ignored Range.
    broken_200 = ("transfer failed", "ignores Range")
    expected = broken_200 if send.startswith("200") else ("503", "no bytes")
    assert any(words in str(error) for words in expected), (how, error)
    assert os.listdir(tmp_path) == []
