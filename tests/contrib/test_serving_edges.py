"""Serving at its edges: keys that read as URLs, the validators of an empty object (S3's
416 carries none), a store that sends no length, an object that shrinks between the
HEAD and the GET, and list fields (RFC 9110 §5.3, §5.6.1, §13)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any
from urllib.parse import quote

import pytest

from asyncdl.testing.tcp_proxy import Fault

from ..conftest import payload
from .test_object_response import serving, settled

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.domain)</script></svg>'


async def test_a_key_read_as_a_data_url_never_gives_its_type(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mimetypes.guess_type() takes the key as a URL: a key "data:<type>,..." makes
    the guess any type the uploader writes; "xml" not in guessed is case-sensitive,
    and MIME types are not (RFC 9110 §8.3.1), so image/svg+XML passes the filter."""
    key = "data:image/svg+XML,avatar"
    s3.put_object(Bucket=bucket, Key=key, Body=SVG)  # stored without a type
    async with serving(proxy, monkeypatch) as (http, engine, _):
        response = await http.get(f"/o/{bucket}/{quote(key)}")
        assert response.status_code == 200
        assert response.headers["content-type"].lower() != "image/svg+xml", (
            "guessed active type served inline: " + response.headers["content-type"]
        )
        await settled(proxy, engine)


async def test_a_key_read_as_a_data_url_of_a_non_latin1_type_is_no_500(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "data:image/\u6587,x"  # the guess is "image/文": Starlette cannot encode it
    s3.put_object(Bucket=bucket, Key=key, Body=b"abc")
    async with serving(proxy, monkeypatch) as (http, engine, _):
        for method in ("GET", "HEAD"):
            response = await http.request(method, f"/o/{bucket}/{quote(key)}")
            assert response.status_code == 200, method
        await settled(proxy, engine)


async def test_conditions_on_an_empty_object_are_judged_with_its_etag(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers the ranged GET of an empty object with a 416 that has no ETag: the
    code takes that answer's (empty) validators as the object's unless the answer it
    gives equals the one it prepared, so If-Match/If-Range are judged against no ETag."""
    etag = s3.put_object(Bucket=bucket, Key="e.json", Body=b"", ContentType="application/json")[
        "ETag"
    ]
    url = f"/o/{bucket}/e.json"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        head = await http.head(url, headers={"If-Match": etag})
        assert head.status_code == 200
        # §13.1.1: the ETag matches, the condition is true; HEAD agrees (§9.3.2).
        got = await http.get(url, headers={"If-Match": etag})
        assert got.status_code == 200, f"If-Match with the object's own ETag: {got.status_code}"
        await settled(proxy, engine)


async def test_if_range_on_an_empty_object(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    etag = s3.put_object(Bucket=bucket, Key="e.json", Body=b"", ContentType="application/json")[
        "ETag"
    ]
    url = f"/o/{bucket}/e.json"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        plain = await http.get(url, headers={"Range": "bytes=0-"})
        assert plain.status_code == 416
        # §13.1.5: If-Range matches -> the Range is processed as without it: 416 too.
        matching = await http.get(url, headers={"Range": "bytes=0-", "If-Range": etag})
        other = await http.get(url, headers={"Range": "bytes=0-", "If-Range": '"other"'})
        # A 200 must carry the fields of the HEAD's 200 (item 11, §9.3.2).
        head = await http.head(url)
        problems = []
        if matching.status_code != 416:
            problems.append(f"If-Range matching: {matching.status_code}, want 416")
        for name in ("etag", "last-modified", "content-type"):
            if other.headers.get(name) != head.headers.get(name):
                problems.append(
                    f"If-Range other: {name}={other.headers.get(name)!r}, "
                    f"HEAD has {head.headers.get(name)!r}"
                )
        assert not problems, "; ".join(problems)
        await settled(proxy, engine)


async def test_a_range_at_the_end_with_if_match_is_a_416(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same root on a non-empty object: a range that starts at its end is also a
    416 without an ETag, taken as the object's validators."""
    data = payload(1000)
    etag = s3.put_object(Bucket=bucket, Key="n.bin", Body=data)["ETag"]
    url = f"/o/{bucket}/n.bin"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        a = await http.get(url, headers={"Range": "bytes=1000-", "If-Match": etag})
        b = await http.get(url, headers={"Range": "bytes=1000-", "If-Range": etag})
        assert b.status_code == 416  # holds (after three tries of the loop)
        # §13.2.2: If-Match holds (same ETag), so Range is evaluated: 416, not 412.
        assert a.status_code == 416, f"If-Match with the object's own ETag: {a.status_code}"
        await settled(proxy, engine)


async def test_a_store_that_ignores_range_and_sends_no_length_is_no_500_and_holds_nothing(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine reads such an answer to its end: stream.size is
    None after open(), `assert stream.size is not None` raises, and nothing closes the
    stream: its budget slot stays taken. Two such requests and the app hangs."""
    s3.put_object(Bucket=bucket, Key="c.bin", Body=payload(5000))
    s3.put_object(Bucket=bucket, Key="ok.txt", Body=b"fine")
    async with serving(proxy, monkeypatch, max_attempts=1, max_concurrency=2) as (
        http,
        engine,
        _,
    ):
        proxy.rule = lambda r: (
            Fault(headers={"range": None}, chunked=True)
            if r.method == "GET" and r.path.endswith("c.bin")
            else None
        )
        statuses = []
        for _ in range(2):
            statuses.append((await http.get(f"/o/{bucket}/c.bin")).status_code)
        in_flight = engine._context.budget.in_flight
        innocent: int | str = "hung"
        with contextlib.suppress(TimeoutError):
            innocent = (await asyncio.wait_for(http.get(f"/o/{bucket}/ok.txt"), 5)).status_code
        proxy.rule = None
        gc.collect()
        # Not a 500 (a 502 "the store failed" or the body read to its end are both
        # fine), nothing left held, and the app still answers others.
        assert (500 in statuses, in_flight, innocent) == (False, 0, 200), (
            statuses,
            in_flight,
            innocent,
        )


async def test_an_object_that_shrinks_between_head_and_get_is_no_400(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=bucket, Key="s.bin", Body=payload(1000))
    async with serving(proxy, monkeypatch) as (http, engine, _):

        def rule(r: Any) -> Fault | None:
            if r.method == "GET":
                proxy.rule = None
                return Fault(
                    before=lambda: s3.put_object(
                        Bucket=bucket, Key="s.bin", Body=payload(500, seed=3)
                    )
                )
            return None

        proxy.rule = rule
        response = await http.get(f"/o/{bucket}/s.bin", headers={"Range": "bytes=-100"})
        # The request is valid: the answer is about the object as it now is (206 of
        # its last 100 bytes), never 400 (RFC 9110 §15.5.1: the client's error).
        assert response.status_code != 400
        await settled(proxy, engine)


async def test_list_fields_over_several_lines_and_with_empty_elements(
    s3: Any, bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    etag = s3.put_object(Bucket=bucket, Key="o.bin", Body=b"Z")["ETag"]
    url = f"/o/{bucket}/o.bin"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        got = {}
        # §5.3: several field lines are one list, as if joined with commas.
        got["If-Match split"] = (
            await http.get(url, headers=[("If-Match", '"x"'), ("If-Match", etag)])
        ).status_code
        # §5.6.1: a recipient MUST parse and ignore empty list elements.
        got["If-Match empty elem"] = (
            await http.get(url, headers={"If-Match": f", {etag}"})
        ).status_code
        # §13.1.3: more than one member -> If-Modified-Since is ignored (200).
        got["IMS twice"] = (
            await http.get(
                url,
                headers=[
                    ("If-Modified-Since", "Sun, 06 Nov 2100 08:49:37 GMT"),
                    ("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ],
            )
        ).status_code
        assert got == {"If-Match split": 200, "If-Match empty elem": 200, "IMS twice": 200}
        await settled(proxy, engine)
