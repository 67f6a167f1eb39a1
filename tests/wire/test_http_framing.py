"""What a server's framing and validators say, held to: a body that ends before the
length its answer announced is never a whole object (a stream, ``cat``), a 206 whose
Content-Length contradicts its Content-Range is refused, and a later part that names
another version than the first answer's is never mixed in.

Raw servers on loopback (``test_url_raw_http``) for what moto cannot answer; S3's
path through moto behind the fault proxy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload
from .test_url_raw_http import RawServer, Seen, cat, ranges_served, reply, requested_range

# -- a body shorter than its answer announced ---------------------------------------------


def _whole_range_answer(body: bytes, *, length: int | None) -> bytes:
    """A 206 covering the whole object whatever was asked (as s3rver answers), whose
    body is half of it: cut by a close (``length=None``), or with that Content-Length."""
    size, half = len(body), len(body) // 2
    headers = {"ETag": '"v1"', "Content-Range": f"bytes 0-{size - 1}/{size}"}
    if length is not None:
        headers["Content-Length"] = str(length)
    # reply() adds Connection: close: without a length the close ends the body.
    return reply(206, headers, body[:half])


async def _stream_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


@pytest.mark.parametrize("length", [None, "half"], ids=["no-length", "length-half"])
async def test_a_stream_never_ends_normally_short_of_its_length(
    length: str | None, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK + 5)
    raw = _whole_range_answer(body, length=None if length is None else len(body) // 2)
    async with RawServer(lambda request: raw) as server:
        url = server.url("/obj?X-Amz-Signature=abc")
        stream = engine.stream_url(url, chunk_size=CHUNK)
        with pytest.raises(asyncdl.DownloadError) as raised:
            await _stream_all(stream)
        assert stream.length in (None, len(body))
        printed = await cat(url)
    # Refused at once (a length that is not the range), or cut and then resumed with a
    # range this server answers wrongly again.
    message = str(raised.value)
    assert any(
        words in message for words in ("Content-Length", "got HTTP 206 with Content-Range")
    ), message
    assert printed.exit_code != 0, printed.output
    assert len(printed.stdout_bytes) < len(body)


async def test_a_206_whose_length_is_not_its_range_is_refused(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """Content-Length and Content-Range must agree (RFC 9110 §14.4): a download and a
    stream refuse the answer before reading its body."""
    body = payload(CHUNK)

    def answer(request: Seen) -> bytes:
        wanted = requested_range(request, len(body))
        assert wanted is not None
        start, end = wanted
        headers = {
            "ETag": '"v1"',
            "Content-Range": f"bytes {start}-{end - 1}/{len(body)}",
            "Content-Length": str((end - start) // 2),
        }
        return reply(206, headers, body[start : start + (end - start) // 2])

    async with RawServer(answer) as server:
        url = server.url("/obj")
        with pytest.raises(asyncdl.DownloadError, match="Content-Length") as raised:
            await _stream_all(engine.stream_url(url))
        assert len(str(raised.value)) < 300
        with pytest.raises(asyncdl.DownloadError, match="Content-Length"):
            await engine.download_url(url, tmp_path / "obj")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("lean_get", [True, False])
async def test_an_s3_stream_whose_first_answer_is_cut_resumes_it(
    lean_get: bool, s3: Any, bucket: str, proxy: TcpProxy, client: Any
) -> None:
    """The first GET answered (by the proxy) with a 206 for the whole object, no length,
    its body cut by a close halfway: a cut, which the stream resumes from its last byte
    (pinned to the ETag), never its normal end."""
    body = payload(3 * CHUNK + 5)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=body)["ETag"]
    size = len(body)
    gets = []

    def rule(request: Any) -> Fault | None:
        if request.method != "GET":
            return None
        gets.append(request)
        if len(gets) > 1:
            return None
        headers = {"ETag": etag, "Content-Range": f"bytes 0-{size - 1}/{size}"}
        return Fault(reply=(206, headers, body[: size // 2]), reply_close=True)

    proxy.rule = rule
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean_get, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        stream = engine.stream(bucket, "k")
        assert await _stream_all(stream) == body
        assert stream.length == size
    assert [r.range for r in gets] == [f"bytes=0-{CHUNK - 1}", f"bytes={size // 2}-{size - 1}"]
    assert gets[1].headers["if-match"] == etag


async def test_a_url_stream_whose_first_answer_is_cut_resumes_it(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    body = payload(3 * CHUNK + 5)
    cut = _whole_range_answer(body, length=None)
    served = ranges_served(body, etag='"v1"', chunked=False)
    answers = iter([cut])
    async with RawServer(lambda request: next(answers, None) or served(request)) as server:
        url = server.url("/obj")
        assert await _stream_all(engine.stream_url(url, chunk_size=CHUNK)) == body
        answers = iter([cut])
        await engine.download_url(url, tmp_path / "obj")
    assert (tmp_path / "obj").read_bytes() == body
    resumed = [r.headers.get("range") for r in server.requests]
    assert resumed.count(f"bytes={len(body) // 2}-{len(body) - 1}") == 2, resumed


# -- a later part of another version ------------------------------------------------------


def _versions(later: Any) -> Any:
    """A server that honours Range but not If-Match: the first request answered with
    version 1 (``"v1"``), every later one by ``later(start, end)``."""
    v1 = payload(3 * CHUNK + 5, 1)
    seen = [0]

    def answer(request: Seen) -> bytes:
        seen[0] += 1
        wanted = requested_range(request, len(v1))
        assert wanted is not None
        start, end = wanted
        if seen[0] == 1:
            etag, body = '"v1"', v1
        else:
            etag, body = later()
        headers = {"Content-Range": f"bytes {start}-{end - 1}/{len(v1)}"}
        if etag is not None:
            headers["ETag"] = etag
        return reply(206, headers, body[start:end])

    return answer


@pytest.mark.parametrize(
    "later_etag", ['W/"v2"', None, '"v2"'], ids=["weak-v2", "no-etag", "strong-v2"]
)
async def test_a_later_part_of_another_version_is_never_mixed_in(
    later_etag: str | None, engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """The first answer pins ``"v1"``; the server ignores If-Match and sends version 2
    under a weak tag, or under none: either is a changed object, never success."""
    v2 = payload(3 * CHUNK + 5, 2)
    async with RawServer(_versions(lambda: (later_etag, v2))) as server:
        url = server.url("/obj")
        with pytest.raises(asyncdl.ObjectChangedError):
            await engine.download_url(url, tmp_path / "obj")
    async with RawServer(_versions(lambda: (later_etag, v2))) as server:
        with pytest.raises(asyncdl.ObjectChangedError):
            await _stream_all(engine.stream_url(server.url("/obj"), chunk_size=CHUNK))
    assert os.listdir(tmp_path) == []


async def test_a_later_part_under_the_weak_form_of_the_pin_is_the_same_version(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """``W/"v1"`` names the version ``"v1"`` pinned (weak comparison): accepted."""
    v1 = payload(3 * CHUNK + 5, 1)
    async with RawServer(_versions(lambda: ('W/"v1"', v1))) as server:
        url = server.url("/obj")
        await engine.download_url(url, tmp_path / "obj")
        assert (tmp_path / "obj").read_bytes() == v1
    async with RawServer(_versions(lambda: ('W/"v1"', v1))) as server:
        got = await _stream_all(engine.stream_url(server.url("/obj"), chunk_size=CHUNK))
    assert got == v1


# -- a body whose end only the connection's close marks --------------------------------------


async def test_a_close_delimited_body_is_never_called_verified_by_its_length(
    engine: asyncdl.Engine, tmp_path: Path
) -> None:
    """A 200 with neither Content-Length nor chunked framing ends where the connection
    closes: a cut cannot be told from the end (RFC 9112 §6.3). Kept, but the result
    says its length was not announced."""
    body = payload(3 * CHUNK + 5)
    raw = b'HTTP/1.0 200 OK\r\nETag: "v1"\r\n\r\n' + body
    async with RawServer(lambda request: raw) as server:
        url = server.url("/obj")
        result = await engine.download_url(url, tmp_path / "obj")
        async with engine.stream_url(url) as stream:
            assert b"".join([piece async for piece in stream]) == body
    assert (tmp_path / "obj").read_bytes() == body
    for verified, reason in (
        (result.verified, result.unverified_reason),
        (stream.verified, stream.unverified_reason),
    ):
        assert not verified
        assert reason is not None
        assert "length was not announced" in reason, reason
