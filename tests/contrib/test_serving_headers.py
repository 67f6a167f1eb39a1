"""What object_response says about an object, under uvicorn on loopback: the type it
serves (never a guessed active one), ``nosniff`` on every answer, the representation
metadata stored with the object, and hostile request headers answered, never a 500."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import pytest
from fastapi import Request
from starlette.responses import Response

import asyncdl
from asyncdl.contrib.fastapi import _headers, object_response
from asyncdl.contrib.http_ranges import Answer
from asyncdl.object_info import ObjectInfo
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload
from .test_object_response import serving, settled

HUGE = "9" * 5000  # past Python's int-digits limit (4300)


async def test_a_guessed_type_is_never_an_active_one(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stored without a type (S3 says binary/octet-stream): the key's name is the
    # uploader's, so a type that a browser runs on the app's origin is never guessed.
    body = b"<script>alert(document.cookie)</script>"
    active = [
        "page.html",
        "page.htm",
        "page.xhtml",
        "evil.svg",
        "feed.xml",
        "style.xsl",
        "app.js",
        "mod.mjs",
        "doc.pdf",
        "page.html.gz",  # text/html by name, gzip by encoding: neither is known
        "data.csv.gz",
    ]
    for key in active:
        s3.put_object(Bucket=bucket, Key=f"u/{key}", Body=body)
    passive = {"clip.mp4": "video/mp4", "notes.txt": "text/plain", "photo.png": "image/png"}
    for key in passive:
        s3.put_object(Bucket=bucket, Key=f"u/{key}", Body=body)
    s3.put_object(Bucket=bucket, Key="u/own.html", Body=body, ContentType="text/html")
    async with serving(proxy, monkeypatch) as (http, engine, _):
        for key in active:
            for method in ("GET", "HEAD"):
                response = await http.request(method, f"/o/{bucket}/u/{key}")
                assert response.status_code == 200
                assert (key, response.headers["content-type"]) == (
                    key,
                    "application/octet-stream",
                )
                assert response.headers["x-content-type-options"] == "nosniff"
        for key, expected in passive.items():
            response = await http.get(f"/o/{bucket}/u/{key}")
            assert response.headers["content-type"] == expected
            assert response.headers["x-content-type-options"] == "nosniff"
        # A type the uploader stored is the app owner's choice: sent as it is.
        response = await http.get(f"/o/{bucket}/u/own.html")
        assert response.headers["content-type"] == "text/html"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.content == body
        await settled(proxy, engine)


async def test_a_stored_type_not_valid_in_a_header_falls_back(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # S3 keeps the bytes of a header as they came: UTF-8 here, which no HTTP header
    # (Latin-1) can carry back out. boto3 sends a str header as Latin-1, so these are
    # the UTF-8 bytes of "text/plain; name=文", stored as such.
    stored = "text/plain; name=\u6587".encode().decode("latin-1")
    s3.put_object(Bucket=bucket, Key="t/notes.txt", Body=b"hello", ContentType=stored)
    s3.put_object(Bucket=bucket, Key="t/page.html", Body=b"<p>", ContentType=stored)
    async with serving(proxy, monkeypatch) as (http, engine, _):
        for method in ("GET", "HEAD"):
            response = await http.request(method, f"/o/{bucket}/t/notes.txt")
            assert response.status_code == 200, method
            assert response.headers["content-type"] == "text/plain"
            assert response.headers["x-content-type-options"] == "nosniff"
            response = await http.request(method, f"/o/{bucket}/t/page.html")
            assert response.status_code == 200, method
            assert response.headers["content-type"] == "application/octet-stream"
        assert (await http.get(f"/o/{bucket}/t/notes.txt")).content == b"hello"
        await settled(proxy, engine)


def test_stored_values_that_no_header_can_carry_are_left_out() -> None:
    # Headers decoded otherwise than as Latin-1 (a borrowed client's, another store's)
    # can hold any character; Starlette sends them as Latin-1 (it raised: a 500). A CR
    # or LF would end the field and add one of the store's choosing.
    info = ObjectInfo(
        5,
        '"e"',
        {
            "content-type": "text/plain; name=\u6587",
            "content-disposition": "inline; filename=\u6587.txt",
            "cache-control": "max-age=1\r\nSet-Cookie: a=b",
            "content-language": "fr",
            "last-modified": "Tue, 01 Dec 2026 10:00:00 GMT",
        },
    )
    headers = _headers(Answer(200, 0, 5), info, "k.txt", None)
    response = Response(headers=headers)  # what raised
    assert dict(response.headers) == {
        "accept-ranges": "bytes",
        "content-length": "5",
        "content-type": "text/plain",
        "x-content-type-options": "nosniff",
        "etag": '"e"',
        "last-modified": "Tue, 01 Dec 2026 10:00:00 GMT",
        "content-language": "fr",
    }


async def test_a_method_other_than_get_or_head(engine: asyncdl.Engine, proxy: TcpProxy) -> None:
    scope = {"type": "http", "method": "POST", "headers": [], "query_string": b""}
    response = await object_response(engine, "bucket", "k", Request(scope))
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert proxy.requests == []


async def test_nosniff_on_every_answer(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(1000)
    etag = s3.put_object(Bucket=bucket, Key="n.bin", Body=data)["ETag"]
    url = f"/o/{bucket}/n.bin"
    async with serving(proxy, monkeypatch, max_attempts=1) as (http, engine, _):
        answers = {
            200: await http.get(url),
            206: await http.get(url, headers={"Range": "bytes=0-9"}),
            304: await http.get(url, headers={"If-None-Match": etag}),
            412: await http.get(url, headers={"If-Match": '"other"'}),
            416: await http.get(url, headers={"Range": "bytes=5000-"}),
            404: await http.get(f"/o/{bucket}/missing"),
        }
        answers[0] = await http.head(url)
        proxy.rule = lambda r: Fault(status=403, error_code="AccessDenied")
        answers[403] = await http.get(url)
        proxy.rule = lambda r: Fault(status=500)
        answers[502] = await http.get(url)
        proxy.rule = None
        for status, response in answers.items():
            assert response.status_code == (status or 200)
            assert (status, response.headers.get("x-content-type-options")) == (
                status,
                "nosniff",
            )
        await settled(proxy, engine)


async def test_hostile_range_and_date_headers_get_answers_not_500s(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(1000, seed=1)
    etag = s3.put_object(Bucket=bucket, Key="h.bin", Body=data)["ETag"]
    s3.put_object(Bucket=bucket, Key="empty.bin", Body=b"")
    url = f"/o/{bucket}/h.bin"
    huge_date = "Sun, 06 Nov 99999999999999999999 08:49:37 GMT"
    async with serving(proxy, monkeypatch) as (http, engine, _):

        async def get(headers: dict[str, str], path: str = url) -> httpx.Response:
            return await http.get(path, headers=headers)

        response = await get({"Range": f"bytes={HUGE}-"})
        assert (response.status_code, response.content) == (416, b"")
        assert response.headers["content-range"] == "bytes */1000"
        for value in (f"bytes=0-{HUGE}", f"bytes=-{HUGE}", f"bytes=0-0{HUGE}"):
            response = await get({"Range": value})
            assert (response.status_code, response.content) == (206, data), value
            assert response.headers["content-range"] == "bytes 0-999/1000"
        response = await get({"Range": f"bytes={HUGE}-1"})  # reversed: ignored
        assert (response.status_code, response.content) == (200, data)
        # Invalid dates are ignored (RFC 9110 §13.1.3, §13.1.4): the whole object.
        for name in ("If-Modified-Since", "If-Unmodified-Since"):
            for value in (huge_date, "Sun, 06 Nov 1994 25:61:99 GMT", "yesterday"):
                response = await get({name: value})
                assert (response.status_code, response.content) == (200, data), (name, value)
        response = await get({"If-Range": huge_date, "Range": "bytes=0-9"})
        assert (response.status_code, response.content) == (200, data)
        # The three forms of an HTTP-date (§5.6.7), each a date after the object's.
        for value in (
            "Sun, 06 Nov 2100 08:49:37 GMT",
            "Wednesday, 06-Nov-69 08:49:37 GMT",  # two digits: 2069, under 50 years ahead
            "Sat Nov  6 08:49:37 2100",
        ):
            response = await get({"If-Modified-Since": value})
            assert (response.status_code, response.headers["etag"]) == (304, etag), value
            response = await get({"If-Unmodified-Since": value})
            assert response.status_code == 200, value
        for value in ("Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                      "Saturday, 06-Nov-99 08:49:37 GMT",  # 2099 is over 50 years ahead: 1999
                      "Sun Nov  6 08:49:37 1994"):  # fmt: skip
            response = await get({"If-Unmodified-Since": value})
            assert response.status_code == 412, value
            response = await get({"If-Modified-Since": value})
            assert response.status_code == 200, value
        # The last 5 bytes of an empty object: all of it, which is nothing (not a 416).
        response = await get({"Range": "bytes=-5"}, f"/o/{bucket}/empty.bin")
        assert (response.status_code, response.content) == (200, b"")
        assert response.headers["content-length"] == "0"
        assert "content-range" not in response.headers
        response = await get({"Range": "bytes=0-"}, f"/o/{bucket}/empty.bin")
        assert response.status_code == 416
        await settled(proxy, engine)


STORED = {
    "ContentType": "text/css",
    "ContentEncoding": "gzip",
    "CacheControl": "public, max-age=600",
    "ContentLanguage": "fr",
    "ContentDisposition": 'inline; filename="site.css"',
}
#: The same fields, as an answer names them.
SENT = {
    "content-type": "text/css",
    "content-encoding": "gzip",
    "cache-control": "public, max-age=600",
    "content-language": "fr",
    "content-disposition": 'inline; filename="site.css"',
}


async def test_stored_representation_metadata_is_passed_on(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    css = gzip.compress(b"body { color: red }\n" * 200)
    expires = "Thu, 01 Dec 2039 16:00:00 GMT"
    etag = s3.put_object(Bucket=bucket, Key="s/site.css", Body=css, Expires=expires, **STORED)[
        "ETag"
    ]
    url = f"/o/{bucket}/s/site.css"
    async with serving(proxy, monkeypatch) as (http, engine, _):

        async def raw(
            method: str, headers: dict[str, str] | None = None, **params: str
        ) -> tuple[httpx.Response, bytes]:
            async with http.stream(method, url, headers=headers, params=params) as response:
                return response, b"".join([piece async for piece in response.aiter_raw()])

        for method, headers in (("GET", None), ("HEAD", None), ("GET", {"Range": "bytes=0-9"})):
            response, body = await raw(method, headers)
            got = {name: response.headers.get(name) for name in SENT}
            assert got == SENT, (method, headers)
            assert response.headers["expires"] == expires
            if method == "GET":
                assert body == (css if headers is None else css[:10])  # as stored
        # The app's own filename is its choice over the stored one.
        response, _ = await raw("GET", None, name="x.css")
        assert response.headers["content-disposition"] == 'attachment; filename="x.css"'
        # A 304 carries what a cache updates from (RFC 9110 §15.4.5), and no body.
        for headers in ({"If-None-Match": etag}, {"If-Modified-Since": expires}):
            response, body = await raw("GET", headers)
            assert (response.status_code, body) == (304, b"")
            assert response.headers["etag"] == etag
            assert response.headers["cache-control"] == "public, max-age=600"
            assert response.headers["expires"] == expires
            assert "date" in response.headers
            assert "content-encoding" not in response.headers
            assert "content-length" not in response.headers
        await settled(proxy, engine)


async def test_a_get_of_an_empty_object_has_the_headers_of_its_head(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    etag = s3.put_object(
        Bucket=bucket, Key="e/none.json", Body=b"", ContentType="application/json",
        CacheControl="no-cache",
    )["ETag"]  # fmt: skip
    url = f"/o/{bucket}/e/none.json"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        head = await http.head(url)
        assert head.headers["etag"] == etag
        for headers in ({}, {"Range": "bytes=-5"}):
            response = await http.get(url, headers=headers)
            assert (response.status_code, response.content) == (200, b""), headers
            for name in ("etag", "last-modified", "content-type", "cache-control",
                         "content-length", "accept-ranges", "x-content-type-options"):  # fmt: skip
                assert (name, response.headers.get(name)) == (name, head.headers[name]), headers
        await settled(proxy, engine)
