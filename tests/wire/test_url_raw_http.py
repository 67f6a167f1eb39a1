"""URL downloads against small raw HTTP servers on loopback, for what moto cannot
answer: a body without Content-Length (chunked), a malformed length, weak ETags,
a redirect to a presigned URL whose hop fails.

Each server answers one request per connection (``Connection: close``) from a
function of the request, and records what it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from multidict import CIMultiDict

import asyncdl
from asyncdl._wire.retry import with_retries
from asyncdl._wire.signed_get import body_length
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload
from ..transfer.test_url import _closed_port


@dataclass(frozen=True, slots=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


Answer = Callable[[Seen], bytes]


class RawServer:
    """An HTTP/1.1 server that sends ``answer(request)`` as it is, then closes."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self.requests: list[Seen] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            request = Seen(method, path, headers)
            self.requests.append(request)
            writer.write(self._answer(request))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def reply(
    status: int,
    headers: dict[str, str] | list[tuple[str, str]],
    body: bytes = b"",
    *,
    chunked: bool = False,
) -> bytes:
    """One whole answer; ``chunked``: the body in chunks of 1000 bytes, no length."""
    items = list(headers.items()) if isinstance(headers, dict) else list(headers)
    items.append(("Connection", "close"))
    if chunked:
        items.append(("Transfer-Encoding", "chunked"))
        framed = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000])
            for i in range(0, len(body), 1000)
        )
        body = framed + b"0\r\n\r\n"
    head = "".join(f"{name}: {value}\r\n" for name, value in items)
    return f"HTTP/1.1 {status} X\r\n{head}\r\n".encode("latin-1") + body


def requested_range(request: Seen, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of the request's ``Range: bytes=a-b``, or ``None``."""
    value = request.headers.get("range")
    if value is None:
        return None
    first, last = value.removeprefix("bytes=").split("-")
    return int(first), min(int(last) + 1, size)


def ranges_served(
    body: bytes, *, etag: str, chunked: bool, length: bool = True, strict: bool = False
) -> Answer:
    """A server that honours Range; ``strict``: a weak If-Match never matches (412)."""

    def answer(request: Seen) -> bytes:
        if_match = request.headers.get("if-match")
        if if_match is not None and (if_match != etag or (strict and if_match.startswith("W/"))):
            return reply(412, {"Content-Length": "0"})
        wanted = requested_range(request, len(body))
        if wanted is None:
            headers = {"ETag": etag}
            if length:
                headers["Content-Length"] = str(len(body))
            return reply(200, headers, body, chunked=chunked)
        start, end = wanted
        headers = {"ETag": etag, "Content-Range": f"bytes {start}-{end - 1}/{len(body)}"}
        if length:
            headers["Content-Length"] = str(end - start)
        return reply(206, headers, body[start:end], chunked=chunked)

    return answer


def range_ignored(body: bytes, etag: str | None = '"v1"') -> Answer:
    """A server that ignores Range: every answer a chunked 200 of the whole body."""

    def answer(request: Seen) -> bytes:
        headers = {} if etag is None else {"ETag": etag}
        return reply(200, headers, body, chunked=True)

    return answer


async def cat(url: str) -> Any:
    return await asyncio.to_thread(CliRunner().invoke, cli, ["cat", url])


# -- 1: a body of unknown length ---------------------------------------------------------


@pytest.mark.parametrize("size", [0, 7, 3 * CHUNK + 5])
@pytest.mark.parametrize("etag", ['"v1"', None])
async def test_a_chunked_200_without_length_is_the_whole_object(
    size: int, etag: str | None, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """A server that ignores Range and sends its body chunked: the size is unknown until
    the body ends; a download, a stream and ``cat`` each get every byte."""
    body = payload(size)
    async with RawServer(range_ignored(body, etag)) as server:
        url = server.url("/obj?X-Amz-Signature=abc")
        result = await engine.download_url(url, tmp_path / "obj")
        assert (tmp_path / "obj").read_bytes() == body
        assert result.size == size
        async with engine.stream_url(url) as stream:
            assert b"".join([piece async for piece in stream]) == body
        assert stream.size == size
        for start, end in [(3, size - 1), (3, None), (size, None)] if size > 4 else []:
            async with engine.stream_url(url, start=start, end=end) as part:
                assert b"".join([piece async for piece in part]) == body[start:end]
        printed = await cat(url)
    assert printed.exit_code == 0, printed.output
    assert printed.stdout_bytes == body
    assert os.listdir(tmp_path) == ["obj"]


async def test_a_chunked_body_cut_before_its_last_chunk_is_not_the_object(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """Without a length, only the last chunk says the body is whole: a connection
    closed before it is a cut (retried by a download), never a shorter object."""
    body = payload(3 * CHUNK + 5)
    whole = reply(200, {"ETag": '"v1"'}, body, chunked=True)
    cut = whole[: len(whole) // 2]
    answers = iter([cut, cut])

    async with RawServer(lambda request: next(answers, whole)) as server:
        url = server.url("/obj")
        result = await engine.download_url(url, tmp_path / "obj")
        assert (tmp_path / "obj").read_bytes() == body
        assert result.size == len(body)
        answers = iter([cut])
        stream = engine.stream_url(url)
        with pytest.raises(asyncdl.DownloadError, match="transfer failed"):
            await _read_all(stream)
        assert stream.size is None
    assert len(server.requests) == 3 + 1
    assert os.listdir(tmp_path) == ["obj"]


async def test_the_size_probe_of_a_url_reads_a_body_without_length(
    engine: asyncdl.Engine,
) -> None:
    """A URL's stand-in for a HEAD (a one-byte GET) answered whole and chunked."""
    body = payload(CHUNK + 3)
    async with RawServer(range_ignored(body)) as server:
        meta = await engine._context.url_object(server.url("/obj")).head()
    assert (meta.size, meta.etag) == (len(body), '"v1"')


async def test_a_206_without_length_takes_it_from_content_range(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK + 5)
    answer = ranges_served(body, etag='"v1"', chunked=True, length=False)
    async with RawServer(answer) as server:
        url = server.url("/obj")
        await engine.download_url(url, tmp_path / "obj")
        assert (tmp_path / "obj").read_bytes() == body
        async with engine.stream_url(url, chunk_size=CHUNK) as stream:
            assert b"".join([piece async for piece in stream]) == body
        printed = await cat(url)
    assert printed.stdout_bytes == body
    assert all("range" in r.headers for r in server.requests)


@pytest.mark.parametrize(
    ("values", "length"),
    [
        ([], None),
        (["0"], 0),
        (["5"], 5),
        ([" 5 "], 5),
        (["5, 5"], 5),
        (["5", "5"], 5),
        (["9" * 18], 10**18 - 1),
        (["9" * 19], ValueError),
        (["9" * 5000], ValueError),
        (["5", "6"], ValueError),
        (["5, 6"], ValueError),
        (["-1"], ValueError),
        (["1e3"], ValueError),
        (["+5"], ValueError),
        (["0x5"], ValueError),
        (["\u0665"], ValueError),  # a digit, but not an ASCII one
        ([""], ValueError),
    ],
)
def test_content_length_is_one_plain_decimal(values: list[str], length: Any) -> None:
    headers = CIMultiDict(("Content-Length", value) for value in values)
    if length is ValueError:
        with pytest.raises(ValueError, match="Content-Length") as raised:
            body_length(headers)
        assert len(str(raised.value)) < 100
    else:
        assert body_length(headers) == length
        assert body_length({"content-length": values[0]} if values else {}) == length


@pytest.mark.parametrize(
    "lengths",
    [["-1"], ["1e3"], ["9" * 5000], ["5", "6"], ["+5"], ["0x5"], [""]],
    ids=["negative", "exponent", "5000-digits", "two-values", "plus", "hex", "empty"],
)
async def test_a_content_length_that_is_not_a_decimal_is_a_clear_error(
    lengths: list[str], engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = b"12345"
    headers = [("ETag", '"v1"')] + [("Content-Length", value) for value in lengths]
    async with RawServer(lambda request: reply(200, headers, body)) as server:
        url = server.url("/obj")
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download_url(url, tmp_path / "obj")
        shown = str(raised.value).lower()
        # aiohttp's pure-Python parser fails its own int() of 5000 digits, naming no
        # header: its words are what is shown.
        assert "content-length" in shown or "5000 digits" in shown, raised.value
        assert len(str(raised.value)) < 300
        stream = engine.stream_url(url)
        with pytest.raises(asyncdl.DownloadError):
            await stream.open()
        await stream.aclose()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("lean_get", [True, False])
async def test_an_s3_answer_sent_chunked_is_read_whole(
    lean_get: bool, s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    """S3 (moto) behind a proxy that drops Range and re-frames each answer chunked,
    through asyncdl's lean GET and through botocore's ``get_object``."""
    body = payload(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    proxy.rule = lambda request: Fault(headers={"range": None}, chunked=True)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean_get)
    async with asyncdl.Engine(client, config=config) as engine:
        await _download_and_stream(engine, bucket, body, tmp_path)


async def _download_and_stream(
    engine: asyncdl.Engine, bucket: str, body: bytes, tmp_path: Path
) -> None:
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == body
    assert result.size == len(body)
    async with engine.stream(bucket, "k") as stream:
        assert b"".join([piece async for piece in stream]) == body
    assert stream.size == len(body)


# -- 9: the query of a redirect's target ------------------------------------------------

_SECRET = "SECRET"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception behind it (causes, contexts, and those an exception
    holds in its attributes, as botocore's hold aiohttp's)."""
    todo, seen = [exc], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)
        for value in [*vars(current).values(), *getattr(current, "kwargs", {}).values()]:
            if isinstance(value, BaseException):
                todo.append(value)


def _second_hops(refused_port: int) -> dict[str, Answer]:
    location = "/bad?X-Amz-Signature=" + _SECRET
    cut = reply(200, {"Content-Length": "100000", "ETag": '"v1"'})
    return {
        "garbage": lambda request: b"NOT HTTP AT ALL\r\n\r\n",
        "bad-header": lambda request: b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "500": lambda request: reply(500, {"Content-Length": "5"}, b"oops!"),
        "cut-body": lambda request: cut + b"x" * 10,
        "refused": lambda request: b"",
        "loop": lambda request: reply(302, {"Location": location, "Content-Length": "0"}),
        "_location": lambda request: reply(
            302,
            {
                "Location": (
                    f"http://127.0.0.1:{refused_port}{location}"
                    if request.path.startswith("/refused")
                    else location
                ),
                "Content-Length": "0",
            },
        ),
    }


@pytest.mark.parametrize("hop", ["garbage", "bad-header", "500", "cut-body", "refused", "loop"])
async def test_the_query_of_a_redirect_target_is_never_shown(
    hop: str, engine: asyncdl.Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with contextlib.closing(_closed_port()) as port:
        hops = _second_hops(port)

        def answer(request: Seen) -> bytes:
            if request.path.startswith("/bad"):
                return hops[hop](request)
            return hops["_location"](request)

        async with RawServer(answer) as server:
            url = server.url(f"/{hop}?X-Amz-Signature=FIRST")
            failures = []
            for work in (
                lambda: engine.download_url(url, tmp_path / "x"),
                lambda: _read_all(engine.stream_url(url)),
            ):
                with pytest.raises(asyncdl.DownloadError) as raised:
                    await work()
                failures.append(raised.value)
    assert any(r.path.startswith("/bad") for r in server.requests) or hop == "refused"
    for failure in failures:
        for exc in _chain(failure):
            for text in (str(exc), repr(exc), repr(exc.args), repr(vars(exc))):
                assert not _leaks(text), (type(exc), text)
        shown = "".join(traceback.format_exception(failure))
        assert not _leaks(shown), shown
    assert not _leaks(caplog.text), caplog.text
    assert os.listdir(tmp_path) == []


def _leaks(text: str) -> bool:
    return _SECRET in text or "FIRST" in text


async def _read_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


# -- 12: weak ETags ---------------------------------------------------------------------


async def test_a_weak_etag_pins_nothing(engine: asyncdl.Engine, tmp_path: Path) -> None:
    """A weak tag never matches by strong comparison (RFC 9110 §13.1.1): a strict
    server 412s every ``If-Match: W/...``; asyncdl treats it as no ETag."""
    body = payload(3 * CHUNK)
    answer = ranges_served(body, etag='W/"v1"', chunked=False, strict=True)
    async with RawServer(answer) as server:
        url = server.url("/obj")
        await engine.download_url(url, tmp_path / "obj")
        assert (tmp_path / "obj").read_bytes() == body
        async with engine.stream_url(url, chunk_size=CHUNK) as stream:
            assert b"".join([piece async for piece in stream]) == body
    assert not any(r.headers.get("if-match", "").startswith("W/") for r in server.requests)


async def test_a_weak_etag_from_s3_pins_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    proxy.rule = lambda request: Fault(response_headers={"etag": 'W/"v1"'})
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == body
    assert result.etag is None
    assert not any("if-match" in r.headers for r in proxy.requests)
    proxy.rule = None
    given = await engine.download(bucket, "k", tmp_path / "g", size=len(body), etag='W/"v1"')
    assert (tmp_path / "g").read_bytes() == body
    assert given.etag is not None  # the object's own, strong one
    assert not any(r.headers.get("if-match", "").startswith("W/") for r in proxy.requests)


# -- 13: a DownloadError is never its own cause -----------------------------------------


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None:
        assert all(current is not seen for seen in chain), f"a cause loop at {current!r}"
        chain.append(current)
        current = current.__cause__
    return chain


async def test_a_download_error_keeps_its_own_cause_through_retries() -> None:
    lower = OSError("the disk said no")

    async def fails() -> None:
        raise asyncdl.DownloadError("it failed", bucket="b", key="k") from lower

    config = asyncdl.TransferConfig(backoff_base=0.01)
    with pytest.raises(asyncdl.DownloadError) as raised:
        await with_retries(config, fails, bucket="b", key="k", what="a test", counters=None)
    assert raised.value.__cause__ is lower
    assert _causes(raised.value)[-1] is lower


async def test_a_malformed_answer_is_reported_with_its_real_cause(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    headers = {"ETag": '"v1"', "Content-Range": "bytes 0-4/many", "Content-Length": "5"}
    async with RawServer(lambda request: reply(206, headers, b"12345")) as server:
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download_url(server.url("/obj"), tmp_path / "obj")
    error = raised.value
    assert error.__cause__ is not error
    chain = _causes(error)
    assert isinstance(chain[-1], ValueError), chain
    assert os.listdir(tmp_path) == []


async def test_a_part_cut_short_after_its_first_bytes_keeps_its_real_cause(
    engine: asyncdl.Engine,
) -> None:
    # No ETag: the rest of a stream is not pinned, so an answer that fails once it has
    # handed bytes on cannot be asked again: the stream fails with what went wrong.
    body = payload(3 * CHUNK)

    def answer(request: Seen) -> bytes:
        wanted = requested_range(request, len(body))
        assert wanted is not None
        start, end = wanted
        # The first answer whole; the rest ends (properly, chunked) 1000 bytes in.
        sent = body[start:end] if end <= CHUNK else body[start : CHUNK + 1000]
        headers = {"Content-Range": f"bytes {start}-{end - 1}/{len(body)}"}
        return reply(206, headers, sent, chunked=True)

    async with RawServer(answer) as server:
        stream = engine.stream_url(server.url("/obj"), chunk_size=CHUNK, prefetch=1)
        with pytest.raises(asyncdl.DownloadError) as raised:
            await _read_all(stream)
    error = raised.value
    assert "body ended at byte" in str(error)
    assert error.__cause__ is not error
    _causes(error)
