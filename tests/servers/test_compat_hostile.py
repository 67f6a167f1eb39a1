"""S3-compatible servers at their worst: answers that the quirks met for rclone (a
``200`` naming the range, ``If-Match`` ignored, a ``416`` naming no size) make
possible from a hostile or broken server, and endpoint settings that would leak or
send what the user did not mean.

The servers are small raw HTTP servers on loopback (``test_url_raw_http.RawServer``):
one answer per connection, from a function of the request, every request recorded.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from click.testing import CliRunner

import asyncdl
from asyncdl.cli import cli

from ..conftest import CHUNK, temp_files
from ..wire.test_url_raw_http import RawServer, Seen, reply

#: A 416 as S3 words it, naming the object's size: here, empty.
_EMPTY_416 = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidRange</Code>"
    b"<Message>The requested range is not satisfiable</Message>"
    b"<ActualObjectSize>0</ActualObjectSize></Error>"
)


def _client(endpoint: str) -> Any:
    return get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIAHOSTILETESTKEY01",
        aws_secret_access_key="hostile-test-secret",
        config=AioConfig(
            retries={"total_max_attempts": 1},
            response_checksum_validation="when_required",
            request_checksum_calculation="when_required",
        ),
    )


async def _on(
    answer: Callable[[Seen], bytes], work: Callable[[asyncdl.Engine, RawServer], Awaitable[Any]]
) -> RawServer:
    """Run ``work`` on an engine whose S3 endpoint is a server answering ``answer``."""
    async with RawServer(answer) as server, _client(server.url("")) as client:
        config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)
        async with asyncdl.Engine(client, config=config) as engine:
            await asyncio.wait_for(work(engine, server), 30)
    return server


# -- a 416 of another version, from a server that ignores If-Match ----------------------------


def _emptied_ignoring_if_match(request: Seen) -> bytes:
    """The object is now empty (ETag "v2"); If-Match is ignored, so a range pinned to
    "v1" gets a 416 naming the new version's size and ETag, as a range of the new
    version would."""
    if request.method == "HEAD":
        return reply(200, {"ETag": '"v2"', "Content-Length": "0"})
    if "range" in request.headers:
        headers = {"ETag": '"v2"', "Content-Type": "application/xml"}
        return reply(416, {**headers, "Content-Length": str(len(_EMPTY_416))}, _EMPTY_416)
    return reply(200, {"ETag": '"v2"', "Content-Length": "0"})


async def _read_all(reader: Any) -> bytes:
    async with reader as opened:
        data: bytes = await opened.read()
        return data


@pytest.mark.parametrize(
    "call", ["download", "read_ranges", "open", "read_ranges_url", "open_reader_url"]
)
async def test_a_pinned_range_refused_with_another_etag_is_a_change(
    call: str, tmp_path: Path
) -> None:
    """A 416 to a GET pinned to "v1" that names ETag "v2" is an answer about another
    version: ObjectChangedError, as a 412 would be. Taken as the pinned version's
    size, it made an empty file of "v1" (download, open) or a range said to be past
    its end (read_ranges)."""
    target = tmp_path / "obj"
    pin = '"v1"'

    async def work(engine: asyncdl.Engine, server: RawServer) -> None:
        url = server.url("/b/k")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "download": lambda: engine.download("b", "k", target, etag=pin),
            "read_ranges": lambda: engine.read_ranges("b", "k", [(0, 1)], etag=pin),
            "open": lambda: _read_all(engine.open_reader("b", "k", etag=pin)),
            "read_ranges_url": lambda: engine.read_ranges_url(url, [(0, 1)], etag=pin),
            "open_reader_url": lambda: _read_all(engine.open_reader_url(url, etag=pin)),
        }
        with pytest.raises(asyncdl.ObjectChangedError, match='"v2"'):
            await calls[call]()

    server = await _on(_emptied_ignoring_if_match, work)
    assert [request.headers.get("if-match") for request in server.requests] == [pin]
    assert not target.exists()
    assert temp_files(tmp_path) == []


async def test_a_url_emptied_between_its_first_get_and_its_size_probe_is_a_change() -> None:
    """The first 416 (to a range pinned to "v1") names neither size nor ETag; the
    one-byte GET that asks the size gets a 416 saying the object is empty, of ETag
    "v2": the version was replaced in between, and "v1" is not called empty."""
    refusals = [0]

    def answer(request: Seen) -> bytes:
        refusals[0] += 1
        headers = {"Content-Range": "bytes */0", "Content-Length": "0"}
        return reply(416, headers if refusals[0] == 1 else {**headers, "ETag": '"v2"'})

    async def work(engine: asyncdl.Engine, server: RawServer) -> None:
        with pytest.raises(asyncdl.ObjectChangedError, match='"v2"'):
            await engine.read_ranges_url(server.url("/obj"), [(0, 1)], etag='"v1"')

    server = await _on(answer, work)
    assert [request.headers.get("range") for request in server.requests] == [
        "bytes=0-0",
        "bytes=0-0",
    ]


# -- endpoint URLs that would send or show what they hold -------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("http://user:SECRETPASS@127.0.0.1:9000", "user name or password"),
        ("http://SECRETPASS@127.0.0.1:9000", "user name or password"),
        ("http://127.0.0.1:9000/?X-Amz-Signature=SECRETPASS", "query or a fragment"),
        ("http://127.0.0.1:9000/#SECRETPASS", "query or a fragment"),
        ("http://127.0.0.1:99999", "port"),
        ("ftp://user:SECRETPASS@127.0.0.1", "http:// or https://"),
    ],
    ids=["userinfo", "user", "query", "fragment", "bad-port", "ftp-userinfo"],
)
def test_an_endpoint_url_that_botocore_cannot_use_is_refused_unquoted(
    endpoint: str, message: str, tmp_path: Path
) -> None:
    """User info would go out as HTTP Basic authentication (from an unsigned engine
    too, which promises no Authorization header), or break the signature; botocore
    refuses a query or a fragment only at the first request, quoting it whole; a bad
    port fails there too. Each is refused as the engine is made, and as the command
    parses its options, without showing what the URL holds."""
    with pytest.raises(ValueError, match=message) as raised:
        asyncdl.Engine(endpoint_url=endpoint, unsigned=True)
    assert "SECRETPASS" not in str(raised.value)
    run = CliRunner().invoke(
        cli,
        ["cp", "--no-sign-request", "--endpoint-url", endpoint, "s3://b/k", str(tmp_path / "x")],
    )
    assert run.exit_code == 2, run.output
    assert message in run.output
    assert "SECRETPASS" not in run.output
    assert os.listdir(tmp_path) == []


def test_an_endpoint_url_with_a_path_is_taken() -> None:
    """A store behind a reverse proxy may sit under a path: botocore puts the bucket
    after it."""
    asyncdl.Engine(endpoint_url="https://gateway.example/s3/", unsigned=True)
