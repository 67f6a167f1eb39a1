"""A peer that echoes the request inside a chunked body, after a first good chunk:
the chunk-size line it sends is the request line (a presigned URL's query) or a
request header (the session token). Under aiohttp's pure-Python parser (used where
its wheel has no C extension, or under ``AIOHTTP_NO_EXTENSIONS=1``) that is a
``TransferEncodingError`` quoting the line; under its C parser, a read that is never
woken, which the stall watch ends. Either way the failure is retried as a cut
connection, and no message, exception behind it, traceback or log line shows the
secret.

The scenario runs in this process (under whichever parser it has: ``nox -s
tests_pure_parser`` runs it under the pure one) and in a child process under each
parser, so the default run tries both.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp.client_proto
import pytest

import asyncdl
from asyncdl.testing.moto_server import FAKE_ENV

_SECRET = "GIVENSECRET"
_TOKEN = "GIVENTOKENSECRET"
_ATTEMPTS = 2
#: The reads that retry a cut connection here (a stream that has yielded bytes cannot).
_RETRIED = {"download_url", "read_ranges_url", "download"}


def _parser() -> str:
    """Which of aiohttp's response parsers this process uses."""
    module = aiohttp.client_proto.HttpResponseParser.__module__  # type: ignore[attr-defined]
    return "c" if module == "aiohttp._http_parser" else "python"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    todo, seen = [exc], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        values = [*vars(current).values(), *getattr(current, "kwargs", {}).values()]
        todo += [value for value in values if isinstance(value, BaseException)]


class _EchoServer:
    """Answers each GET with a chunked 200 of one good chunk, then (apart) echoes a
    line of the request as the next chunk-size line: ``first`` is the request line,
    or the request header of that name."""

    def __init__(self, first: str) -> None:
        self.first = first
        #: The GETs it answered.
        self.requests = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> _EchoServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
            if lines[0].startswith(b"HEAD "):  # a HEAD-first download's: no body
                writer.write(b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Length: 10\r\n\r\n')
                await writer.drain()
                return
            self.requests += 1  # the GETs
            echoed = lines[0]
            if self.first != "request-line":
                named = [line for line in lines if line.lower().startswith(self.first.encode())]
                echoed = named[0]
            writer.write(
                b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n'
            )
            await writer.drain()
            await asyncio.sleep(0.1)  # apart: the body is being read when it comes
            writer.write(echoed + b"\r\n" + b"\r\n".join(lines[1:]))
            await writer.drain()
            await asyncio.sleep(3)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client gave up on it (closed, or the test's loop ended)
        finally:
            writer.close()


async def _read_all(stream: asyncdl.ObjectStream) -> bytes:
    async with stream:
        return b"".join([piece async for piece in stream])


async def _outcome(
    call: Callable[[], Awaitable[Any]], server: _EchoServer, log: list[str]
) -> dict[str, Any]:
    server.requests = 0
    log.clear()
    try:
        async with asyncio.timeout(30):
            await call()
    except asyncdl.DownloadError as error:
        # What shows an exception (its text, as a traceback or a log line does) and,
        # behind a URL's failure, all it holds: a presigned URL's query is in the URL
        # itself. An S3 request's own headers stay in the request aiohttp's errors
        # keep (``request_info``), as any client's do: never in their text.
        whole = not isinstance(error.key, str) or "://" in error.key
        texts = [f"{e!s} {e!r} {e.args!r} {vars(e)!r}" if whole else str(e) for e in _chain(error)]
        return {
            "error": str(error),
            "chain": texts,
            "traceback": "".join(traceback.format_exception(error)),
            "log": "\n".join(log),
            "requests": server.requests,
        }
    return {"error": None, "requests": server.requests}


class _Lines(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(self.format(record))


async def scenario() -> dict[str, Any]:
    """Every way of reading, against the echoing peer: what each failure showed."""
    for name, value in {**FAKE_ENV, "AWS_SESSION_TOKEN": _TOKEN}.items():
        os.environ[name] = value
    log: list[str] = []
    handler = _Lines(log)
    # asyncdl's own lines (botocore's DEBUG log shows every request's headers itself).
    logger = logging.getLogger("asyncdl")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    config = asyncdl.TransferConfig(
        read_timeout=1, max_attempts=_ATTEMPTS, backoff_base=0.01, chunk_size=64 * 1024
    )
    results: dict[str, Any] = {"parser": _parser()}
    try:
        with tempfile.TemporaryDirectory() as folder:
            target = Path(folder) / "x"
            async with _EchoServer("request-line") as server, asyncdl.Engine(config=config) as e:
                url = server.url(f"/obj?X-Amz-Signature={_SECRET}&X-Amz-Security-Token={_TOKEN}")
                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "download_url": lambda: e.download_url(url, target),
                    "stream_url": lambda: _read_all(e.stream_url(url)),
                    "read_ranges_url": lambda: e.read_ranges_url(url, [(0, 3), (5, 10)]),
                }
                for how, call in calls.items():
                    results[how] = await _outcome(call, server, log)
            from aiobotocore.session import get_session  # noqa: PLC0415

            async with (
                _EchoServer("x-amz-security-token") as server,
                get_session().create_client(
                    "s3", endpoint_url=server.url(""), region_name="us-east-1"
                ) as client,
                asyncdl.Engine(client, config=config) as e,
            ):
                s3_calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "download": lambda: e.download("b", "k", target),
                    "stream": lambda: _read_all(e.stream("b", "k")),
                }
                for how, call in s3_calls.items():
                    results[how] = await _outcome(call, server, log)
            results["left"] = os.listdir(folder)
    finally:
        logger.removeHandler(handler)
    return results


def _check(results: dict[str, Any]) -> None:
    assert results.pop("left") == []
    parser = results.pop("parser")
    for how, outcome in results.items():
        where = (parser, how, outcome["error"])
        assert outcome["error"] is not None, where
        assert "transfer failed" in outcome["error"], where
        if how in _RETRIED:
            assert outcome["requests"] == _ATTEMPTS, where  # retried, as a cut connection
        else:
            # A stream has handed over the first chunk: as after a cut, it cannot take
            # it back, nor resume a whole answer without a length.
            assert outcome["requests"] == 1, where
        shown = [outcome["error"], *outcome["chain"], outcome["traceback"], outcome["log"]]
        for text in shown:
            assert _SECRET not in text, (where, text)
            assert _TOKEN not in text, (where, text)
        assert len(outcome["error"]) < 600, where


async def test_an_echoing_peer_is_retried_and_never_shown() -> None:
    """Under this process's parser."""
    _check(await scenario())


@pytest.mark.parametrize("pure", [False, True], ids=["default-parser", "pure-python-parser"])
def test_an_echoing_peer_under_each_parser(pure: bool) -> None:
    """In a child process, with ``AIOHTTP_NO_EXTENSIONS`` set (or unset) before aiohttp
    is first imported."""
    env = {key: value for key, value in os.environ.items() if key != "AIOHTTP_NO_EXTENSIONS"}
    if pure:
        env["AIOHTTP_NO_EXTENSIONS"] = "1"
    root = Path(__file__).resolve().parents[2]
    package = Path(asyncdl.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(package), str(root)])
    code = (
        "import asyncio, json, sys\n"
        "from tests.wire.test_http_echo_body import scenario\n"
        "sys.stdout.write('RESULT ' + json.dumps(asyncio.run(scenario())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.rpartition("RESULT ")[2])
    if pure:
        assert results["parser"] == "python"
    _check(results)
