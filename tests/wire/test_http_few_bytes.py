"""Reading a few bytes reads a few bytes: against a server that ignores Range (a 200
with a length, or chunked with none) or sends a 206 far longer than asked, a range
read, a random-access reader and ``cat --range`` stop reading once the bytes asked
for are in, and spool nothing. The server counts what it sent: a few MiB at most
(what the sockets' buffers hold) of an object of 256 MiB, or of an endless body.
"""

from __future__ import annotations

import asyncio
import random
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import asyncdl
from asyncdl.cli import cli
from asyncdl.testing.moto_server import FAKE_ENV

from ..conftest import make_client

#: The body repeats this block: any offset's byte is known without holding the body.
_BLOCK = random.Random("few-bytes").randbytes(64 * 1024)
_TOTAL = 256 * 1024 * 1024
#: What the server may have sent when the reader stops: the sockets' buffers and the
#: little aiohttp holds ahead of its reader, far below the body.
_MOST_SENT = 24 * 1024 * 1024


def _expected(start: int, end: int) -> bytes:
    out = bytearray()
    while start < end:
        at = start % len(_BLOCK)
        piece = _BLOCK[at : at + end - start]
        out += piece
        start += len(piece)
    return bytes(out)


class _LongServer:
    """An HTTP/1.1 server that answers every GET, whatever its Range, with ``kind``:

    - ``"chunked"``: a 200 without length, chunked, that never ends;
    - ``"length"``: a 200 with the Content-Length of a 256 MiB body;
    - ``"long-206"``: a 206 naming all 256 MiB, bytes 0 onwards.

    It sends as fast as its reader takes, through a small send buffer, and counts the
    body bytes it handed to the socket."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sent = 0
        self.requests = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> _LongServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        for task in self._handlers:
            task.cancel()
        self._server.close()
        await self._server.wait_closed()

    def _head(self) -> bytes:
        lines = ['ETag: "v1"', "Content-Type: application/octet-stream"]
        if self.kind == "chunked":
            status = "200 OK"
            lines.append("Transfer-Encoding: chunked")
        elif self.kind == "length":
            status = "200 OK"
            lines.append(f"Content-Length: {_TOTAL}")
        else:
            status = "206 Partial Content"
            lines += [f"Content-Length: {_TOTAL}", f"Content-Range: bytes 0-{_TOTAL - 1}/{_TOTAL}"]
        head = "".join(line + "\r\n" for line in lines)
        return f"HTTP/1.1 {status}\r\n{head}\r\n".encode()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        try:
            while True:  # keep-alive: a retry or a second GET may come on it
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                writer.write(self._head())
                left = None if self.kind == "chunked" else _TOTAL
                while left is None or left > 0:
                    piece = _BLOCK if left is None else _BLOCK[:left]
                    if self.kind == "chunked":
                        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    else:
                        writer.write(piece)
                    await writer.drain()
                    self.sent += len(piece)
                    if left is not None:
                        left -= len(piece)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture
def no_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spool (an unnamed file in the system's temp directory) fails: there is none."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))


_RANGES = [(0, 10), (100_000, 100_010)]


@pytest.mark.usefixtures("no_spool")
@pytest.mark.parametrize("kind", ["chunked", "length", "long-206"])
async def test_read_ranges_url_reads_only_the_prefix_it_needs(kind: str) -> None:
    async with _LongServer(kind) as server, asyncdl.Engine() as engine:
        async with asyncio.timeout(30):
            got = await engine.read_ranges_url(server.url("/obj?X-Amz-Signature=s"), _RANGES)
        assert got == [_expected(*pair) for pair in _RANGES]
        assert server.sent < _MOST_SENT, server.sent


@pytest.mark.usefixtures("no_spool")
@pytest.mark.parametrize("kind", ["chunked", "length", "long-206"])
async def test_read_ranges_of_s3_reads_only_the_prefix_it_needs(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean S3 GET's answer, as a URL's."""
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    async with (
        _LongServer(kind) as server,
        make_client(server.url("")) as client,
        asyncdl.Engine(client) as engine,
    ):
        async with asyncio.timeout(30):
            got = await engine.read_ranges("b", "k", _RANGES)
        assert got == [_expected(*pair) for pair in _RANGES]
        assert server.sent < _MOST_SENT, server.sent


@pytest.mark.usefixtures("no_spool")
async def test_a_range_past_the_end_of_a_chunked_body_is_refused_once_it_ends() -> None:
    """A chunked answer that ends before the ranges do says the object's size."""
    body = _expected(0, 5000)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n'
            b"Connection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/obj"
    try:
        async with asyncdl.Engine() as engine:
            assert await engine.read_ranges_url(url, [(4990, 5000)]) == [body[4990:]]
            with pytest.raises(asyncdl.InvalidRequestError, match="5000-byte object"):
                await engine.read_ranges_url(url, [(0, 10), (4995, 5005)])
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.usefixtures("no_spool")
@pytest.mark.parametrize("kind", ["chunked", "length", "long-206"])
async def test_open_reader_url_reads_a_block_or_refuses_before_reading(kind: str) -> None:
    """A reader needs blocks by offset: a server that ignores Range is refused at once
    (a chunked one before its body is spooled); an over-long 206 gives its first
    block, and no more of its body is read."""
    async with _LongServer(kind) as server, asyncdl.Engine() as engine:
        reader = engine.open_reader_url(server.url("/obj"), block_size=64 * 1024)
        async with asyncio.timeout(30):
            if kind == "long-206":
                async with reader:
                    assert await reader.read(10) == _expected(0, 10)
            else:
                with pytest.raises(asyncdl.DownloadError, match="ignores Range"):
                    await reader.open()
        assert server.sent < _MOST_SENT, server.sent


@pytest.mark.usefixtures("no_spool")
@pytest.mark.parametrize("kind", ["chunked", "length", "long-206"])
async def test_cat_range_reads_only_what_it_prints(kind: str) -> None:
    async with _LongServer(kind) as server:
        printed: Any = await asyncio.wait_for(
            asyncio.to_thread(
                CliRunner().invoke, cli, ["cat", "--range", "0-9", server.url("/obj")]
            ),
            60,
        )
        sent = server.sent
    assert printed.exit_code == 0, printed.output
    assert printed.stdout_bytes == _expected(0, 10)
    assert sent < _MOST_SENT, sent
