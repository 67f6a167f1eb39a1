"""aiohttp's answers (URL downloads, GETs through a proxy, ``ASYNCDL_OWN_HTTP=0``) whose
body only the connection's end delimits: a clean close ends such a body (RFC 9112
§6.3), a reset cuts it. aiohttp ends the body at either (its protocol feeds the parser
its end whatever ended the connection), so the engine asks the connection how it ended
and fetches a cut body again rather than write it short.

The server is a real one on loopback that runs a script per connection.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

import asyncdl
from asyncdl._wire import own_http

from ..conftest import payload
from .test_own_http_attack import BODY, Script, _engine, _Scripted, reset


def _script(server_box: list[_Scripted], cut_first: bool) -> Script:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server_box[0].head(reader)
        head = b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n\r\n'
        if n == 1 and cut_first:
            writer.write(head + BODY[: len(BODY) // 10])
            await writer.drain()
            await asyncio.sleep(0.05)
            reset(writer)
        else:
            writer.write(head + BODY)
            await writer.drain()

    return script


@pytest.mark.parametrize("cut_first", [True, False], ids=["reset-then-whole", "clean-close"])
async def test_a_url_body_cut_by_a_reset_is_fetched_again_not_written_short(
    tmp_path: Path, cut_first: bool
) -> None:
    box: list[_Scripted] = []
    async with _Scripted(_script(box, cut_first)) as server:
        box.append(server)
        async with _engine(server.endpoint) as engine:
            result = await engine.download_url(server.endpoint + "/b/k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert result.size == len(BODY)
    assert server.requests == (2 if cut_first else 1)


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("cut_first", [True, False], ids=["reset-then-whole", "clean-close"])
async def test_an_s3_body_on_aiohttp_cut_by_a_reset_is_fetched_again_not_written_short(
    tmp_path: Path, cut_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(own_http, "ENABLED", False)
    box: list[_Scripted] = []
    async with _Scripted(_script(box, cut_first)) as server:
        box.append(server)
        async with _engine(server.endpoint) as engine:
            result = await engine.download("b", "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == BODY
    assert result.size == len(BODY)
    assert server.requests == (2 if cut_first else 1)


# -- timing, on every way a GET takes ---------------------------------------------------

#: An object small enough to come whole in the first read of its answer.
TINY = payload(40, seed=7)

#: Every way a GET takes: an S3 GET on the engine's own client, on aiohttp and through
#: botocore's ``get_object`` (``lean_get=False``), a URL download, and each of the S3 GET
#: on aiohttp and the URL download through an HTTP proxy (the server is the proxy: it
#: answers the absolute-form request itself).
WAYS = ["own", "aiohttp", "get_object", "url", "s3 proxy", "url proxy"]


def _engine_for(
    way: str, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncdl.Engine, str]:
    """An engine that takes ``way`` to the server at ``endpoint``, and the endpoint it
    is to use."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    if "proxy" in way:
        monkeypatch.setenv("HTTP_PROXY", endpoint)
        endpoint = "http://127.0.0.1:9"  # no one listens: every byte goes through the proxy
    monkeypatch.setattr(own_http, "ENABLED", way == "own")
    # A bandwidth cap: the reader is slow, so a cut can come while it waits (and while the
    # own client has stopped reading its socket), not only while it reads.
    return _engine(endpoint, max_bandwidth=400_000, lean_get=way != "get_object"), endpoint


async def _download(way: str, engine: asyncdl.Engine, endpoint: str, target: Path) -> int:
    """Download the object ``way`` says; the number of bytes the engine reported."""
    if way.startswith("url"):
        result = await engine.download_url(endpoint + "/b/k", target)
    else:
        result = await engine.download("b", "k", target)
    assert result.size is not None
    return result.size


async def _fetch(way: str, endpoint: str, target: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    engine, endpoint = _engine_for(way, endpoint, monkeypatch)
    async with engine:
        return await _download(way, engine, endpoint, target)


def _range_of(head: bytes, size: int) -> tuple[int, int]:
    """The first and last byte a request's head asks for (the whole object without Range)."""
    match = re.search(rb"\r\nrange: bytes=(\d+)-(\d*)\r\n", head, re.IGNORECASE)
    if match is None:
        return 0, size - 1
    return int(match[1]), min(int(match[2] or size - 1), size - 1)


def _answer(scenario: str, head: bytes, n: int) -> tuple[bytes, bool]:
    """The bytes the server sends on its ``n``-th connection, and whether a reset ends
    them (else a clean close: the connection's end after the script's)."""
    cut = n == 1 and not scenario.endswith("clean")
    data = TINY if scenario.startswith("tiny") else BODY
    if scenario.startswith("206"):
        first, last = _range_of(head, len(data))
        part = data[first : last + 1]
        sent = part[: len(part) // 3] if cut else part
        status = f"206 Partial Content\r\nContent-Range: bytes {first}-{last}/{len(data)}"
        return (f'HTTP/1.1 {status}\r\nETag: "v1"\r\n\r\n'.encode() + sent), cut
    if scenario.startswith("length"):
        # A length, and the server's word that it closes: whole at its length, whatever
        # ends the connection after it.
        head_out = f'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Length: {len(data)}\r\n'
        return (head_out + "Connection: close\r\n\r\n").encode() + data, cut
    sent = data[: len(data) * 9 // 10] if cut else data
    return b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n\r\n' + sent, cut


#: What the first answer is, and how its connection ends: each cut one must be fetched
#: again (resumed, for a 206), never written short; each clean one fetched once.
SCENARIOS = {
    # The reset right behind the last bytes sent: it reaches the client in the read that
    # takes them, or the next.
    "same-read": 2,
    # A whole answer in the first read, reset right after, before the reader starts.
    "tiny": 2,
    "tiny clean": 1,
    # A ranged part that only the connection's end delimits.
    "206": 2,
    "206 clean": 1,
    # A length and Connection: close, the connection reset once the body came whole.
    "length": 1,
    "length clean": 1,
}


async def play(
    scenario: str,
    server: _Scripted,
    n: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answer the request on ``server``'s ``n``-th connection as ``scenario`` says
    (:data:`SCENARIOS`): its bytes, then a reset or a clean close."""
    answer, cut = _answer(scenario, await server.head(reader), n)
    writer.write(answer)
    if cut and scenario not in ("same-read", "tiny"):
        await writer.drain()
        await asyncio.sleep(0.05)
    if cut:
        reset(writer)
    else:
        await writer.drain()


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("way", WAYS)
async def test_how_a_connection_ends_decides_whether_its_body_is_whole(
    way: str, scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await play(scenario, server, n, reader, writer)

    data = TINY if scenario.startswith("tiny") else BODY
    async with _Scripted(script) as server:
        size = await _fetch(way, server.endpoint, tmp_path / "k", monkeypatch)
    assert (tmp_path / "k").read_bytes() == data
    assert size == len(data)
    assert server.requests == SCENARIOS[scenario]


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("way", WAYS)
async def test_closing_the_engine_is_not_the_end_of_a_close_delimited_body(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine's own close of the connection is not the server's: the body is not
    # whole, and no file is written.
    async def script(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nETag: "v1"\r\n\r\n' + BODY[:1000])
        await writer.drain()
        await reader.read()  # until the client hangs up

    async with _Scripted(script) as server:
        engine, endpoint = _engine_for(way, server.endpoint, monkeypatch)
        async with engine:
            download = asyncio.ensure_future(_download(way, engine, endpoint, tmp_path / "k"))
            for _ in range(200):
                if server.requests:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the bytes sent came; the rest never will
        done = await asyncio.gather(download, return_exceptions=True)
        assert await server.all_closed()
    assert isinstance(done[0], Exception), done
    assert os.listdir(tmp_path) == []
