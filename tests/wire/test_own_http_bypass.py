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
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._wire import own_http
from asyncdl._wire.own_http import OwnBodyError, OwnHTTPError, OwnPool
from asyncdl.errors import RetryableError
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload
from .own_http_support import own_pool as _pool
from .own_http_support import read_body as _body
from .test_own_http_attack import BODY, _engine, _Scripted, ok, reset
from .test_url_session import certificate


@pytest.fixture(autouse=True)
def _the_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests of the own client: under ASYNCDL_OWN_HTTP=0 (nox -s tests_aiohttp_gets) its
    # engine-level tests would test aiohttp instead.
    monkeypatch.setattr(own_http, "ENABLED", True)


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
            await pool.get(server.endpoint + "/b/k", {})
        assert not pool._live
        assert await server.all_closed()


# -- the next answer on a connection after a bypassed body ----------------------------

#: How an answer's bytes are cut into the server's writes (each a socket read of its own):
#: the head alone, the head with some body, a body ending exactly at a read's end, the
#: next head split too.
_SPLITS = {
    "head-alone": lambda whole, head: [whole[:head], whole[head:]],
    "head-and-some-body": lambda whole, head: [whole[: head + 10], whole[head + 10 :]],
    "body-in-three": lambda whole, head: [
        whole[: head + 1],
        whole[head + 1 : head + 5000],
        whole[head + 5000 :],
    ],
    "head-in-two": lambda whole, head: [whole[:7], whole[7:head], whole[head:]],
}


@pytest.mark.parametrize("split", list(_SPLITS))
async def test_answers_one_after_another_on_one_connection_each_parsed_from_its_start(
    split: str,
) -> None:
    bodies = [payload(20_000 + n, seed=n) for n in range(3)]

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in bodies:
            await server.head(reader)
            whole = ok(body)
            await _write_apart(writer, *_SPLITS[split](whole, len(whole) - len(body)))
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        for body in bodies:
            response = await pool.get(server.endpoint + "/b/k", {})
            assert response.status == 200
            assert await _body(response) == body
            response.release()
        assert server.connections == 1


@pytest.mark.parametrize("extra", [b"H", b"HTTP/1.1 2", ok(b"bad")])
async def test_bytes_after_a_bypassed_body_in_its_last_read_drop_the_connection(
    extra: bytes,
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.head(reader)
            whole = ok(BODY)
            await _write_apart(writer, whole[:100], whole[100:] + extra)

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert await _body(response) == BODY  # the answer is whole, nothing more
            response.release()
            assert not pool._live
        assert server.connections == 2


async def test_a_content_length_of_zero_then_a_body_on_the_same_connection() -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in (b"", BODY, b""):
            await server.head(reader)
            await _write_apart(writer, ok(body))
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        for body in (b"", BODY, b""):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert await _body(response) == body
            response.release()
        assert server.connections == 1


async def test_an_interim_answer_then_a_bypassed_body() -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.head(reader)
            whole = ok(BODY)
            await _write_apart(
                writer,
                b"HTTP/1.1 100 Continue\r\n\r\n",
                b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + whole[:50],
                whole[50:1000],
                whole[1000:],
            )
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert response.status == 200
            assert await _body(response) == BODY
            response.release()
        assert server.connections == 1


@pytest.mark.parametrize(
    ("version", "pooled"),
    [(b"HTTP/1.0", False), (b"HTTP/1.0 keep-alive", True), (b"HTTP/1.1 close", False)],
)
async def test_a_bypassed_body_is_pooled_only_where_its_answer_keeps_alive(
    version: bytes, pooled: bool
) -> None:
    line, _, connection = version.partition(b" ")
    head = line + b" 200 OK\r\nContent-Length: %d\r\n" % len(BODY)
    if connection:
        head += b"Connection: " + connection + b"\r\n"

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.head(reader)
            await _write_apart(writer, head + b"\r\n" + BODY[:10], BODY[10:])

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert await _body(response) == BODY
            response.release()
        assert server.connections == (1 if pooled else 2)


@pytest.mark.parametrize(
    "length", [b"Content-Length: 5 ", b"Content-Length: 5\t", b"Content-Length: 005"]
)
async def test_a_content_length_llhttp_accepts_frames_the_bypass(length: bytes) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.head(reader)
            await _write_apart(writer, b"HTTP/1.1 200 OK\r\n" + length + b"\r\n\r\n", b"hello")
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.endpoint + "/b/k", {})
            assert await _body(response) == b"hello"
            response.release()
        assert server.connections == 1


@pytest.mark.parametrize(
    "length",
    [
        b"Content-Length: 5, 5",
        b"Content-Length: 5\r\nContent-Length: 5",
        b"Content-Length: 5\r\nContent-Length: 6",
        b"Content-Length: +5",
        b"Content-Length: 5 5",
        b"Content-Length: -1",
        b"Content-Length: 0x5",
        b"Content-Length:",
        b"Content-Length: 99999999999999999999999",
        b"Content-Length : 5",
    ],
)
async def test_a_content_length_llhttp_refuses_is_a_clear_error_at_once(length: bytes) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        await _write_apart(writer, b"HTTP/1.1 200 OK\r\n" + length + b"\r\n\r\nhello")
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        started = time.monotonic()
        with pytest.raises(OwnHTTPError, match="bad framing"):
            await pool.get(server.endpoint + "/b/k", {})
        assert time.monotonic() - started < 1.0
        assert await server.all_closed()


# -- a body that does not come whole --------------------------------------------------


@pytest.mark.parametrize("how", ["reset", "close"])
async def test_a_connection_ended_mid_bypass_is_a_broken_body(how: str) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        whole = ok(BODY)
        await _write_apart(writer, whole[:100], whole[100:-1])  # all but the last byte
        if how == "reset":
            reset(writer)
        else:
            writer.close()

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        with pytest.raises(OwnBodyError, match="closed before the answer ended"):
            await _body(response)
        assert not response.complete
        assert not response.reusable
        response.close()
        assert not pool._live


async def test_a_stall_verdict_mid_bypass_fails_the_body_and_its_connection() -> None:
    go_on = asyncio.Event()

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        whole = ok(BODY)
        await _write_apart(writer, whole[:100], whole[100:5000])
        await go_on.wait()
        await _write_apart(writer, whole[5000:])
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        head_and_some = len(ok(BODY)) - len(BODY)
        got = b""
        while len(got) < 5000 - head_and_some:
            got += (await response.readchunk())[0]
        response.set_exception(RetryableError("no bytes for 1s"))
        go_on.set()  # the rest of the body comes after the verdict
        await asyncio.sleep(0.2)
        with pytest.raises(RetryableError):
            await _body(response)
        assert not response.reusable
        response.close()
        assert not pool._live
        assert await server.all_closed()


async def test_an_answer_closed_mid_bypass_never_pools_its_connection() -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.head(reader)
            whole = ok(BODY)
            await _write_apart(writer, whole[:100], whole[100:3000], whole[3000:])

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        await response.readchunk()
        await response.readchunk()  # the first bypassed read
        assert not response.complete
        response.release()
        assert not pool._live
        assert await server.all_closed()
        # The next GET is answered on a new connection, from its first byte.
        response = await pool.get(server.endpoint + "/b/k", {})
        assert await _body(response) == BODY
        response.release()
        assert server.connections == 2


async def test_a_slow_reader_pauses_and_resumes_the_bypass() -> None:
    body = payload(2_000_000)

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await server.head(reader)
            writer.write(ok(body))
            await writer.drain()
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        for _ in range(2):
            response = await pool.get(server.endpoint + "/b/k", {})
            response.hold_at_most(1000)
            conn: Any = response._conn
            pieces, paused = [], False
            while piece := (await response.readchunk())[0]:
                pieces.append(piece)
                await asyncio.sleep(0.001)
                paused = paused or conn._paused  # the socket read while the reader slept
                # Never more held than one socket read past the mark: the read was paused.
                assert response.held <= 1000 + 256 * 1024
            assert b"".join(pieces) == body
            assert paused
            response.release()
        assert server.connections == 1


async def test_bytes_after_a_whole_body_given_a_stall_verdict_are_not_a_second_answer() -> None:
    # A verdict (``set_exception``) on a body already whole marks it not complete: bytes
    # that come after it are still past the answer's end, never an answer read into it.
    go_on = asyncio.Event()

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        whole = ok(BODY)
        await _write_apart(writer, whole[:100], whole[100:])
        await go_on.wait()
        await _write_apart(writer, b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nbad")
        await reader.read()

    async with _Scripted(script) as server, _pool() as pool:
        response = await pool.get(server.endpoint + "/b/k", {})
        assert await _body(response) == BODY
        response.set_exception(RetryableError("no bytes for 1s"))
        go_on.set()
        await asyncio.sleep(0.2)
        assert (response.status, response.headers["ETag"]) == (200, '"v1"')
        with pytest.raises(RetryableError):
            await response.readchunk()  # nothing more: "bad" is no byte of this body
        assert not pool._live
        assert await server.all_closed()
        response.close()


# -- end to end -----------------------------------------------------------------------


def _asked_range(head: bytes, size: int) -> tuple[int, int]:
    """The first and last byte a GET's head asks for (the whole object without Range)."""
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "range":
            first, _, last = value.strip().removeprefix("bytes=").partition("-")
            return int(first), min(int(last) if last else size - 1, size - 1)
    return 0, size - 1


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("off_by", [-10, 10, -1, 1])
async def test_a_206_whose_length_disagrees_with_its_range_writes_nothing(
    off_by: int, tmp_path: Path
) -> None:
    # Content-Range says one size, Content-Length (which frames the bypass) another, and
    # the body is as long as Content-Length says: the engine refuses the size.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            first, last = _asked_range(await server.head(reader), len(BODY))
            body = (BODY * 2)[first : last + 1 + off_by]
            head = (
                b'HTTP/1.1 206 Partial Content\r\nETag: "v1"\r\n'
                b"Content-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n"
                % (first, last, len(BODY), len(body))
            )
            await _write_apart(writer, head + body[:10], body[10:])

    async with _Scripted(script) as server, _engine(server.endpoint) as engine:
        with pytest.raises(asyncdl.DownloadError):
            await engine.download("b", "k", tmp_path / "k")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fault", ["cut", "stall", "corrupt"])
async def test_downloads_through_the_bypass_survive_a_fault_mid_body(
    fault: str, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Objects one after another on kept-alive connections; one GET's body is cut, stalled
    # past the read timeout, or has a byte flipped, mid-bypass: that GET is tried again,
    # every file is its object (a flipped byte is caught by the object's checksum).
    bodies = {f"k{i}": payload(300_000 + 1000 * i, seed=i) for i in range(4)}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="CRC32")
    faults = {
        "cut": Fault(cut_after=100_000),
        "stall": Fault(cut_after=100_000, stall=3.0),
        "corrupt": Fault(corrupt_at=150_000),
    }
    gets: list[str] = []

    def rule(request: Any) -> Fault | None:
        if request.method != "GET":
            return None
        gets.append(request.path)
        return faults[fault] if len(gets) == 2 else None

    proxy.rule = rule
    config = asyncdl.TransferConfig(read_timeout=1.0, backoff_base=0.01, max_concurrency=1)
    async with asyncdl.Engine(config=config, endpoint_url=proxy.url, region="us-east-1") as engine:
        for key in bodies:
            # Head-first: the object's checksum is asked for, and checked.
            result = await engine.download(bucket, key, str(tmp_path / key), strategy="head-first")
            assert result.verified
        pool = getattr(engine.client._endpoint.http_session, "_asyncdl_own_pool", None)
        assert isinstance(pool, own_http.OwnPool)
        assert pool.sent == len(gets) > len(bodies)
    for key, body in bodies.items():
        assert (tmp_path / key).read_bytes() == body


async def test_bypassed_bodies_over_tls_with_a_slow_reader_and_keep_alive(
    tmp_path: Path,
) -> None:
    # TLS hands the protocol what it decrypted, in reads of its own sizes, and pauses
    # reading through its own layer: the bypass must end each body where it ends.
    bundle, server_tls = certificate(tmp_path, "origin")
    bodies = [payload(700_000 + n, seed=n) for n in range(3)]

    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in bodies:
            await server.head(reader)
            writer.write(ok(body))
            await writer.drain()
        await reader.read()

    pool = OwnPool(ssl.create_default_context(cafile=str(bundle)), 5.0, 5.0)
    try:
        async with _Scripted(script, tls=server_tls) as server:
            for body in bodies:
                response = await pool.get(server.endpoint + "/b/k", {})
                response.hold_at_most(10_000)
                pieces = []
                while piece := (await response.readchunk())[0]:
                    pieces.append(piece)
                    await asyncio.sleep(0.001)
                assert b"".join(pieces) == body
                response.release()
            assert server.connections == 1
    finally:
        pool.close()
