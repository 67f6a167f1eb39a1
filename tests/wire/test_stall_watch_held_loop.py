"""A stall watch tells a server that sent nothing from a loop that was held up: bytes
that arrived while a long callback held the loop are no stall."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from asyncdl._wire.body_reader import BodyReader
from asyncdl.errors import RetryableError

PIECE = 64 * 1024
TIMEOUT = 0.3


class TwoPieces:
    """An HTTP server in a thread: headers and a first piece of the body, then, once
    told, the second piece (the stalled server, until then)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.more = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(4096)
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {2 * PIECE}\r\n\r\n".encode()
            connection.sendall(head + b"a" * PIECE)
            self.more.wait(10)
            connection.sendall(b"b" * PIECE)
            connection.recv(1)  # until the client closes

    def close(self) -> None:
        self.more.set()
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def server() -> Iterator[TwoPieces]:
    serving = TwoPieces()
    yield serving
    serving.close()


@contextlib.asynccontextmanager
async def past_the_first_piece(server: TwoPieces) -> AsyncIterator[BodyReader]:
    """The body's reader, its first piece read."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}/") as response,
    ):
        with BodyReader(response, TIMEOUT, 1024 * 1024) as reader:
            got = 0
            while got < PIECE:
                got += len(await reader.read())
            assert got == PIECE
            yield reader


async def test_bytes_that_came_while_the_loop_was_held_are_no_stall(server: TwoPieces) -> None:
    async with past_the_first_piece(server) as reader:
        waiting = asyncio.create_task(reader.read())
        await asyncio.sleep(0.05)  # the read waits for the server
        server.more.set()
        # A file call (or any callback) holding the loop past the read timeout,
        # while the second piece arrives.
        time.sleep(3 * TIMEOUT)  # noqa: ASYNC251 - holding the loop is the test
        second = await waiting
        while len(second) < PIECE:
            second += await reader.read()
        assert second == b"b" * PIECE
        assert await reader.read() == b""


async def test_a_server_that_sends_nothing_is_still_a_stall(server: TwoPieces) -> None:
    async with past_the_first_piece(server) as reader:
        started = time.monotonic()
        # Held, and nothing comes meanwhile, nor after.
        time.sleep(3 * TIMEOUT)  # noqa: ASYNC251 - holding the loop is the test
        with pytest.raises(RetryableError, match="no bytes for"):
            await reader.read()
        # Judged once the loop ran again: a short look after the late timer.
        assert time.monotonic() - started < 3 * TIMEOUT + 2.0


async def test_a_body_already_whole_sets_no_watch() -> None:
    # A tiny object's answer often comes in one packet: its reads cannot wait, and a
    # timer set and cancelled for it is work per object for nothing.
    body = b"whole"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            while b"\r\n\r\n" not in connection.recv(4096):
                pass
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            connection.sendall(head + body)
            connection.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/") as response,
        ):
            for _ in range(1000):  # the body's bytes come after the headers, soon
                if response.content.is_eof():
                    break
                await asyncio.sleep(0.01)
            with BodyReader(response, TIMEOUT, 1024 * 1024) as reader:
                assert reader._timer is None
                got = b""
                while piece := await reader.read():
                    got += piece
            assert got == body
    finally:
        listener.close()
        thread.join(5)


async def test_a_body_still_coming_is_watched(server: TwoPieces) -> None:
    async with past_the_first_piece(server) as reader:
        assert reader._timer is not None
