"""Answers no HTTP server should send, refused without quoting what they carry: a peer
that echoes the request (its query is a presigned URL's credential), a redirect to a
URL that is not http(s) or not a URL at all, a transfer coding asyncdl never asked for.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import traceback
from pathlib import Path

import pytest

import asyncdl

from ..conftest import CHUNK, payload
from .test_http_spool import SlowServer
from .test_url_raw_http import RawServer, Seen, _chain, reply

_SECRET = "GIVENSECRET"


def _assert_secret_kept(failure: BaseException, log: str) -> None:
    for exc in _chain(failure):
        for text in (str(exc), repr(exc), repr(exc.args), repr(vars(exc))):
            assert _SECRET not in text, (type(exc), text)
    shown = "".join(traceback.format_exception(failure))
    assert _SECRET not in shown, shown
    assert _SECRET not in log, log


async def _read_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


async def _both_fail(
    engine: asyncdl.Engine, url: str, tmp_path: Path
) -> list[asyncdl.DownloadError]:
    failures = []
    for work in (
        lambda: engine.download_url(url, tmp_path / "x"),
        lambda: _read_all(engine.stream_url(url)),
    ):
        with pytest.raises(asyncdl.DownloadError) as raised:
            await work()
        failures.append(raised.value)
    assert os.listdir(tmp_path) == []
    return failures


@pytest.mark.parametrize("redirected", [False, True], ids=["given", "hop"])
async def test_a_peer_that_echoes_the_request_never_shows_its_query(
    redirected: bool, engine: asyncdl.Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def answer(request: Seen) -> bytes:
        if redirected and request.path.startswith("/r"):
            location = f"/hop?X-Amz-Signature={_SECRET}"
            return reply(302, {"Location": location, "Content-Length": "0"})
        return f"{request.method} {request.path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()

    async with RawServer(answer) as server:
        path = "/r" if redirected else f"/obj?X-Amz-Signature={_SECRET}"
        failures = await _both_fail(engine, server.url(path), tmp_path)
    for failure in failures:
        assert "not valid HTTP" in str(failure), failure
        _assert_secret_kept(failure, caplog.text)


@pytest.mark.parametrize(
    "location",
    [
        f"data:text/plain,{_SECRET}",
        f"javascript:alert('{_SECRET}')",
        f"http://[::1:{_SECRET}/x",
        f"http://127.0.0.1:99999/x?{_SECRET}",
        f"file:///etc/passwd?{_SECRET}",
    ],
    ids=["data", "javascript", "malformed-host", "bad-port", "file"],
)
async def test_a_redirect_to_an_unsupported_url_is_not_quoted_nor_retried(
    location: str, engine: asyncdl.Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = reply(302, {"Location": location, "Content-Length": "0"})
    async with RawServer(lambda request: answer) as server:
        failures = await _both_fail(engine, server.url("/r"), tmp_path)
    for failure in failures:
        assert "redirect to an unsupported URL" in str(failure), failure
        _assert_secret_kept(failure, caplog.text)
    assert len(server.requests) == 2  # one each: not retried


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


@pytest.mark.parametrize(
    ("coding", "framed"),
    [
        ("gzip, chunked", lambda body: _chunked(gzip.compress(body))),
        ("chunked, chunked", lambda body: _chunked(_chunked(body))),
    ],
    ids=["gzip-chunked", "chunked-twice"],
)
async def test_a_transfer_coding_other_than_chunked_is_refused(
    coding: str, framed: object, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """asyncdl sends no TE: an answer coded other than ``chunked`` is not one it can
    take (RFC 9112 §6.1); it is never saved coded."""
    body = payload(3000)
    assert callable(framed)
    raw = (
        f'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n'
    ).encode() + framed(body)
    async with RawServer(lambda request: raw) as server:
        failures = await _both_fail(engine, server.url("/obj"), tmp_path)
    for failure in failures:
        assert "Transfer-Encoding" in str(failure), failure


async def test_ten_redirects_are_reported_as_what_they_are(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    def answer(request: Seen) -> bytes:
        hop = int(request.path.strip("/"))
        return reply(302, {"Location": f"/{hop + 1}", "Content-Length": "0"})

    async with RawServer(answer) as server:
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download_url(server.url("/0"), tmp_path / "x")
    hops = len(server.requests)
    assert f"{hops} redirects" in str(raised.value), (hops, str(raised.value))


_SIGNATURE_MISMATCH = (
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>SignatureDoesNotMatch</Code>"
    "<Message>The request signature we calculated does not match the signature you "
    "provided.</Message><AWSAccessKeyId>AKIDEXAMPLE</AWSAccessKeyId>"
    f"<StringToSign>AWS4-HMAC-SHA256 {_SECRET}</StringToSign>"
    f"<SignatureProvided>{_SECRET}</SignatureProvided>"
    "<CanonicalRequest>GET /obj X-Amz-Security-Token="
    f"{_SECRET}</CanonicalRequest></Error>"
)
_ECHOED_URL = (
    "<Error><Code>ExpiredToken</Code><Message>The URL "
    f"http://127.0.0.1/bad?X-Amz-Signature={_SECRET} (or /bad?sig={_SECRET}) has expired"
    "</Message></Error>"
)


@pytest.mark.parametrize(
    ("status", "body"),
    [(403, _SIGNATURE_MISMATCH), (400, _ECHOED_URL)],
    ids=["signature-mismatch", "echoed-url"],
)
@pytest.mark.parametrize("redirected", [False, True], ids=["given", "hop"])
async def test_what_an_error_body_carries_is_not_kept(
    status: int,
    body: str,
    redirected: bool,
    engine: asyncdl.Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Of a URL's error answer only its Code and its Message (scrubbed) are kept: the
    rest (S3's SignatureProvided, a CanonicalRequest with a security token) is dropped
    from the message and from every exception behind it."""
    caplog.set_level(logging.DEBUG)
    data = body.encode()

    def answer(request: Seen) -> bytes:
        if redirected and request.path.startswith("/r"):
            location = f"/hop?X-Amz-Signature={_SECRET}"
            return reply(302, {"Location": location, "Content-Length": "0"})
        return reply(status, {"Content-Length": str(len(data))}, data)

    async with RawServer(answer) as server:
        failures = await _both_fail(engine, server.url("/r"), tmp_path)
    for failure in failures:
        code = "SignatureDoesNotMatch" if status == 403 else "ExpiredToken"
        assert code in str(failure), failure
        _assert_secret_kept(failure, caplog.text)


async def _stall_whole(writer: asyncio.StreamWriter) -> None:
    """Ignores Range: a chunked 200 (no length: read to its end to learn the size)
    that sends 1000 bytes and stalls."""
    writer.write(
        b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n\r\n'
        b"%x\r\n" % CHUNK + payload(1000)
    )
    await writer.drain()
    await asyncio.sleep(3600)


async def _read_some(engine: asyncdl.Engine, url: str, how: str) -> object:
    if how == "read_ranges_url":
        return await engine.read_ranges_url(url, [(0, 10), (3 * CHUNK, 3 * CHUNK + 10)])
    if how == "open_reader_url":
        async with engine.open_reader_url(url) as reader:
            return await reader.read(10)
    return await _read_all(engine.stream_url(url))


@pytest.mark.parametrize("borrowed", [False, True], ids=["own-client", "borrowed-client"])
@pytest.mark.parametrize("how", ["read_ranges_url", "open_reader_url", "stream_url"])
async def test_a_stalled_body_without_length_fails_in_time_and_never_shows_the_query(
    how: str, borrowed: bool, client: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole answer of unknown length that stalls fails within the engine's
    ``read_timeout`` (a borrowed client's own is botocore's 60 s), naming no query
    (aiobotocore's read timeout error quotes the response's whole URL); a reader
    refuses it at once, before reading its body (it ignored Range)."""
    caplog.set_level(logging.DEBUG)
    config = asyncdl.TransferConfig(read_timeout=0.5, max_attempts=1)
    async with (
        SlowServer(_stall_whole) as server,
        asyncdl.Engine(client if borrowed else None, config=config) as engine,
    ):
        url = server.url(f"/obj?X-Amz-Signature={_SECRET}")
        match = "ignores Range" if how == "open_reader_url" else "transfer failed"
        with pytest.raises(asyncdl.DownloadError, match=match) as raised:
            async with asyncio.timeout(20):
                await _read_some(engine, url, how)
    _assert_secret_kept(raised.value, caplog.text)
