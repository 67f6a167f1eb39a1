"""Attacks on how a ``get_object`` answer's close-delimited body is judged (the handler
``note_endings`` on ``before-parse.s3.GetObject``), above all on a client handed to the
engine: several engines on it, engines opened and closed, the caller's own calls on it,
a client that checks response checksums itself, other handlers on the same event, and
the engine's close while a body is read.

Each server is a real one on loopback (TLS where a truncation is the point) that runs
a script per connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import asyncdl
from asyncdl._wire import body_endings, clients, own_http

from ..conftest import CHUNK, make_client, payload
from .test_aiohttp_cut_bodies import SCENARIOS, _range_of, play
from .test_own_http_attack import BODY, _Scripted, reset
from .test_tls_truncation import truncate
from .test_url_session import certificate

#: An object small enough to come whole in the first read of its answer.
TINY = payload(40, seed=7)

HEAD = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n'


@pytest.fixture(autouse=True)
def _settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials (nothing checks them), no proxy, and S3 GETs on aiohttp."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(own_http, "ENABLED", False)


def _config(**settings: Any) -> asyncdl.TransferConfig:
    return asyncdl.TransferConfig(
        **{"lean_get": False, "read_timeout": 2.0, "max_attempts": 2, "backoff_base": 0.01}
        | settings
    )


def _truncating(data: bytes, extra: bytes = b"") -> Any:
    """A script whose first answer is half of ``data`` then a TLS truncation (at once
    for a tiny body: the bytes and the end come together), every later one ``data``
    then a clean close; ``extra`` are more header lines."""

    gets = 0

    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        nonlocal gets
        request = await server_of[script].head(reader)
        head = HEAD + extra
        if request.startswith(b"HEAD "):
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(data))
            await writer.drain()
            return
        gets += 1
        head += b"\r\n"
        if gets == 1:
            writer.write(head + data[: len(data) // 2])
            await writer.drain()
            if len(data) > len(TINY):
                await asyncio.sleep(0.05)
            truncate(writer)
        else:
            writer.write(head + data)
            await writer.drain()

    return script


server_of: dict[Any, _Scripted] = {}


@contextlib.asynccontextmanager
async def _tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: Any) -> Any:
    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    async with _Scripted(script, tls=tls) as server:
        server_of[script] = server
        try:
            yield server
        finally:
            del server_of[script]


async def _read_all(stream: Any) -> bytes:
    return b"".join([piece async for piece in stream])


async def _stream_after_it_came(engine: asyncdl.Engine) -> bytes:
    """A stream opened, read only once its first answer came whole and its connection
    ended."""
    async with engine.stream("b", "k") as stream:
        await stream.open()
        await asyncio.sleep(0.3)
        return await _read_all(stream)


# -- several engines on one borrowed client -----------------------------------------------


@pytest.mark.parametrize("data", [TINY, BODY], ids=["tiny", "large"])
async def test_a_second_engine_still_catches_a_truncation_once_the_first_closed(
    data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        _tls_server(tmp_path, monkeypatch, _truncating(data)) as server,
        make_client(server.endpoint) as client,
    ):
        first = asyncdl.Engine(client, config=_config())
        second = asyncdl.Engine(client, config=_config())
        async with second:
            async with first:
                pass
            with pytest.raises(asyncdl.DownloadError, match="close_notify"):
                await _stream_after_it_came(second)
            # A download on it is fetched again, never written short.
            await second.download("b", "k", tmp_path / "k")
        assert (tmp_path / "k").read_bytes() == data


async def test_engines_opened_and_closed_on_a_client_leave_one_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    noted = body_endings.note_body_ending
    monkeypatch.setattr(clients, "note_body_ending", lambda body: calls.append(noted(body)))

    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(HEAD + b"Content-Length: 40\r\n\r\n" + TINY)
        await writer.drain()

    async with _Scripted(script) as server, make_client(server.endpoint) as client:
        for _ in range(5):
            async with asyncdl.Engine(client, config=_config()):
                pass
        answer = await client.get_object(Bucket="b", Key="k")
        async with answer["Body"] as body:
            assert await body.read() == TINY
    assert len(calls) == 1


# -- the caller's own calls on a borrowed client ------------------------------------------


def _own_calls_script(server_box: list[_Scripted]) -> Any:
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        head = await server_box[0].head(reader)
        path = head.split(b" ", 2)[1]
        if head.startswith(b"HEAD "):
            writer.write(HEAD + b"Content-Length: 100000\r\n\r\n")
        elif path.endswith(b"/delimited"):
            writer.write(HEAD + b"\r\n" + BODY)  # then a clean close
        elif path.endswith(b"/length"):
            writer.write(HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
        elif path.endswith(b"/missing"):
            error = b"<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>"
            writer.write(b"HTTP/1.1 404 Not Found\r\n\r\n" + error)  # close-delimited
        elif path.endswith(b"/busy"):
            error = b"<Error><Code>InternalError</Code><Message>busy</Message></Error>"
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n" + error)
        elif path.endswith(b"/cut"):
            writer.write(HEAD + b"\r\n" + BODY[:1000])
            await writer.drain()
            await asyncio.sleep(0.05)
            reset(writer)
            return
        await writer.drain()

    return script


async def _own_calls(client: Any) -> dict[str, Any]:
    """What the caller's own calls give: each body as read, each error's code."""
    seen: dict[str, Any] = {}
    for key in ("delimited", "length"):
        answer = await client.get_object(Bucket="b", Key=key)
        async with answer["Body"] as body:
            seen[key] = await body.read()
        answer = await client.get_object(Bucket="b", Key=key)
        async with answer["Body"] as body:
            seen[key + " chunks"] = b"".join([c async for c in body.iter_chunks(4096)])
    for key in ("missing", "busy"):
        with pytest.raises(ClientError) as caught:
            await client.get_object(Bucket="b", Key=key)
        seen[key] = caught.value.response["Error"]["Code"]
    seen["head"] = (await client.head_object(Bucket="b", Key="length"))["ContentLength"]
    answer = await client.get_object(Bucket="b", Key="cut")
    async with answer["Body"] as body:
        try:
            seen["cut"] = len(await body.read())
        except Exception as exc:  # aiobotocore's own behaviour, whatever it is
            seen["cut"] = type(exc).__name__
    return seen


async def test_the_caller_s_own_calls_on_a_borrowed_client_are_unchanged() -> None:
    box: list[_Scripted] = []
    async with _Scripted(_own_calls_script(box)) as server:
        box.append(server)
        async with make_client(server.endpoint) as client:
            before = await _own_calls(client)  # no engine ever on it
        async with make_client(server.endpoint) as client:
            async with asyncdl.Engine(client, config=_config()):
                during = await _own_calls(client)
            after = await _own_calls(client)
    assert before["delimited"] == before["length"] == BODY
    assert before["missing"] == "NoSuchKey"
    assert before["busy"] == "InternalError"
    assert during == before
    assert after == before


# -- a borrowed client that checks response checksums itself ------------------------------


def _crc32(data: bytes) -> bytes:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big"))


@pytest.mark.parametrize("data", [TINY, BODY], ids=["tiny", "large"])
async def test_a_truncation_on_a_client_that_checks_checksums_is_never_written_short(
    data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore wraps the body in its checksum check (a body the reader does not look
    # under): the truncated body's checksum is wrong. A download fetches it again.
    extra = b"x-amz-checksum-crc32: " + _crc32(data) + b"\r\n"
    async with (
        _tls_server(tmp_path, monkeypatch, _truncating(data, extra)) as server,
        make_client(server.endpoint, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=_config()) as engine,
    ):
        await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    # The engine asks a client that checks checksums for the object's head first.
    methods = [head.split(b" ", 1)[0] for head in server.heads]
    assert methods == [b"HEAD", b"GET", b"HEAD", b"GET"]


@pytest.mark.parametrize("data", [TINY, BODY], ids=["tiny", "large"])
async def test_a_truncated_stream_on_a_client_that_checks_checksums_fails(
    data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = b"x-amz-checksum-crc32: " + _crc32(data) + b"\r\n"
    async with (
        _tls_server(tmp_path, monkeypatch, _truncating(data, extra)) as server,
        make_client(server.endpoint, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=_config(max_attempts=1)) as engine,
    ):
        with pytest.raises(asyncdl.DownloadError):
            await _stream_after_it_came(engine)


# -- another handler on the same event ----------------------------------------------------


async def _yields(**_: Any) -> None:
    """A caller's own handler that gives the loop turns (aiobotocore awaits it)."""
    await asyncio.sleep(0.2)


@pytest.mark.parametrize("event", ["before-parse.s3.GetObject", "before-parse"])
@pytest.mark.parametrize("when", ["before", "after", "first"])
@pytest.mark.parametrize("data", [TINY, BODY], ids=["tiny", "large"])
async def test_a_caller_s_handler_that_yields_on_the_event_does_not_hide_a_truncation(
    data: bytes, when: str, event: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller's own before-parse handler, registered before the engine's or after,
    # gives the loop turns (an async one: aiobotocore awaits it): the connection of a
    # body that came whole ends meanwhile. The engine's handler runs first, unless the
    # caller's was registered first before the engine opened: then how the TLS ended
    # was not seen, and the body is not taken as whole.
    async with (
        _tls_server(tmp_path, monkeypatch, _truncating(data)) as server,
        make_client(server.endpoint) as client,
    ):
        if when == "before":
            client.meta.events.register(event, _yields)
        elif when == "first":
            client.meta.events.register_first(event, _yields)
        async with asyncdl.Engine(client, config=_config(max_attempts=1)) as engine:
            if when == "after":
                client.meta.events.register(event, _yields)
            with pytest.raises(asyncdl.DownloadError, match="close_notify"):
                await _stream_after_it_came(engine)


async def test_a_caller_s_first_handler_that_yields_makes_no_short_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller's handler runs before the engine's, and yields: a tiny body's TLS has
    # ended, unseen, before anyone looked. Neither the truncated answer nor the whole
    # one after it is taken as whole: the download fails, and leaves no file.
    async with (
        _tls_server(tmp_path, monkeypatch, _truncating(TINY)) as server,
        make_client(server.endpoint) as client,
    ):
        client.meta.events.register_first("before-parse.s3.GetObject", _yields)
        async with asyncdl.Engine(client, config=_config()) as engine:
            with pytest.raises(asyncdl.DownloadError, match="was not seen"):
                await engine.download("b", "k", tmp_path / "k")
    assert sorted(os.listdir(tmp_path)) == ["origin.key", "origin.pem"]  # no file, no temp


# -- the engine's close while a body is read ----------------------------------------------


@pytest.mark.parametrize("borrowed", [False, True], ids=["own client", "borrowed"])
async def test_closing_the_engine_fails_a_close_delimited_stream_being_read(
    borrowed: bool, tmp_path: Path
) -> None:
    # The engine closes while the caller reads a stream whose body only the connection's
    # end delimits: the stream fails, it never ends as if whole.
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(HEAD + b"\r\n" + BODY[:1000])
        await writer.drain()
        await reader.read()  # until the client hangs up

    async with _Scripted(script) as server, contextlib.AsyncExitStack() as stack:
        if borrowed:
            client = await stack.enter_async_context(make_client(server.endpoint))
            engine = asyncdl.Engine(client, config=_config())
        else:
            engine = asyncdl.Engine(
                endpoint_url=server.endpoint, region="us-east-1", config=_config()
            )
        await engine.__aenter__()
        got: list[bytes] = []
        with pytest.raises(asyncdl.DownloadError):
            await _read_closing(engine, got, engine.aclose)
        assert b"".join(got) == BODY[:1000]


async def _read_closing(
    engine: asyncdl.Engine, got: list[bytes], close: Callable[[], Awaitable[Any]]
) -> None:
    """Read a stream into ``got``, calling ``close`` once 1,000 bytes came."""
    async with engine.stream("b", "k") as stream:
        async for piece in stream:
            got.append(piece)
            if sum(map(len, got)) >= 1000:
                await close()


@pytest.mark.parametrize("borrowed", [False, True], ids=["own client", "borrowed"])
async def test_closing_the_engine_mid_body_writes_no_file(borrowed: bool, tmp_path: Path) -> None:
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(HEAD + b"\r\n" + BODY[:1000])
        await writer.drain()
        await reader.read()

    async with _Scripted(script) as server, contextlib.AsyncExitStack() as stack:
        if borrowed:
            client = await stack.enter_async_context(make_client(server.endpoint))
            engine = asyncdl.Engine(client, config=_config())
        else:
            engine = asyncdl.Engine(
                endpoint_url=server.endpoint, region="us-east-1", config=_config()
            )
        async with engine:
            download = asyncio.ensure_future(engine.download("b", "k", tmp_path / "k"))
            for _ in range(200):
                if server.requests:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
        done = await asyncio.gather(download, return_exceptions=True)
    assert isinstance(done[0], BaseException), done
    assert os.listdir(tmp_path) == []


async def test_a_wrong_checksum_on_a_body_that_closed_cleanly_is_still_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a cut: the server closed cleanly, its bytes are not the object's.
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        request = await server.head(reader)
        head = HEAD + b"x-amz-checksum-crc32: " + _crc32(b"other") + b"\r\n"
        if request.startswith(b"HEAD "):
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(BODY))
        else:
            writer.write(head + b"\r\n" + BODY)
        await writer.drain()

    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    async with (
        _Scripted(script, tls=tls) as server,
        make_client(server.endpoint, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=_config()) as engine,
    ):
        with pytest.raises(asyncdl.ChecksumError):
            await engine.download("b", "k", tmp_path / "k")
    assert not (tmp_path / "k").exists()


async def test_a_reset_on_a_client_that_checks_checksums_is_fetched_again(
    tmp_path: Path,
) -> None:
    extra = b"x-amz-checksum-crc32: " + _crc32(BODY) + b"\r\n"
    gets = 0

    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        nonlocal gets
        request = await server.head(reader)
        if request.startswith(b"HEAD "):
            writer.write(HEAD + extra + b"Content-Length: %d\r\n\r\n" % len(BODY))
            await writer.drain()
            return
        gets += 1
        writer.write(HEAD + extra + b"\r\n" + (BODY[:1000] if gets == 1 else BODY))
        await writer.drain()
        if gets == 1:
            await asyncio.sleep(0.05)
            reset(writer)

    async with (
        _Scripted(script) as server,
        make_client(server.endpoint, response_checksum_validation="when_supported") as client,
        asyncdl.Engine(client, config=_config()) as engine,
    ):
        await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert gets == 2


# -- how a connection ends, on a borrowed client ------------------------------------------


@pytest.mark.parametrize("capped", [False, True], ids=["uncapped", "capped"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_how_a_connection_ends_decides_on_a_borrowed_client_too(
    scenario: str, capped: bool, tmp_path: Path
) -> None:
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        await play(scenario, server, n, reader, writer)

    data = TINY if scenario.startswith("tiny") else BODY
    settings = {"max_bandwidth": 400_000} if capped else {}
    async with (
        _Scripted(script) as server,
        make_client(server.endpoint) as client,
        asyncdl.Engine(client, config=_config(**settings)) as engine,
    ):
        result = await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.size == len(data)
    assert server.requests == SCENARIOS[scenario]


# -- a multi-part download's parts, on a borrowed client ----------------------------------


@pytest.mark.parametrize("tiny_tail", [False, True], ids=["parts", "tiny last part"])
async def test_each_part_truncated_once_is_fetched_again_on_a_borrowed_client(
    tiny_tail: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranged parts (206) that only their connection's end delimits, each one's first
    # answer cut by a TLS truncation half-way (a tiny last part: the bytes and the end
    # together), fetched in parallel; a part resumes from what it wrote.
    data = payload(4 * CHUNK + (40 if tiny_tail else CHUNK // 2), seed=3)
    cut_once: set[tuple[int, int]] = set()

    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        first, last = _range_of(await server.head(reader), len(data))
        part = data[first : last + 1]
        status = f"206 Partial Content\r\nContent-Range: bytes {first}-{last}/{len(data)}"
        head = f'HTTP/1.1 {status}\r\nETag: "v1"\r\n\r\n'.encode()
        if first % CHUNK == 0 and (first, last) not in cut_once:  # not a resumed part
            cut_once.add((first, last))
            writer.write(head + part[: len(part) // 2])
            await writer.drain()
            if len(part) > 40:
                await asyncio.sleep(0.05)
            truncate(writer)
            return
        writer.write(head + part)
        await writer.drain()

    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    target = tmp_path / "out" / "k"
    target.parent.mkdir()
    async with (
        _Scripted(script, tls=tls) as server,
        make_client(server.endpoint) as client,
        asyncdl.Engine(client, config=_config(chunk_size=CHUNK, max_concurrency=4)) as engine,
    ):
        result = await engine.download("b", "k", target)
    assert target.read_bytes() == data
    assert result.size == len(data)
    # Each part was cut once (the first GET's retry may ask for the whole object).
    assert len(cut_once) >= 5
    assert server.requests > len(cut_once)


async def test_closing_a_borrowed_client_fails_a_close_delimited_stream_being_read() -> None:
    # The caller closes its client (its HTTP session with it) while a stream of an engine
    # on it is being read: not the server's end of the body.
    async def script(n: int, reader: Any, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(HEAD + b"\r\n" + BODY[:1000])
        await writer.drain()
        await reader.read()

    async with _Scripted(script) as server:
        client = await make_client(server.endpoint).__aenter__()
        got: list[bytes] = []
        async with asyncdl.Engine(client, config=_config(max_attempts=1)) as engine:
            with pytest.raises(asyncdl.DownloadError):
                await _read_closing(engine, got, lambda: client.__aexit__(None, None, None))
    assert b"".join(got) == BODY[:1000]
