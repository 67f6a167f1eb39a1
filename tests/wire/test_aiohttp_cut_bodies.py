"""aiohttp's answers (URL downloads, GETs through a proxy, ``ASYNCDL_OWN_HTTP=0``) whose
body only the connection's end delimits: a clean close ends such a body (RFC 9112
§6.3), a reset cuts it. aiohttp ends the body at either (its protocol feeds the parser
its end whatever ended the connection), so the engine asks the connection how it ended
and fetches a cut body again rather than write it short.

The server is a real one on loopback that runs a script per connection.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from asyncdl._wire import own_http

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
