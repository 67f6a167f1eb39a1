"""asyncdl.contrib.fastapi.object_response under uvicorn on loopback, as browsers,
players, download managers and caches use it; and the engine pieces it stands on
(per-stream chunking, a HEAD through the budget)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

import asyncdl
from asyncdl.contrib.fastapi import EngineDep, lifespan, object_response
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import gets, payload
from .test_fastapi import uvicorn_serving

KiB = 1024
PART = 512 * KiB  # object_response's parts
SIZE = 3 * PART + 7


def make_app(config: asyncdl.TransferConfig) -> FastAPI:
    app = FastAPI(lifespan=lifespan(config=config))

    @app.api_route("/o/{bucket}/{key:path}", methods=["GET", "HEAD"])
    async def serve(
        bucket: str, key: str, request: Request, engine: EngineDep, name: str | None = None
    ) -> Response:
        return await object_response(engine, bucket, key, request, filename=name)

    return app


def claiming(app: Any, spec_version: str) -> Any:
    """``app`` told by its server that this is ASGI ``spec_version``: from 2.4 a
    server raises on a send after a disconnect, and Starlette stops listening for it."""

    async def claimed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, "asgi": {**scope.get("asgi", {}), "spec_version": spec_version}}
        await app(scope, receive, send)

    return claimed


@asynccontextmanager
async def serving(
    proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch, spec_version: str | None = None, **config: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, asyncdl.Engine, int]]:
    """The app under uvicorn; an httpx client to it, the app's engine, and its port."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    settings = {"max_concurrency": 4, "backoff_base": 0.01, **config}
    app = make_app(asyncdl.TransferConfig(**settings))
    served = app if spec_version is None else claiming(app, spec_version)
    async with (
        asyncio.timeout(120),
        uvicorn_serving(served) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client,
    ):
        yield client, app.state.asyncdl_engine, port


async def released(engine: asyncdl.Engine, within: float = 2.0) -> None:
    """Within ``within`` seconds: every slot of the budget free, no part fetched."""
    budget = engine._context.budget

    def fetching() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if "_launch" in repr(t.get_coro())]

    for _ in range(int(within * 100)):
        if budget.in_flight == 0 and not fetching():
            break
        await asyncio.sleep(0.01)
    assert budget.in_flight == 0
    assert fetching() == []


async def settled(proxy: TcpProxy, engine: asyncdl.Engine, within: float = 5.0) -> None:
    """Released, and within ``within`` seconds nothing in flight at the proxy."""
    await released(engine)
    for _ in range(int(within * 100)):
        if proxy.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert proxy.in_flight == 0


async def test_whole_object_and_ranges_byte_for_byte(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(SIZE)
    etag = s3.put_object(Bucket=bucket, Key="v/clip.mp4", Body=data)["ETag"]
    modified = s3.head_object(Bucket=bucket, Key="v/clip.mp4")["ResponseMetadata"]["HTTPHeaders"][
        "last-modified"
    ]
    url = f"/o/{bucket}/v/clip.mp4"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        whole = await http.get(url)
        assert whole.status_code == 200
        assert whole.content == data
        assert whole.headers["content-length"] == str(SIZE)
        assert whole.headers["etag"] == etag
        assert whole.headers["accept-ranges"] == "bytes"
        assert whole.headers["content-type"] == "video/mp4"  # stored without a type
        assert whole.headers["last-modified"] == modified
        assert "content-range" not in whole.headers
        assert "content-disposition" not in whole.headers

        cases = {
            "bytes=0-0": (0, 1),
            "bytes=10-20": (10, 21),
            f"bytes={PART - 5}-{PART + 5}": (PART - 5, PART + 6),  # across two parts
            f"bytes={PART + 3}-": (PART + 3, SIZE),
            "bytes=-100": (SIZE - 100, SIZE),
            f"bytes=-{10 * SIZE}": (0, SIZE),
            f"bytes={SIZE - 1}-{10 * SIZE}": (SIZE - 1, SIZE),
            "bytes = 5-9,": (5, 10),
        }
        for value, (start, end) in cases.items():
            response = await http.get(url, headers={"Range": value})
            assert response.status_code == 206, value
            assert response.content == data[start:end], value
            assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{SIZE}"
            assert response.headers["content-length"] == str(end - start)
            assert response.headers["etag"] == etag
            assert response.headers["accept-ranges"] == "bytes"

        for value in (f"bytes={SIZE}-", f"bytes={SIZE + 10}-{SIZE + 20}", "bytes=-0"):
            response = await http.get(url, headers={"Range": value})
            assert response.status_code == 416, value
            assert response.headers["content-range"] == f"bytes */{SIZE}"
            assert response.content == b""

        # Several ranges, another unit, or nonsense: the whole object.
        for value in ("bytes=0-1,5-6", "items=0-1", "bytes=9-1", "bytes=x-"):
            response = await http.get(url, headers={"Range": value})
            assert response.status_code == 200, value
            assert response.content == data

        # A range inside one part: one GET of exactly those bytes, nothing else.
        proxy.reset_stats()
        middle = await http.get(url, headers={"Range": f"bytes={PART + 100}-{PART + 199}"})
        assert middle.content == data[PART + 100 : PART + 200]
        assert [(r.method, r.range) for r in proxy.requests] == [
            ("GET", f"bytes={PART + 100}-{PART + 199}")
        ]
        # Seeking to the middle of a large object: the first GET starts there.
        proxy.reset_stats()
        async with http.stream("GET", url, headers={"Range": f"bytes={PART + 1}-"}) as seek:
            first = await anext(seek.aiter_raw())
        assert data[PART + 1 :].startswith(first)
        assert gets(proxy)[0].range == f"bytes={PART + 1}-{2 * PART}"
        await settled(proxy, engine)


async def test_conditional_requests(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(SIZE, seed=1)
    etag = s3.put_object(Bucket=bucket, Key="doc.bin", Body=data)["ETag"]
    head = s3.head_object(Bucket=bucket, Key="doc.bin")["ResponseMetadata"]["HTTPHeaders"]
    modified = head["last-modified"]
    other = '"0123456789abcdef0123456789abcdef"'
    url = f"/o/{bucket}/doc.bin"
    async with serving(proxy, monkeypatch) as (http, engine, _):

        async def get(headers: dict[str, str]) -> httpx.Response:
            proxy.reset_stats()
            return await http.get(url, headers=headers)

        # A cache revalidates: 304 after one HEAD, no GET sent to S3.
        for headers in (
            {"If-None-Match": etag},
            {"If-None-Match": f"{other}, W/{etag}"},
            {"If-None-Match": "*"},
            {"If-Modified-Since": modified},
        ):
            response = await get(headers)
            assert response.status_code == 304, headers
            assert response.content == b""
            assert response.headers["etag"] == etag
            assert [r.method for r in proxy.requests] == ["HEAD"]
        response = await get({"If-None-Match": other})
        assert (response.status_code, response.content) == (200, data)
        assert response.headers["etag"] == etag

        # If-Match: a wrong ETag is refused with 412 and no body.
        for headers in ({"If-Match": other}, {"If-Match": f"W/{etag}"}):
            response = await get(headers)
            assert (response.status_code, response.content) == (412, b""), headers
        response = await get({"If-Match": etag, "Range": "bytes=3-5"})
        assert (response.status_code, response.content) == (206, data[3:6])
        before = "Mon, 01 Jan 2001 00:00:00 GMT"
        assert (await get({"If-Unmodified-Since": before})).status_code == 412

        # If-Range: the range for the current ETag, else the whole object.
        response = await get({"If-Range": etag, "Range": "bytes=100-"})
        assert (response.status_code, response.content) == (206, data[100:])
        for validator in (other, f"W/{etag}", modified):
            response = await get({"If-Range": validator, "Range": "bytes=100-"})
            assert (response.status_code, response.content) == (200, data), validator
            assert "content-range" not in response.headers
        # A download manager resuming a file that changed since: the new whole object.
        changed = payload(SIZE, seed=2)
        s3.put_object(Bucket=bucket, Key="doc.bin", Body=changed)
        response = await get({"If-Range": etag, "Range": "bytes=100-"})
        assert (response.status_code, response.content) == (200, changed)
        assert response.headers["etag"] != etag
        await settled(proxy, engine)


async def test_head_sends_no_get(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(SIZE, seed=3)
    etag = s3.put_object(Bucket=bucket, Key="a/report.csv", Body=data, ContentType="text/csv")[
        "ETag"
    ]
    url = f"/o/{bucket}/a/report.csv"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        for headers in ({}, {"Range": "bytes=0-9"}):  # Range is for GET only
            proxy.reset_stats()
            response = await http.head(url, headers=headers)
            assert (response.status_code, response.content) == (200, b"")
            assert response.headers["content-length"] == str(SIZE)
            assert response.headers["etag"] == etag
            assert response.headers["content-type"] == "text/csv"
            assert response.headers["accept-ranges"] == "bytes"
            assert "last-modified" in response.headers
            assert [r.method for r in proxy.requests] == ["HEAD"]
        response = await http.head(url, headers={"If-None-Match": etag})
        assert response.status_code == 304
        response = await http.head(url, headers={"If-Match": '"nope"'})
        assert response.status_code == 412
        assert (await http.head(f"/o/{bucket}/missing")).status_code == 404
        await settled(proxy, engine)


async def test_content_type_and_disposition(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=bucket, Key="x/data.unknownext", Body=b"abc")
    s3.put_object(Bucket=bucket, Key="x/page", Body=b"<p>", ContentType="text/html")
    s3.put_object(Bucket=bucket, Key="x/empty.txt", Body=b"")
    async with serving(proxy, monkeypatch) as (http, engine, _):
        response = await http.get(f"/o/{bucket}/x/data.unknownext")
        assert response.headers["content-type"] == "application/octet-stream"
        response = await http.get(f"/o/{bucket}/x/page")
        assert response.headers["content-type"] == "text/html"
        name = 'Rapport d\'été "final".pdf'
        response = await http.get(f"/o/{bucket}/x/page", params={"name": name})
        assert response.headers["content-disposition"] == (
            'attachment; filename="Rapport d\'_t_ _final_.pdf"; '
            "filename*=UTF-8''Rapport%20d%27%C3%A9t%C3%A9%20%22final%22.pdf"
        )
        response = await http.get(f"/o/{bucket}/x/page", params={"name": "a.html"})
        assert response.headers["content-disposition"] == 'attachment; filename="a.html"'
        # The empty object: 200 with nothing; any range of it is unsatisfiable.
        response = await http.get(f"/o/{bucket}/x/empty.txt")
        assert (response.status_code, response.content) == (200, b"")
        assert response.headers["content-length"] == "0"
        assert response.headers["content-type"] == "text/plain"
        response = await http.get(f"/o/{bucket}/x/empty.txt", headers={"Range": "bytes=0-"})
        assert response.status_code == 416
        assert response.headers["content-range"] == "bytes */0"
        await settled(proxy, engine)


async def test_errors_say_nothing_of_the_bucket_or_key(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=bucket, Key="secret/key.bin", Body=payload(SIZE))
    url = f"/o/{bucket}/secret/key.bin"
    async with serving(proxy, monkeypatch, max_attempts=2) as (http, engine, _):

        async def answer(path: str, rule: Any = None, **kwargs: Any) -> httpx.Response:
            proxy.rule = rule
            try:
                return await http.get(path, **kwargs)
            finally:
                proxy.rule = None

        expected = [
            (answer(f"/o/{bucket}/secret/missing.bin"), 404, "Not Found"),
            (answer("/o/no-such-bucket-here/secret/key.bin"), 404, "Not Found"),
            (answer(url, lambda r: Fault(status=403, error_code="AccessDenied")), 403, "Forbidden"),
            (answer(url, lambda r: Fault(status=503, error_code="SlowDown")), 502, "Bad Gateway"),
            (
                answer(url, lambda r: Fault(status=412, error_code="PreconditionFailed")),
                503,
                "Service Unavailable",
            ),
            (answer(url, lambda r: Fault(reset=True)), 502, "Bad Gateway"),
            (answer(url, headers={"Range": "bytes=-5"}, rule=lambda r: Fault(status=403,
             error_code="AccessDenied")), 403, "Forbidden"),
        ]  # fmt: skip
        for pending, status, phrase in expected:
            response = await pending
            assert response.status_code == status
            assert response.json() == {"detail": phrase}
            for secret in (bucket, "secret", "key.bin", "no-such-bucket", "Traceback"):
                assert secret not in response.text
                assert all(secret not in value for value in response.headers.values())
        assert (await http.post(url)).status_code == 405
        await settled(proxy, engine)


async def test_a_checksum_mismatch_cuts_the_connection_before_the_last_byte(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = payload(SIZE, seed=4)
    s3.put_object(Bucket=bucket, Key="c.bin", Body=data, ChecksumAlgorithm="CRC32")
    url = f"/o/{bucket}/c.bin"
    async with serving(proxy, monkeypatch) as (http, engine, _):
        # The last part's GET delivers one wrong byte: every byte is sent but the
        # checksum fails after the last one.
        last = f"bytes={3 * PART}-"
        proxy.rule = lambda r: Fault(corrupt_at=3) if (r.range or "").startswith(last) else None
        received = bytearray()

        async def read_all() -> None:
            async with http.stream("GET", url) as response:
                assert response.status_code == 200
                assert response.headers["content-length"] == str(SIZE)
                async for piece in response.aiter_raw():
                    received.extend(piece)

        with pytest.raises(httpx.RemoteProtocolError, match="complete message"):
            await read_all()
        assert len(received) < SIZE  # the client cannot take it for a whole object
        assert bytes(received) == data[: len(received)]
        proxy.rule = None
        whole = await http.get(url)  # and the next one is right
        assert whole.content == data
        # A range is not checked (S3's checksum covers the whole object): its bytes
        # flow as they come, and a corrupted range is what the client gets.
        await settled(proxy, engine)


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_a_browser_sequence_leaves_nothing_in_flight(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch, spec_version: str
) -> None:
    size = 8 * PART + 3
    data = payload(size, seed=5)
    s3.put_object(Bucket=bucket, Key="movie.webm", Body=data)
    url = f"/o/{bucket}/movie.webm"
    request = f"GET {url} HTTP/1.1\r\nHost: app\r\nRange: bytes=0-\r\n\r\n".encode()
    budget = 2
    async with serving(proxy, monkeypatch, spec_version, max_concurrency=budget) as (
        http,
        engine,
        port,
    ):

        async def leave_after_the_headers() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 206")
            writer.close()
            await writer.wait_closed()

        async def leave_while_it_opens() -> None:
            proxy.rule = lambda r: Fault(delay=0.3)
            sent = len(proxy.requests)
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            while len(proxy.requests) == sent:  # noqa: ASYNC110 - the proxy has no event
                await asyncio.sleep(0.01)
            writer.close()
            await writer.wait_closed()
            proxy.rule = None

        async def play_and_seek() -> None:
            head = await http.head(url)
            assert head.headers["content-length"] == str(size)
            async with http.stream("GET", url, headers={"Range": "bytes=0-"}) as start:
                assert start.status_code == 206
                first = await anext(start.aiter_raw())
                assert data.startswith(first)
            # Parts after the seek's first are held 5 s by the proxy: the client leaves
            # while the stream waits on S3, with nothing to send that would fail.
            seek = 5 * PART + 11
            proxy.rule = lambda r: (
                Fault(delay=5) if r.range and not r.range.startswith(f"bytes={seek}-") else None
            )
            async with http.stream("GET", url, headers={"Range": f"bytes={seek}-"}) as middle:
                assert middle.headers["content-range"] == f"bytes {seek}-{size - 1}/{size}"
                got = bytearray()
                async for piece in middle.aiter_raw():
                    got += piece
                    if len(got) >= PART - 11:
                        break  # the first part read; the next ones wait at the proxy
                assert data[seek:].startswith(bytes(got))
            proxy.rule = None
            await released(engine)  # long before the held parts would have come

        for _ in range(3 * budget):
            await play_and_seek()
            await leave_after_the_headers()
            await leave_while_it_opens()
        await settled(proxy, engine, within=10)
        whole = await http.get(url)  # the budget is whole again
        assert whole.content == data
        await settled(proxy, engine)


async def test_many_clients_at_once_stay_within_the_budget(
    s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 2 * PART + 1
    data = payload(size, seed=6)
    s3.put_object(Bucket=bucket, Key="shared.bin", Body=data)
    url = f"/o/{bucket}/shared.bin"
    async with serving(proxy, monkeypatch, max_concurrency=4) as (http, engine, _):
        proxy.reset_stats()

        async def client(number: int) -> bool:
            start = number * 997
            response = await http.get(url, headers={"Range": f"bytes={start}-"})
            assert response.status_code == 206
            return response.content == data[start:]

        assert all(await asyncio.gather(*(client(n) for n in range(20))))
        assert proxy.max_in_flight <= 4
        await settled(proxy, engine)


async def test_a_stream_takes_its_own_chunk_size_and_prefetch(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(1024 * KiB + 5, seed=7)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.reset_stats()
    async with engine.stream(bucket, "k", chunk_size=256 * KiB, prefetch=1) as stream:
        assert b"".join([piece async for piece in stream]) == data
    assert [r.range for r in gets(proxy)] == [
        "bytes=0-262143",
        "bytes=262144-524287",
        "bytes=524288-786431",
        "bytes=786432-1048575",
        "bytes=1048576-1048580",
    ]
    assert proxy.max_in_flight <= 2  # one part at a time (and the checksum HEAD)
    proxy.reset_stats()
    for bad in ({"chunk_size": 1000}, {"chunk_size": True}, {"prefetch": 0}):
        with pytest.raises(asyncdl.InvalidRequestError):
            engine.stream(bucket, "k", **bad)
    assert proxy.requests == []


async def test_engine_head(engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy) -> None:
    etag = s3.put_object(Bucket=bucket, Key="h.json", Body=b"{}", ContentType="application/json")[
        "ETag"
    ]
    proxy.reset_stats()
    info = await engine.head(bucket, "h.json")
    assert (info.size, info.etag) == (2, etag)
    assert info.headers["content-type"] == "application/json"
    assert "last-modified" in info.headers
    assert [r.method for r in proxy.requests] == ["HEAD"]
    with pytest.raises(asyncdl.ObjectNotFoundError):
        await engine.head(bucket, "nope")
    with pytest.raises(asyncdl.InvalidRequestError):
        await engine.head(bucket, "")


async def test_a_first_answer_larger_than_asked_is_cut_to_the_range(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # s3rver answers "Range: bytes=0-0" with the whole object (206, "bytes 0-999/1000"):
    # a stream of one byte must yield one byte, not a failure nor the whole object.
    data = payload(1000, seed=8)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    whole = (206, {"Content-Range": "bytes 0-999/1000", "Content-Length": "1000", "ETag": etag})
    proxy.rule = lambda r: Fault(reply=(*whole, data)) if r.range == "bytes=0-0" else None
    async with engine.stream(bucket, "k", end=1) as stream:
        assert [piece async for piece in stream] == [data[:1]]
    assert (stream.size, stream.length) == (1000, 1)
    # More than asked but not all that is wanted: refused, not mixed up.
    short = (206, {"Content-Range": "bytes 0-70000/200000", "Content-Length": "70001"})
    proxy.rule = lambda r: Fault(reply=(*short, bytes(70001)))
    with pytest.raises(asyncdl.DownloadError, match="Content-Range"):
        await engine.stream(bucket, "k").open()
    await released(engine)


async def test_the_apps_own_mistakes_raise_before_any_request(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy
) -> None:
    request = Request({"type": "http", "method": "GET", "headers": [], "query_string": b""})
    for bad, error in (
        ({"chunk_size": 1000}, asyncdl.InvalidRequestError),
        ({"prefetch": 0}, asyncdl.InvalidRequestError),
        ({"filename": ""}, ValueError),
        ({"filename": b"a.txt"}, ValueError),
    ):
        with pytest.raises(error):
            await object_response(engine, bucket, "k", request, **bad)
    assert proxy.requests == []
