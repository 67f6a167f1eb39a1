"""Hostile answers whose bytes keep coming, too slowly to be a stall: an error body
that trickles one byte just inside ``read_timeout`` is still read for at most about
``read_timeout`` in all (the status is the answer; 64 KiB at one byte per read
timeout would be a day and a half).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

import asyncdl
from asyncdl.testing.moto_server import FAKE_ENV

from .conftest import make_client
from .test_http_spool import SlowServer

_READ_TIMEOUT = 0.5
_IN_TIME = 6.0


def _trickle(head: bytes) -> object:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        await writer.drain()
        while True:  # one byte just inside the read timeout, for ever
            await asyncio.sleep(_READ_TIMEOUT * 0.6)
            writer.write(b"x")
            await writer.drain()

    return send


_HEADS = {
    "503-length": b"HTTP/1.1 503 Slow Down\r\nContent-Length: 100000\r\n\r\n<",
    "416-length": b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 100000\r\n\r\n<",
    "403-close": b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n<",
}


@pytest.mark.parametrize("head", list(_HEADS))
@pytest.mark.parametrize("how", ["url", "s3-lean"])
async def test_a_trickling_error_body_is_read_for_a_bounded_time(
    how: str, head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    config = asyncdl.TransferConfig(read_timeout=_READ_TIMEOUT, max_attempts=1)
    async with (
        SlowServer(_trickle(_HEADS[head])) as server,  # type: ignore[arg-type]
        make_client(server.url("")) as client,
        asyncdl.Engine(None if how == "url" else client, config=config) as engine,
    ):
        if how == "url":
            call = engine.read_ranges_url(server.url("/o?X-Amz-Signature=s"), [(0, 10)])
        else:
            call = engine.read_ranges("b", "k", [(0, 10)])
        began = time.monotonic()
        with pytest.raises(asyncdl.DownloadError) as raised:
            async with asyncio.timeout(_IN_TIME + 20):
                await call
        took = time.monotonic() - began
    assert took < _IN_TIME, (took, raised.value)
    assert os.listdir(tmp_path) == []
