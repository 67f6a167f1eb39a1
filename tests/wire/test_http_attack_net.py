"""Hostile answers whose bytes keep coming, too slowly to be a stall: an error body
that trickles one byte just inside ``read_timeout`` is still read for at most about
``read_timeout`` in all (the status is the answer; 64 KiB at one byte per read
timeout would be a day and a half).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest

import asyncdl
from asyncdl.testing.moto_server import FAKE_ENV

from ..conftest import make_client
from .test_http_spool import SlowServer

_READ_TIMEOUT = 0.5
_IN_TIME = 6.0


def _trickle(head: bytes) -> object:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        await writer.drain()
        while True:  # one byte just inside the read timeout, for ever
            await asyncio.sleep(_READ_TIMEOUT * 0.6)
            writer.write(b"x")
            await writer.drain()

    return send


_HEADS = {
    "503-length": b"HTTP/1.1 503 Slow Down\r\nContent-Length: 100000\r\n\r\n<",
    "416-length": b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 100000\r\n\r\n<",
    "403-close": b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n<",
}


@pytest.mark.parametrize("head", list(_HEADS))
@pytest.mark.parametrize("how", ["url", "s3-lean", "s3-botocore"])
async def test_a_trickling_error_body_is_read_for_a_bounded_time(
    how: str, head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    # The botocore path (no lean GET: a borrowed client botocore reads the error body
    # of, under its own per-read timeout) is bounded by the engine too.
    config = asyncdl.TransferConfig(
        read_timeout=_READ_TIMEOUT,
        connect_timeout=1,
        max_attempts=1,
        lean_get=how != "s3-botocore",
    )
    async with (
        SlowServer(_trickle(_HEADS[head])) as server,  # type: ignore[arg-type]
        make_client(server.url("")) as client,
        asyncdl.Engine(None if how == "url" else client, config=config) as engine,
    ):
        if how == "url":
            call = engine.read_ranges_url(server.url("/o?X-Amz-Signature=s"), [(0, 10)])
        else:
            call = engine.read_ranges("b", "k", [(0, 10)])
        began = time.monotonic()
        with pytest.raises(asyncdl.DownloadError) as raised:
            async with asyncio.timeout(_IN_TIME + 20):
                await call
        took = time.monotonic() - began
    assert took < _IN_TIME, (took, raised.value)
    assert os.listdir(tmp_path) == []


_QUERY = "X-Amz-Credential=GIVENCRED%2F2026&X-Amz-Signature=GIVENSIG"


def _echo(answer: object) -> object:
    """A server that answers with ``answer(query)``, the request's own query in it."""

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n", 1)[0]
            query = line.split(b" ")[1].split(b"?", 1)[1]
            writer.write(answer(query))  # type: ignore[operator]
            await writer.drain()
            await asyncio.sleep(0.3)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return send


def _xml_error(query: bytes) -> bytes:
    """A 403 whose XML Code is the echoed query (XML-escaped, as an XML writer would)."""
    body = b"<Error><Code>" + query.replace(b"&", b"&amp;") + b"</Code><Message>m</Message></Error>"
    return b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)


_ECHOES = {
    "content-range": lambda query: (
        b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/"
        + query
        + b"\r\nContent-Length: 10\r\n\r\n0123456789"
    ),
    "xml-code": _xml_error,
}


def _chain_text(exc: BaseException) -> str:
    """The error, every exception behind it and what they hold, as text."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if any(current is done for done in seen):
            continue
        seen.append(current)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
    return "\n".join(f"{e!s} {e!r} {vars(e)!r}" for e in seen)


@pytest.mark.parametrize("echo", list(_ECHOES))
@pytest.mark.parametrize("how", ["read_ranges_url", "download_url"])
async def test_an_answer_echoing_the_query_shows_no_credential(
    how: str, echo: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A header (Content-Range) or an error's XML Code that holds the presigned query:
    no message, exception behind it, or log line shows the credential."""
    caplog.set_level(logging.DEBUG)
    server = await asyncio.start_server(_echo(_ECHOES[echo]), "127.0.0.1", 0)  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/o?{_QUERY}"
    config = asyncdl.TransferConfig(read_timeout=_READ_TIMEOUT, max_attempts=1)
    try:
        async with asyncdl.Engine(config=config) as engine:
            call = (
                engine.download_url(url, tmp_path / "x")
                if how == "download_url"
                else engine.read_ranges_url(url, [(0, 10)])
            )
            with pytest.raises(asyncdl.DownloadError) as raised:
                await call
    finally:
        server.close()
        await server.wait_closed()
    logged = [record.getMessage() for record in caplog.records if record.name.startswith("asyncdl")]
    shown = "\n".join([_chain_text(raised.value), *logged])
    for secret in ("GIVENCRED", "GIVENSIG"):
        assert secret not in shown, shown
    assert os.listdir(tmp_path) == []
