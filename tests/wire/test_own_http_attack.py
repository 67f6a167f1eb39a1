"""The engine's own HTTP client (``asyncdl._wire.own_http``) against a hostile server:
a body that only the connection's end delimits is not whole when that end is a reset,
framing after the head (trailers, chunk extensions) cannot grow without bound, bad
framing and heads are refused with nothing written, an idle connection the server
drops is retried once and never more, and every connection is closed once the engine
is, with GETs in flight.

Each server is a real one on loopback that runs a script per connection; the engine
downloads through it (its ``endpoint_url``), or the pool is used directly for what only
the pool decides.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import SSLError

import asyncdl
from asyncdl._wire import own_http
from asyncdl._wire.own_http import OwnBodyError, OwnHTTPError, OwnPool

from ..conftest import payload
from .own_http_support import own_pool as _pool
from .own_http_support import read_body as _body
from .test_url_session import certificate

#: What a server does on one connection: its number (from 1), then the connection.
Script = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

BODY = payload(100_000)


@pytest.fixture(autouse=True)
def _the_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests of the own client: under ASYNCDL_OWN_HTTP=0 (nox -s tests_aiohttp_gets) its
    # engine-level tests would test aiohttp instead.
    monkeypatch.setattr(own_http, "ENABLED", True)


class _Scripted:
    """A loopback server that runs ``script`` on each connection it accepts, and counts
    its connections and the request heads it read (and keeps them)."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.connections = 0
        #: Connections open now.
        self.open = 0
        self.requests = 0
        #: Each request head read, in order.
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    async def head(self, reader: asyncio.StreamReader) -> bytes:
        """The next request's head (``IncompleteReadError`` once the client closed)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        self.heads.append(head)
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open += 1
        try:
            await self.script(self.connections, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # the test is over (a cancelled handler would be logged as an error)
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> _Scripted:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._server.close()
        await self._server.wait_closed()

    async def all_closed(self) -> bool:
        """Whether every connection is closed within a second (a transport closes on
        the loop's next turns)."""
        for _ in range(100):
            if self.open == 0:
                return True
            await asyncio.sleep(0.01)
        return False


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset, not a FIN: what a cut connection looks like."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def ok(body: bytes, *headers: bytes) -> bytes:
    return b"\r\n".join(
        [b"HTTP/1.1 200 OK", b'ETag: "v1"', b"Content-Length: %d" % len(body), *headers]
    ) + (b"\r\n\r\n" + body)


def _engine(endpoint: str, **config: Any) -> asyncdl.Engine:
    settings = {"read_timeout": 2.0, "max_attempts": 2, "backoff_base": 0.01, **config}
    return asyncdl.Engine(
        endpoint_url=endpoint, region="us-east-1", config=asyncdl.TransferConfig(**settings)
    )


# -- a body that only the connection's end delimits ---------------------------------------


async def test_a_reset_is_not_the_end_of_a_close_delimited_body() -> None:
    # No Content-Length, no chunked framing: a clean close ends the body (RFC 9112 §6.3),
    # a reset cuts it.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + BODY[:1000])
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        assert response.close_delimited
        with pytest.raises(OwnBodyError, match="closed before the answer ended"):
            await _body(response)
        response.close()


@pytest.mark.usefixtures("aws_env")
async def test_a_whole_object_cut_by_a_reset_is_fetched_again_not_written_short(
    tmp_path: Path,
) -> None:
    # The first answer is cut by a reset after a tenth of the object; the second is whole
    # and ends with a clean close. The file must be the object, never its first tenth.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        head = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n\r\n'
        if n == 1:
            writer.write(head + BODY[: len(BODY) // 10])
            await writer.drain()
            await asyncio.sleep(0.05)
            reset(writer)
        else:
            writer.write(head + BODY)
            await writer.drain()

    async with _Scripted(script) as server, _engine(server.endpoint) as engine:
        await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert server.requests == 2


# -- framing after the head -------------------------------------------------------------

#: After a whole chunked body's last chunk (or in place of its first chunk's size line):
#: bytes that are framing, never body, sent until the client hangs up.
_ENDLESS_FRAMING = {
    "many-trailers": (b"3\r\nabc\r\n0\r\n", b"X-Trailer: abcdef\r\n" * 1000),
    "one-endless-trailer": (b"3\r\nabc\r\n0\r\nX-Trailer: ", b"a" * 16384),
    "endless-chunk-extension": (b"3;ext=", b"a" * 16384),
}


@pytest.mark.parametrize("framing", list(_ENDLESS_FRAMING))
async def test_framing_without_end_after_the_head_is_refused(framing: str) -> None:
    start, block = _ENDLESS_FRAMING[framing]
    sent = 0
    #: Bytes the server writes at most: the client must have hung up long before.
    most = 64 * 1024 * 1024

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await server.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + start)
        while sent < most:
            writer.write(block)
            sent += len(block)
            await writer.drain()
        await asyncio.sleep(30)  # then silence: only a read timeout would end the read

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        with pytest.raises(OwnBodyError, match="framing"):
            await asyncio.wait_for(_body(response), 10)
        response.close()
    # Refused near its limit, not held: what the sockets' buffers take on top of it.
    assert sent < 16 * 1024 * 1024


@pytest.mark.parametrize("interim", [b"", b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"])
async def test_a_whole_head_over_its_limit_is_refused(interim: bytes) -> None:
    # 80 KiB of headers, sent whole at once: the head ends in the read that takes it
    # past the limit.
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + b"X-Pad: 1234567\r\n" * 5000

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(interim + head + b"\r\nabc")
        await writer.drain()
        await asyncio.sleep(30)

    async with _Scripted(script) as server, _pool() as pool:
        with pytest.raises(OwnHTTPError, match="head over"):
            await pool.get(server.endpoint + "/b/k", {})
        assert not pool._live


# -- heads and framing the engine refuses -----------------------------------------------

#: Answers to a GET that no file may come of.
_REFUSED = {
    # A 1xx has no content (RFC 9110 §15.2): one whose head frames a body is refused.
    "interim-with-a-body": b"HTTP/1.1 150 Odd\r\nContent-Length: 3\r\n\r\nabc" + ok(BODY),
    "two-lengths": ok(BODY[:10], b"Content-Length: 12"),
    "length-and-chunked": ok(BODY[:10], b"Transfer-Encoding: chunked"),
    "negative-length": b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Length: -10\r\n\r\n',
    "length-over-2**63": b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n'
    b"Content-Length: 9999999999999999999\r\n\r\n",
    "a-nul-in-a-header": ok(BODY[:10], b"X-Amz-Meta-A: a\x00b"),
    "obs-fold": ok(BODY[:10], b"X-Amz-Meta-A: a\r\n b"),
    "switching-protocols": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
    "gzip-coded": b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: gzip, chunked\r\n\r\n'
    b"a\r\n" + BODY[:10] + b"\r\n0\r\n\r\n",
    "a-head-over-64-KiB": b"HTTP/1.1 200 OK\r\n" + b"X-Pad: 1234567\r\n" * 5000 + b"\r\n",
}


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("answer", list(_REFUSED))
async def test_an_answer_with_bad_framing_writes_nothing(answer: str, tmp_path: Path) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.head(reader)
            writer.write(_REFUSED[answer])
            await writer.drain()

    async with _Scripted(script) as server, _engine(server.endpoint) as engine:
        started = time.monotonic()
        with pytest.raises(asyncdl.DownloadError):
            await engine.download("b", "k", tmp_path / "k")
        assert time.monotonic() - started < 2.0  # refused, not timed out
    assert os.listdir(tmp_path) == []


# -- a connection the server drops ------------------------------------------------------


async def test_an_idle_connection_dropped_as_a_get_goes_out_is_retried_once() -> None:
    # Each connection answers its first request; a later one is met by a close (or a
    # reset) with no answer: an idle timeout that fired just as the request went out.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(ok(b"abc"))
        await writer.drain()
        await server.head(reader)
        if n == 1:
            writer.close()
        else:
            reset(writer)

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(3):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert await _body(response) == b"abc"
            response.release()
    # Three answered, each on a new connection; two dropped as they went out.
    assert (server.connections, server.requests, pool.sent) == (3, 5, 5)


async def test_a_get_whose_retry_is_dropped_too_fails_with_no_third_request() -> None:
    # The first connection answers once, then drops the next request; every other
    # connection drops its first: the retry's failure is the GET's.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        if n == 1:
            writer.write(ok(b"abc"))
            await writer.drain()
            await server.head(reader)

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        assert await _body(response) == b"abc"
        response.release()
        with pytest.raises(OwnHTTPError, match="closed before"):
            await pool.get(server.endpoint + "/b/k", {})
        # A new connection's close is its answer: not retried.
        with pytest.raises(OwnHTTPError, match="closed before"):
            await pool.get(server.endpoint + "/b/k", {})
    assert (server.connections, server.requests, pool.sent) == (3, 4, 4)


# -- TLS, timeouts, and the engine's close ----------------------------------------------


def _causes(exc: BaseException | None) -> list[BaseException]:
    found: list[BaseException] = []
    while exc is not None and len(found) < 20:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


@pytest.mark.usefixtures("aws_env")
async def test_a_certificate_not_trusted_fails_as_botocore_s_ssl_error(tmp_path: Path) -> None:
    _, server_tls = certificate(tmp_path, "origin")

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(ok(b"abc"))
        await writer.drain()

    target = tmp_path / "out"
    target.mkdir()
    async with _Scripted(script, tls=server_tls) as server, _engine(server.endpoint) as engine:
        started = time.monotonic()
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download("b", "k", target / "k")
        assert time.monotonic() - started < 2.0
    assert any(isinstance(cause, SSLError) for cause in _causes(raised.value))
    # Said as what it is: botocore's SSLError is an OSError, once taken for the disk's.
    assert "local file" not in str(raised.value)
    assert "TLS failed: SSL validation failed" in str(raised.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert server.requests == 0  # no request went out, in plain or otherwise
    assert os.listdir(target) == []


@pytest.mark.usefixtures("aws_env")
async def test_a_borrowed_clients_read_timeout_bounds_the_wait_for_an_answer(
    tmp_path: Path,
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        await asyncio.sleep(30)

    async with _Scripted(script) as server:
        client = get_session().create_client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            config=AioConfig(
                connect_timeout=1.0,
                read_timeout=0.3,
                retries={"total_max_attempts": 1},
                response_checksum_validation="when_required",
            ),
        )
        config = asyncdl.TransferConfig(read_timeout=30.0, max_attempts=1)
        async with client as made, asyncdl.Engine(made, config=config) as engine:
            started = time.monotonic()
            with pytest.raises(asyncdl.DownloadError, match="Read timeout"):
                await engine.download("b", "k", tmp_path / "k")
            assert time.monotonic() - started < 2.0
            pool = getattr(made._endpoint.http_session, "_asyncdl_own_pool", None)
            assert isinstance(pool, OwnPool)
            assert pool.sent == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.usefixtures("aws_env")
async def test_closing_the_engine_with_gets_in_flight_closes_every_connection(
    tmp_path: Path,
) -> None:
    # Half the GETs wait for their answer's head, half for the rest of their body.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        if n % 2:
            writer.write(b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Length: 1000\r\n\r\nabc')
            await writer.drain()
        await reader.read()  # until the client hangs up

    async with _Scripted(script) as server:
        engine = _engine(server.endpoint, max_attempts=1)
        async with engine:
            downloads = [
                asyncio.ensure_future(engine.download("b", f"k{i}", tmp_path / f"k{i}"))
                for i in range(6)
            ]
            for _ in range(200):
                if server.requests == 6:
                    break
                await asyncio.sleep(0.01)
            assert server.requests == 6
            pool = getattr(engine.client._endpoint.http_session, "_asyncdl_own_pool", None)
            assert isinstance(pool, OwnPool)
        results = await asyncio.gather(*downloads, return_exceptions=True)
        assert all(isinstance(result, BaseException) for result in results)
        assert pool.closed
        assert not pool._live
        assert await server.all_closed()
    assert os.listdir(tmp_path) == []
