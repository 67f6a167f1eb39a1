"""A body that only its connection's end delimits (no Content-Length, not chunked),
over TLS: it ends only where the TLS ends with the server's close_notify. A connection
whose TCP ends without one (an attacker on the path, or a middlebox, cutting it) is an
incomplete close, not the body's end (RFC 9112 §9.8): the body is fetched again, never
written short; a clean close is fetched once.

Every way a GET takes: an S3 GET on the engine's own client, on aiohttp
(``ASYNCDL_OWN_HTTP=0``) and through botocore's ``get_object`` (``lean_get=False``), a URL
download, and an S3 GET and a URL download through an HTTP proxy (a CONNECT tunnel, the
TLS inside it the origin's). The server is a real one on loopback
with a self-signed certificate that runs a script per connection; a proxy's tunnel is
the server itself (it answers the CONNECT and speaks TLS inside it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._wire import own_http
from asyncdl._wire.own_http import OwnBodyError

from ..conftest import make_client, payload
from .own_http_support import own_pool, read_body
from .test_own_http_attack import BODY, _engine, _Scripted
from .test_url_session import certificate

#: An object small enough to come whole in the first read of its answer.
TINY = payload(40, seed=7)

WAYS = ["own", "aiohttp", "get_object", "url", "s3 tunnel", "url tunnel"]


@pytest.fixture(autouse=True)
def _settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials for the engine's signing (nothing checks them), and no proxy but
    the one a test sets (the machine's own may name any)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def truncate(writer: asyncio.StreamWriter) -> None:
    """End the TCP connection with a FIN, no TLS close_notify before it: what a cut made
    by someone on the path looks like. The transport is aborted (it would send one) once
    its socket is shut down; the socket is shut down through a duplicate of its file
    descriptor, as uvloop's transports lend no socket that can be."""
    fd = writer.get_extra_info("socket").fileno()
    with socket.socket(fileno=os.dup(fd)) as raw:
        raw.shutdown(socket.SHUT_RDWR)
    writer.transport.abort()


class _Server:
    """A :class:`_Scripted` over TLS whose first answer is ``object[:cut]`` followed by
    a truncation (when ``cut``), every later one the whole object followed by a clean
    close; with ``tunnel``, each connection is first a proxy's CONNECT, and the TLS is
    spoken inside it."""

    def __init__(self, tls: ssl.SSLContext, data: bytes, cut: int | None, tunnel: bool) -> None:
        self.data, self.cut, self.tunnel, self._tls = data, cut, tunnel, tls
        self.connects = 0
        self.scripted = _Scripted(self._script, tls=None if tunnel else tls)

    async def _script(
        self, n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self.tunnel:
            await reader.readuntil(b"\r\n\r\n")
            self.connects += 1
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(self._tls)
        await self.scripted.head(reader)
        head = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n\r\n'
        if n == 1 and self.cut is not None:
            writer.write(head + self.data[: self.cut])
            await writer.drain()
            if len(self.data) > len(TINY):
                await asyncio.sleep(0.05)  # the bytes are on their way, then the cut
            # A tiny body: cut right after it, at once (the bytes and the end come together).
            truncate(writer)
        else:
            writer.write(head + self.data)
            await writer.drain()
            # The script's end closes the TLS cleanly (close_notify, then the FIN).

    @property
    def requests(self) -> int:
        return self.scripted.requests


async def _fetch(
    way: str, server: _Server, target: Path, monkeypatch: pytest.MonkeyPatch
) -> int | None:
    """Download the object the way ``way`` says; its size as the engine reported it."""
    endpoint = server.scripted.endpoint
    if "tunnel" in way:
        # An https:// endpoint no one listens on: every byte goes through the proxy.
        monkeypatch.setenv("HTTPS_PROXY", endpoint)
        endpoint = "https://127.0.0.1:9"
    monkeypatch.setattr(own_http, "ENABLED", way == "own")
    async with _engine(endpoint, lean_get=way != "get_object") as engine:
        if way.startswith("url"):
            result = await engine.download_url(endpoint + "/b/k", target)
        else:
            result = await engine.download("b", "k", target)
    return result.size


@pytest.mark.parametrize("size", ["large", "tiny"])
@pytest.mark.parametrize("way", WAYS)
async def test_a_body_whose_tls_is_truncated_is_fetched_again_not_written_short(
    way: str, size: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    data = BODY if size == "large" else TINY
    cut = len(data) // 10 if size == "large" else len(data) // 2
    server = _Server(tls, data, cut, "tunnel" in way)
    async with server.scripted:
        size_seen = await _fetch(way, server, tmp_path / "k", monkeypatch)
    assert (tmp_path / "k").read_bytes() == data
    assert size_seen == len(data)
    assert server.requests == 2


@pytest.mark.parametrize("size", ["large", "tiny"])
@pytest.mark.parametrize("way", WAYS)
async def test_a_body_whose_tls_closes_cleanly_is_fetched_once(
    way: str, size: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    data = BODY if size == "large" else TINY
    server = _Server(tls, data, None, "tunnel" in way)
    async with server.scripted:
        size_seen = await _fetch(way, server, tmp_path / "k", monkeypatch)
    assert (tmp_path / "k").read_bytes() == data
    assert size_seen == len(data)
    assert server.requests == 1


async def test_the_own_client_says_a_truncated_tls_is_not_the_body_s_end(
    tmp_path: Path,
) -> None:
    bundle, tls = certificate(tmp_path, "origin")
    server = _Server(tls, BODY, 1000, tunnel=False)
    async with server.scripted, own_pool(tls=ssl.create_default_context(cafile=bundle)) as pool:
        response = await pool.get(server.scripted.endpoint + "/b/k", {})
        assert response.close_delimited
        with pytest.raises(OwnBodyError, match="without its TLS close_notify"):
            await read_body(response)
        response.close()


@pytest.mark.parametrize("size", ["large", "tiny"])
@pytest.mark.parametrize("way", ["aiohttp", "get_object", "get_object borrowed", "url"])
async def test_a_truncated_body_that_came_whole_before_its_reader_fails_its_stream(
    way: str, size: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream opened, then read only after its first answer came whole and its
    # connection ended: how the connection ended must have been taken when the answer
    # came, the connection being gone by the time the reader looks.
    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    data = BODY if size == "large" else TINY
    cut = len(data) // 2
    server = _Server(tls, data, cut, tunnel=False)
    monkeypatch.setattr(own_http, "ENABLED", False)
    async with server.scripted:
        endpoint = server.scripted.endpoint
        # get_object: botocore's call (``lean_get=False``, or a GET the lean path
        # cannot reproduce), whose answer reaches the engine through aiobotocore; on a
        # client the engine made, or one handed to it.
        async with contextlib.AsyncExitStack() as stack:
            if way == "get_object borrowed":
                client = await stack.enter_async_context(make_client(endpoint))
                config = asyncdl.TransferConfig(lean_get=False, read_timeout=2.0, max_attempts=2)
                engine = asyncdl.Engine(client, config=config)
            else:
                engine = _engine(endpoint, lean_get=not way.startswith("get_object"))
            await stack.enter_async_context(engine)
            if way == "url":
                stream = engine.stream_url(endpoint + "/b/k")
            else:
                stream = engine.stream("b", "k")
            async with stream:
                await stream.open()
                await asyncio.sleep(0.3)  # the answer came, and its connection ended
                # A stream's bytes may be its reader's already: it fails, never ends short.
                with pytest.raises(asyncdl.DownloadError, match="close_notify"):
                    await _read_all(stream)


async def _read_all(stream: Any) -> bytes:
    return b"".join([piece async for piece in stream])
