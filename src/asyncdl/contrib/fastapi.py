"""FastAPI: one Engine for the app's lifetime, shared by every request, and the
answer to a GET or HEAD of an object as browsers, players, download managers and
caches expect it (Range, If-Range, If-None-Match, If-Match...).

```python
import asyncdl
from fastapi import FastAPI, Request, Response
from asyncdl.contrib.fastapi import EngineDep, lifespan, object_response

config = asyncdl.TransferConfig(max_concurrency=64)
app = FastAPI(lifespan=lifespan(config=config))

@app.api_route("/files/{key:path}", methods=["GET", "HEAD"])
async def files(key: str, request: Request, engine: EngineDep) -> Response:
    return await object_response(engine, "my-bucket", key, request)
```

Requests share the engine's one client, connection pool and concurrency budget;
no client is created per request. Needs the ``asyncdl[fastapi]`` extra.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .._reads.streaming import ObjectStream, check_parts
from .._wire.request_args import ExtraArgs
from .._wire.s3_source import RangeNotSatisfiable
from ..config import KiB, TransferConfig
from ..engine import Engine
from ..errors import (
    AccessDeniedError,
    DownloadError,
    InvalidRequestError,
    ObjectChangedError,
    ObjectNotFoundError,
)
from ..object_info import ObjectInfo
from .http_ranges import (
    Answer,
    Asked,
    Validators,
    content_disposition,
    content_range,
    unsatisfied_range,
)

logger = logging.getLogger("asyncdl")

_STATE = "asyncdl_engine"


def lifespan(
    config: TransferConfig | None = None,
    *,
    client: Any = None,
    inner: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A FastAPI ``lifespan`` that opens one :class:`Engine` (and its client) at start-up
    and closes it at shutdown; ``inner`` is the app's own lifespan, run inside it."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        async with Engine(client, config=config) as engine:
            setattr(app.state, _STATE, engine)
            try:
                if inner is None:
                    yield
                else:
                    async with inner(app):
                        yield
            finally:
                delattr(app.state, _STATE)

    return run


def get_engine(request: Request) -> Engine:
    """The app's engine (a FastAPI dependency)."""
    engine: Engine | None = getattr(request.app.state, _STATE, None)
    if engine is None:
        raise RuntimeError("no asyncdl engine: create the app with lifespan=asyncdl lifespan()")
    return engine


#: A route's parameter ``engine: EngineDep`` receives the app's engine.
EngineDep = Annotated[Engine, Depends(get_engine)]


#: Serving streams fetch parts of this size, ``SERVE_PREFETCH`` ahead of the client:
#: a slow client holds at most about ``SERVE_PREFETCH * SERVE_CHUNK_SIZE`` bytes of
#: its object (1 MiB), not the engine's ``stream_prefetch * chunk_size`` (32 MiB by
#: default), and no S3 connection waits for it (each part is read as fast as S3 sends
#: it, then its slot is free).
SERVE_CHUNK_SIZE = 512 * KiB
#: Parts a serving stream fetches ahead of the client (see ``SERVE_CHUNK_SIZE``).
SERVE_PREFETCH = 2
#: Answers prepared before giving up on an object that changes under each of them.
_ATTEMPTS = 3
#: What S3 stores when the uploader named no type: no type at all, so guess one.
_NO_TYPE = "binary/octet-stream"
#: A guess from the key's name is kept only for a type no browser runs as a page or
#: script: the name is the uploader's, and an app that serves uploads must not give
#: them HTML, SVG, XML, JavaScript or PDF (a viewer that runs its scripts, forms that
#: post to the origin) on its own origin. Media (but not SVG), fonts and these few
#: types; any other guess, and whatever the host's mime.types adds, is not trusted.
_PASSIVE_MAJOR_TYPES = frozenset({"image", "audio", "video", "font"})
_PASSIVE_TYPES = frozenset(
    {
        "text/plain",
        "text/csv",
        "text/css",
        "text/markdown",
        "text/tab-separated-values",
        "application/json",
        "application/zip",
        "application/x-tar",
    }
)
#: Served when the type is unknown (RFC 9110 §8.3): a browser saves it, never renders
#: it (text/plain would be shown, and older browsers sniffed it into HTML).
_UNKNOWN_TYPE = "application/octet-stream"
#: Representation metadata stored with the object (RFC 9110 §8), sent as S3 sends it:
#: a client decodes (a gzipped file stored with Content-Encoding), caches, and saves
#: the body by them. ``filename`` names the file instead of a stored disposition.
_STORED_FIELDS = (
    "Content-Encoding",
    "Content-Language",
    "Content-Disposition",
    "Cache-Control",
    "Expires",
)
#: What a 304 carries of a 200's fields (RFC 9110 §15.4.5; Date is the server's, and
#: Content-Location and Vary are never sent): what a cache updates its copy with.
_NOT_MODIFIED_FIELDS = ("ETag", "Cache-Control", "Expires")
#: On every answer: a browser takes the type sent, never one it sniffs from the body.
_NOSNIFF = {"X-Content-Type-Options": "nosniff"}
#: A header value that can be sent: Latin-1 without control characters (HTTP's
#: field-vchar, SP and HTAB; a CR or LF would end the header).
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: A media type is ASCII (RFC 9110 §8.3.1): a stored one that is not is not used.
_ASCII_VALUE = re.compile(r"[\t\x20-\x7e]*")

#: The answer to each error, by the first class that matches; anything else is 502
#: (S3, or the way to it, failed). Only the status's phrase is sent: no bucket, key
#: or message (the log has them).
_ERROR_STATUS: tuple[tuple[type[DownloadError], int], ...] = (
    (ObjectNotFoundError, 404),
    (AccessDeniedError, 403),
    (ObjectChangedError, 503),
    (InvalidRequestError, 400),
)


async def object_response(
    engine: Engine,
    bucket: str,
    key: str,
    request: Request,
    *,
    extra_args: ExtraArgs | None = None,
    filename: str | None = None,
    chunk_size: int = SERVE_CHUNK_SIZE,
    prefetch: int = SERVE_PREFETCH,
) -> Response:
    """The answer to ``request`` (a GET or HEAD) for ``s3://bucket/key``.

    - GET: 200 and the whole object, streamed (checked against S3's checksum when it
      has one; on a mismatch the connection is cut before the last bytes, so the
      client sees a failed transfer, never a complete wrong one);
    - ``Range: bytes=a-b``, ``a-`` or ``-n``: 206 and only those bytes (one S3 round
      trip before the first byte; a suffix ``-n`` needs a HEAD first); unsatisfiable:
      416; several ranges: the whole object (see ``http_ranges``);
    - ``If-Range`` (an ETag), ``If-None-Match`` / ``If-Modified-Since`` (304, after a
      HEAD, with no GET), ``If-Match`` / ``If-Unmodified-Since`` (412);
    - HEAD: the headers, after one S3 HEAD (no GET);
    - ``ETag``, ``Accept-Ranges``, ``Last-Modified``, ``Content-Type`` (the stored
      one, or a guess from the key that is never a type a browser runs: HTML, SVG,
      XML, JavaScript, PDF are sent as ``application/octet-stream``), the stored
      ``Content-Encoding``, ``Content-Language``, ``Cache-Control``, ``Expires`` and
      ``Content-Disposition`` (or ``attachment`` naming ``filename``), and
      ``X-Content-Type-Options: nosniff`` on every answer; a 304 carries ``ETag``,
      ``Cache-Control`` and ``Expires``; a stored value that cannot be sent in a
      header is left out (a stored type: the guess is sent);
    - 404, 403, 400, 503 (changed while read) or 502 (S3 failed), saying nothing of
      the bucket or key.

    ``extra_args`` go with every request (SSE-C, VersionId...). The response owns the
    stream: it is closed when the response ends, fails, or the client leaves, at any
    point. ``chunk_size`` and ``prefetch`` set the stream's parts (see
    ``SERVE_CHUNK_SIZE``).
    """
    # The app's own arguments: a mistake raises here, for every request alike.
    disposition = content_disposition(filename) if filename is not None else None
    check_parts(chunk_size, prefetch, bucket=bucket, key=key)
    method = request.method
    if method not in ("GET", "HEAD"):
        return Response(status_code=405, headers={"Allow": "GET, HEAD", **_NOSNIFF})
    # RFC 9110 §5.3: several field lines are one list.
    asked = Asked.from_headers(
        method, {name: ", ".join(request.headers.getlist(name)) for name in request.headers}
    )
    try:
        return await _respond(
            engine,
            bucket,
            key,
            asked,
            extra_args=extra_args,
            disposition=disposition,
            chunk_size=chunk_size,
            prefetch=prefetch,
        )
    except DownloadError as exc:
        return _failure(exc)


async def _respond(
    engine: Engine,
    bucket: str,
    key: str,
    asked: Asked,
    *,
    extra_args: ExtraArgs | None,
    disposition: str | None,
    chunk_size: int,
    prefetch: int,
) -> Response:
    known: ObjectInfo | None = None
    if asked.method == "HEAD" or asked.needs_validators:
        known = await engine.head(bucket, key, extra_args=extra_args)
    for _ in range(_ATTEMPTS):
        answer = asked.answer(_validators(known) if known is not None else None)
        if known is not None and (
            asked.method == "HEAD" or answer.status not in (200, 206) or answer.end == 0
        ):
            return _bodiless(answer, known, key, disposition)  # (an empty object's 200 too)
        stream = engine.stream(
            bucket,
            key,
            start=answer.start,
            end=answer.end,
            extra_args=extra_args,
            chunk_size=chunk_size,
            prefetch=prefetch,
        )
        try:
            await stream.open()
        except DownloadError as exc:
            if answer.start > 0 and _past_the_end(exc):
                # Only the size tells a 416 from the range (or the object shrank
                # since the HEAD): ask it.
                known = await engine.head(bucket, key, extra_args=extra_args)
                continue
            raise
        except BaseException:
            await stream.aclose()  # cancelled while it opened
            raise
        try:
            if stream.size is None or stream.length is None:
                raise DownloadError(
                    "the store sent the object without its length", bucket=bucket, key=key
                )
            if not stream.headers:
                # Nothing was read (S3's 416 for an empty object, or a range at its
                # end, carries no ETag nor any stored field): the HEAD has them.
                await stream.aclose()
                known = await engine.head(bucket, key, extra_args=extra_args)
                continue
            seen = ObjectInfo(stream.size, stream.etag, stream.headers)
            sending = Answer(answer.status, answer.start, answer.start + stream.length)
            if asked.answer(_validators(seen)) == sending:
                headers = _headers(sending, seen, key, disposition)
                whole = sending.status == 200 and engine.config.validate != "off"
                return _ObjectResponse(stream, sending.status, headers, hold_last=whole)
        except BaseException:
            await stream.aclose()
            raise
        await stream.aclose()
        known = seen
    raise ObjectChangedError(
        f"the object changed under each of {_ATTEMPTS} answers", bucket=bucket, key=key
    )


class _ObjectResponse(StreamingResponse):
    """A stream's bytes; the response owns the stream and closes it however it ends.

    It listens for the client's disconnect whatever the ASGI version (from 2.4,
    Starlette notices only when a send fails, which a stream waiting on S3 does not
    do), so a client that leaves stops the prefetch at once.
    """

    def __init__(
        self, stream: ObjectStream, status: int, headers: dict[str, str], *, hold_last: bool
    ) -> None:
        super().__init__(_pieces(stream, hold_last), status_code=status, headers=headers)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            streaming = asyncio.create_task(self.stream_response(send))
            listening = asyncio.create_task(self.listen_for_disconnect(receive))
            try:
                await asyncio.wait({streaming, listening}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                streaming.cancel()
                listening.cancel()
                await asyncio.gather(streaming, listening, return_exceptions=True)
            if not streaming.cancelled() and not isinstance(streaming.exception(), OSError):
                # A failure after the headers (a read that gave up, a checksum
                # mismatch) raises to the server, which cuts the connection: the
                # client must not take a short or wrong body for a whole one.
                streaming.result()
        finally:
            await self._stream.aclose()


async def _pieces(stream: ObjectStream, hold_last: bool) -> AsyncIterator[bytes]:
    if not hold_last:
        async for piece in stream:
            yield piece
        return
    held: bytes | None = None
    async for piece in stream:  # a checksum mismatch raises here, before ``held`` goes
        if held is not None:
            yield held
        held = piece
    if held is not None:
        yield held


def _validators(info: ObjectInfo) -> Validators:
    return Validators(info.size, info.etag, info.headers.get("last-modified"))


def _past_the_end(exc: DownloadError) -> bool:
    """Whether opening a range failed because it starts past the object's end."""
    return isinstance(exc, InvalidRequestError) or isinstance(exc.__cause__, RangeNotSatisfiable)


def _headers(answer: Answer, info: ObjectInfo, key: str, disposition: str | None) -> dict[str, str]:
    """The headers of a 200 or 206 answer (and of a HEAD's)."""
    assert answer.end is not None
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(answer.end - answer.start),
        "Content-Type": _content_type(info, key),
        **_NOSNIFF,
    }
    if answer.status == 206:
        headers["Content-Range"] = content_range(answer.start, answer.end, info.size)
    headers |= _stored(info, ("ETag", "Last-Modified", *_STORED_FIELDS))
    if disposition is not None:
        headers["Content-Disposition"] = disposition
    return headers


def _bodiless(answer: Answer, info: ObjectInfo, key: str, disposition: str | None) -> Response:
    """A HEAD's answer, or a GET's 304, 412 or 416 (or 200 of an empty object)."""
    if answer.status in (200, 206):
        headers = _headers(answer, info, key, disposition)
    elif answer.status == 304:
        # Last-Modified only stands in for a missing ETag (§15.4.5).
        fields = (
            _NOT_MODIFIED_FIELDS
            if info.etag is not None
            else ("Last-Modified", "Cache-Control", "Expires")
        )
        headers = {**_stored(info, fields), **_NOSNIFF}
    elif answer.status == 416:
        headers = {
            "Accept-Ranges": "bytes",
            "Content-Range": unsatisfied_range(info.size),
            **_NOSNIFF,
        }
    else:
        headers = dict(_NOSNIFF)
    return Response(status_code=answer.status, headers=headers)


def _stored(info: ObjectInfo, names: tuple[str, ...]) -> dict[str, str]:
    """The fields ``names`` as S3 answered them, each that it has and that can be sent."""
    fields = {}
    for name in names:
        value = info.etag if name == "ETag" else info.headers.get(name.lower())
        if value is not None and _FIELD_VALUE.fullmatch(value):
            fields[name] = value
    return fields


def _content_type(info: ObjectInfo, key: str) -> str:
    stored = info.headers.get("content-type")
    if stored and stored != _NO_TYPE and _ASCII_VALUE.fullmatch(stored):
        return stored  # the uploader's choice, however active: the app owner's
    # A path, never a URL: guess_type("data:image/svg+XML,x") is "image/svg+XML".
    guessed, encoding = mimetypes.guess_type("/" + key.rpartition("/")[2], strict=False)
    if guessed is None or encoding is not None:
        return _UNKNOWN_TYPE  # "a.csv.gz": gzip bytes are not CSV
    guessed = guessed.lower()
    major = guessed.partition("/")[0]
    if guessed in _PASSIVE_TYPES or (major in _PASSIVE_MAJOR_TYPES and "xml" not in guessed):
        return guessed
    return _UNKNOWN_TYPE


def _failure(exc: DownloadError) -> Response:
    status = next((code for cls, code in _ERROR_STATUS if isinstance(exc, cls)), 502)
    # A missing key is the client's business; S3 failing is the operator's.
    logger.log(logging.INFO if status < 500 else logging.WARNING, "HTTP %d: %s", status, exc)
    headers = {"Retry-After": "1", **_NOSNIFF} if status == 503 else dict(_NOSNIFF)
    return JSONResponse({"detail": HTTPStatus(status).phrase}, status_code=status, headers=headers)
