"""The engine's own HTTP/1.1 GET client (``asyncdl._wire.own_http``): keep-alive that
pools only a connection whose answer ended where its framing says, bodies that break
raising a body error that quotes nothing, and the lean path's downloads through it
(against moto behind the proxy) with the switch on.

Each server here is a real one on loopback, answering with the bytes a test gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._wire import own_http
from asyncdl._wire.body_reader import BodyReader
from asyncdl._wire.own_connection import Connection
from asyncdl._wire.own_http import OwnBodyError, OwnHTTPError, OwnPool, OwnResponse
from asyncdl.errors import RetryableError
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload
from .own_http_support import own_pool as _pool
from .own_http_support import read_body as _body
from .test_url_session import certificate

#: What a server does with one request on a connection: the bytes it writes back, then
#: whether it closes the connection.
Answer = Callable[[int], tuple[bytes, bool]]


class _Server:
    """A loopback server that reads request heads and writes the answers it is given."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.connections = 0
        #: Connections open now, and the most ever open at once.
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        #: Set once a request came.
        self.asked = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: list[asyncio.Task[Any]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self._writers.append(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    return
                self.requests.append(head)
                self.asked.set()
                data, close = self.answer(len(self.requests))
                writer.write(data)
                await writer.drain()
                if close:
                    return
        finally:
            self.open -= 1
            writer.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/obj"

    async def __aenter__(self) -> _Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._server.close()
        await self._server.wait_closed()


def _ok(body: bytes, **headers: str) -> bytes:
    lines = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body)]
    lines += [f"{name}: {value}".encode() for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_a_connection_is_kept_for_the_next_get_once_its_answer_ended() -> None:
    async with _Server(lambda n: (_ok(b"x" * n, ETag='"e"'), False)) as server, _pool() as pool:
        for n in (1, 2, 3):
            response = await pool.get(server.url, {"Range": "bytes=0-9"})
            assert response.status == 200
            assert response.headers.getall("etag") == ['"e"']
            assert response.headers["ETAG"] == '"e"'  # case-insensitive, as aiohttp's
            assert await _body(response) == b"x" * n
            response.release()
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /obj HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nRange: bytes=0-9\r\n" in server.requests[0]


async def test_an_answer_closed_before_its_end_never_goes_back_to_the_pool() -> None:
    body = payload(3 * 1024 * 1024)
    async with _Server(lambda n: (_ok(body), False)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        first, _ = await response.readchunk()
        assert 0 < len(first) < len(body)
        response.close()  # the rest still on its way: the connection cannot be reused
        response = await pool.get(server.url, {})
        assert await _body(response) == body
        response.release()
    assert server.connections == 2


@pytest.mark.parametrize(
    "extra",
    [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"junk"],
    ids=["an-answer-nobody-asked-for", "junk"],
)
async def test_bytes_after_an_answer_mean_a_new_connection(extra: bytes) -> None:
    async with _Server(lambda n: (_ok(b"abc") + extra, False)) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.url, {})
            assert await _body(response) == b"abc"
            await asyncio.sleep(0.05)  # the extra bytes reach the idle connection
            response.release()
    assert server.connections == 2


async def test_an_interim_answer_is_passed_over() -> None:
    answer = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + _ok(b"abc", ETag='"e"')
    async with _Server(lambda n: (answer, False)) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.url, {})
            assert (response.status, response.headers.get("etag")) == (200, '"e"')
            assert await _body(response) == b"abc"
            response.release()
    assert server.connections == 1


async def test_an_answer_that_asks_to_close_is_not_pooled() -> None:
    answer = _ok(b"abc", Connection="close")
    async with _Server(lambda n: (answer, False)) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.url, {})
            assert await _body(response) == b"abc"
            response.release()
    assert server.connections == 2


async def test_a_body_cut_short_of_its_length_is_a_body_error() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345"
    async with _Server(lambda n: (cut, True)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        with pytest.raises(OwnBodyError, match="closed before the answer ended"):
            await _body(response)
        response.close()


async def test_a_close_delimited_body_ends_with_the_close_and_is_not_pooled() -> None:
    answer = b"HTTP/1.1 200 OK\r\n\r\nall of it"
    async with _Server(lambda n: (answer, True)) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.url, {})
            assert response.close_delimited
            assert await _body(response) == b"all of it"
            response.release()
    assert server.connections == 2


async def test_bad_chunk_framing_is_a_body_error_that_quotes_nothing() -> None:
    secret = b"Authorization-ish-secret"
    bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n" + secret
    async with _Server(lambda n: (bad, False)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        with pytest.raises(OwnBodyError) as raised:
            await _body(response)
        response.close()
    assert secret.decode() not in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    [b"HTTP/1.1 2x0 OK\r\n\r\n", b"GET /obj HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["bad-status", "an-echo"],
)
async def test_a_head_that_is_not_an_answer_is_refused(answer: bytes) -> None:
    async with _Server(lambda n: (answer, False)) as server, _pool() as pool:
        with pytest.raises(OwnHTTPError, match="bad framing"):
            await pool.get(server.url, {})


async def test_a_head_without_end_is_refused_at_its_limit() -> None:
    endless = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * (1024 * 1024)
    async with _Server(lambda n: (endless, False)) as server, _pool() as pool:
        with pytest.raises(OwnHTTPError, match="head over"):
            await pool.get(server.url, {})


async def test_an_idle_connection_the_server_dropped_is_replaced_once() -> None:
    # The first answer's connection is closed by the server after it (an idle timeout),
    # without a Connection: close: the pooled connection is found dead on its next use.
    async with _Server(lambda n: (_ok(b"abc"), n == 1)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        assert await _body(response) == b"abc"
        response.release()
        await asyncio.sleep(0.05)
        response = await pool.get(server.url, {})
        assert await _body(response) == b"abc"
        response.release()
    assert server.connections == 2


async def test_no_answer_within_the_read_timeout() -> None:
    async with _Server(lambda n: (b"", False)) as server, _pool(read_timeout=0.2) as pool:
        with pytest.raises(own_http.HeadersTimeout):
            await pool.get(server.url, {})


async def test_a_line_break_in_a_header_is_refused_before_anything_is_sent() -> None:
    async with _Server(lambda n: (_ok(b""), False)) as server, _pool() as pool:
        with pytest.raises(ValueError, match="line break"):
            await pool.get(server.url, {"If-Match": '"a"\r\nX-Evil: 1'})
    assert server.connections == 0


async def test_a_stall_verdict_fails_the_read_and_the_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12"
    async with _Server(lambda n: (head, False)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        assert (await response.readchunk())[0] == b"12"
        reading = asyncio.ensure_future(response.readchunk())
        await asyncio.sleep(0.05)
        response.set_exception(RetryableError("no bytes"))
        with pytest.raises(RetryableError):
            await reading
        response.close()
        assert not any(pool._idle.values())  # its connection was not kept


@pytest.fixture
def own_client_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(own_http, "ENABLED", True)


@pytest.mark.usefixtures("own_client_on")
async def test_downloads_go_through_the_own_client_with_the_switch_on(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    bodies = {f"k{i}": payload(100 + 5000 * i) for i in range(8)}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    config = asyncdl.TransferConfig(max_concurrency=4)
    async with asyncdl.Engine(config=config, endpoint_url=proxy.url, region="us-east-1") as engine:
        for key in bodies:
            await engine.download(bucket, key, str(tmp_path / key))
        pool = getattr(engine.client._endpoint.http_session, "_asyncdl_own_pool", None)
        assert isinstance(pool, OwnPool)
        assert not pool.closed
        # Every GET went through it, on one connection kept alive between them.
        assert (pool.sent, pool.connected) == (len(bodies), 1)
    assert pool.closed  # closed with the client
    assert not pool._live
    for key, body in bodies.items():
        assert (tmp_path / key).read_bytes() == body
    assert len(proxy.requests) == len(bodies)


async def test_an_idle_connection_is_closed_after_the_keepalive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(own_http, "KEEPALIVE", 0.2)
    async with _Server(lambda n: (_ok(b"abc"), False)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        assert await _body(response) == b"abc"
        response.release()
        assert any(pool._idle.values())
        await asyncio.sleep(0.5)
        assert not any(pool._idle.values())
        assert not pool._live


async def test_https_through_the_loop_with_the_sessions_tls_context(tmp_path: Path) -> None:
    bundle, server_tls = certificate(tmp_path, "origin")
    trusting = ssl.create_default_context(cafile=str(bundle))
    async with _Server(lambda n: (_ok(b"secret"), False), tls=server_tls) as server:
        async with _pool(tls=trusting) as pool:
            for _ in range(2):
                response = await pool.get(server.url, {})
                assert await _body(response) == b"secret"
                response.release()
        assert server.connections == 1
        # The default context does not trust the server's certificate: refused.
        async with _pool(tls=True) as pool:
            with pytest.raises(ssl.SSLCertVerificationError):
                await pool.get(server.url, {})


async def test_a_connection_paused_for_a_slow_reader_reads_again_once_pooled() -> None:
    # The whole body arrives while the reader holds back: the socket is paused for it,
    # the answer ends, the reader takes only its first piece (it needed no more), and
    # the connection must read its next answer.
    # 16 KiB, written in one go, is read by one socket read on loopback: it ends while
    # the reading pauses past 1 KiB.
    body = payload(16 * 1024)
    async with _Server(lambda n: (_ok(body), False)) as server, _pool(read_timeout=2) as pool:
        for _ in range(2):
            response = await pool.get(server.url, {})
            response.hold_at_most(1024)
            for _ in range(200):  # up to 2 s for it to arrive: nothing to wait on but time
                if response.is_eof():
                    break
                await asyncio.sleep(0.01)
            first, _ = await response.readchunk()
            assert body.startswith(first)
            response.release()
    assert server.connections == 1


@pytest.mark.usefixtures("own_client_on")
async def test_a_download_cancelled_while_waiting_for_its_answer_leaves_no_connection(
    tmp_path: Path,
) -> None:
    async with _Server(lambda n: (b"", False)) as server:
        endpoint = server.url.removesuffix("/obj")
        async with asyncdl.Engine(endpoint_url=endpoint, region="us-east-1") as engine:
            task = asyncio.ensure_future(engine.download("bucket", "key", str(tmp_path / "f")))
            await server.asked.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            pool = getattr(engine.client._endpoint.http_session, "_asyncdl_own_pool", None)
            assert isinstance(pool, OwnPool)
            assert pool.sent == 1
            assert not pool._live  # closed, not pooled
            assert not any(pool._idle.values())
    assert os.listdir(tmp_path) == []


async def test_gets_past_the_connection_limit_wait_for_a_connection() -> None:
    # aiobotocore's max_pool_connections (aiohttp's connector limit) bounds the
    # connections open at once: a GET past it waits for an answer to be released.
    async with _Server(lambda n: (_ok(b"%d" % n), False)) as server, _pool(limit=2) as pool:

        async def one() -> bytes:
            response = await pool.get(server.url, {})
            body = await _body(response)
            await asyncio.sleep(0.05)  # held: the others must wait, not connect
            response.release()
            return body

        bodies = await asyncio.gather(*(one() for _ in range(6)))
    assert sorted(bodies) == [b"%d" % n for n in range(1, 7)]
    assert server.most_open <= 2
    assert server.connections == 2


async def test_a_get_to_another_origin_at_the_limit_closes_an_idle_connection() -> None:
    async with (
        _Server(lambda n: (_ok(b"a"), False)) as first,
        _Server(lambda n: (_ok(b"b"), False)) as second,
        _pool(limit=1) as pool,
    ):
        response = await pool.get(first.url, {})
        assert await _body(response) == b"a"
        response.release()  # idle, the only connection the limit allows
        response = await asyncio.wait_for(pool.get(second.url, {}), 5)
        assert await _body(response) == b"b"
        response.release()
        for _ in range(100):
            if first.open == 0:
                break
            await asyncio.sleep(0.01)
        assert first.open == 0


async def test_a_waiter_cancelled_once_woken_passes_the_connection_on() -> None:
    async with _Server(lambda n: (_ok(b"x"), False)) as server, _pool(limit=1) as pool:
        held = await pool.get(server.url, {})
        first = asyncio.ensure_future(pool.get(server.url, {}))
        second = asyncio.ensure_future(pool.get(server.url, {}))
        await asyncio.sleep(0.05)
        assert not first.done()
        assert not second.done()
        await _body(held)
        held.release()  # wakes the first waiter...
        first.cancel()  # ...which leaves before it runs: the second must be served
        response = await asyncio.wait_for(second, 5)
        assert await _body(response) == b"x"
        response.release()
        assert first.cancelled()
    assert server.most_open == 1


async def test_large_bodies_one_after_another_on_one_connection() -> None:
    # Each body past its head's read bypasses the parser: the next answer on the
    # connection must still be read from its first byte.
    bodies = [payload(1024 * 1024 + n) for n in range(4)]
    async with (
        _Server(lambda n: (_ok(bodies[n - 1], ETag=f'"{n}"'), False)) as server,
        _pool() as pool,
    ):
        for n, body in enumerate(bodies, 1):
            response = await pool.get(server.url, {})
            assert response.headers["etag"] == f'"{n}"'
            assert await _body(response) == body
            response.release()
    assert server.connections == 1


async def test_bytes_past_the_content_length_after_the_head_drop_the_connection() -> None:
    body = payload(300_000)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        whole = _ok(body)
        writer.write(whole[:1000])
        await writer.drain()
        await asyncio.sleep(0.05)  # the rest comes in reads of its own
        writer.write(whole[1000:] + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad")
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with _pool() as pool:
            response = await pool.get(f"http://127.0.0.1:{port}/obj", {})
            assert await _body(response) == body
            response.release()
            assert not any(pool._idle.values())  # not kept: its framing is not known
            assert not pool._live
    finally:
        server.close()
        await server.wait_closed()


async def test_the_body_past_the_head_is_handed_on_as_the_transport_read_it() -> None:
    # A unit test of the connection's logic, on a transport that only takes writes: no
    # piece of a body past its head's read is copied by the parser.
    class Taking(asyncio.Transport):
        def write(self, data: Any) -> None:
            pass

        def is_closing(self) -> bool:
            return False

    pool = OwnPool(True, 5.0, 5.0)
    conn = Connection(pool, ("http", "127.0.0.1", 80, "127.0.0.1"))
    conn.connection_made(Taking())
    response = OwnResponse(conn)
    conn.send(b"GET / HTTP/1.1\r\n\r\n", response, None)
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2010\r\n\r\n0123456789")
    chunks = [bytes([65 + n]) * 1000 for n in range(2)]
    for chunk in chunks:
        conn.data_received(chunk)
    assert response.complete
    assert (await response.readchunk())[0] == b"0123456789"
    for chunk in chunks:
        assert (await response.readchunk())[0] is chunk
    assert (await response.readchunk())[0] == b""
    pool.close()


@pytest.mark.asyncio_internals  # asyncio transport's max_size; uvloop's has none
@pytest.mark.parametrize(("size", "expected"), [(128 * 1024, 64 * 1024), (1024 * 1024, 256 * 1024)])
async def test_a_body_read_half_a_write_at_a_time_reads_its_socket_so(
    size: int, expected: int
) -> None:
    # As on aiohttp (tests/transfer/test_large_path.py): at high concurrency each of
    # many bodies reads its socket half a write at a time, not 256 KiB, which was most
    # of the bytes a response held at once. At the default (1 MiB writes) unchanged.
    body = payload(4 * size)
    async with _Server(lambda n: (_ok(body), False)) as server, _pool() as pool:
        response = await pool.get(server.url, {})
        with BodyReader(response, read_timeout=10.0, size=size) as reader:
            assert response._conn is not None
            transport: Any = response._conn.transport  # type: ignore[attr-defined]
            assert transport.max_size == expected
            pieces = []
            while piece := await reader.read():
                pieces.append(piece)
        assert b"".join(pieces) == body
        response.release()
