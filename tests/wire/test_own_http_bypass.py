"""The own HTTP client's body bypass (``asyncdl._wire.own_connection``): once the head of
an answer framed by Content-Length is parsed, the socket's reads are the body as they
came, never fed to the parser. The next answer on the connection is parsed from its
first byte, bytes past the end drop the connection, an interim answer is never read into
the body, a cut or a stall verdict mid-body is a broken body, never a whole one, and a
connection whose body was left unread is never pooled.

Each server is a real one on loopback that runs a script per connection; the engine
downloads through it, or through the proxy in front of moto.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._wire import own_http
from asyncdl._wire.own_http import OwnBodyError, OwnHTTPError
from asyncdl.errors import RetryableError
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload
from .test_own_http_attack import BODY, _body, _engine, _pool, _Scripted, ok, reset


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)


async def _write_apart(writer: asyncio.StreamWriter, *pieces: bytes) -> None:
    """Each piece in a socket read of its own (the client's loop turns between them)."""
    for piece in pieces:
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)


# -- an interim answer with a body ----------------------------------------------------

#: Interim answers that llhttp gives a body (it reads one for a 1xx other than 100-103
#: when the head frames one), then the answer asked for.
_INTERIM_WITH_BODY = {
    "content-length": b"HTTP/1.1 150 Odd\r\nContent-Length: 3\r\n\r\nabc",
    "chunked": b"HTTP/1.1 199 Odd\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("interim", list(_INTERIM_WITH_BODY))
async def test_an_interim_answer_with_a_body_is_refused_not_read_into_the_answer(
    interim: str,
) -> None:
    # RFC 9110 §15.2: a 1xx has no content. Bytes after its head are either the server's
    # next answer or a body of its own: either way not the answer's body.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        await _write_apart(writer, _INTERIM_WITH_BODY[interim] + ok(b"hello"))
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        with pytest.raises(OwnHTTPError, match="interim"):
            response = await pool.get(server.endpoint + "/b/k", {})
            await _body(response)  # pragma: no cover - the old code got here
        assert not pool._live
        assert await server.all_closed()


@pytest.mark.usefixtures("aws_env")
async def test_an_interim_answer_with_a_body_writes_nothing(tmp_path: Path) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.head(reader)
            writer.write(_INTERIM_WITH_BODY["content-length"] + ok(BODY))
            await writer.drain()

    async with _Scripted(script) as server, _engine(server.endpoint) as engine:
        started = time.monotonic()
        with pytest.raises(asyncdl.DownloadError):
            await engine.download("b", "k", tmp_path / "k")
        assert time.monotonic() - started < 2.0  # refused, not timed out
    assert os.listdir(tmp_path) == []
