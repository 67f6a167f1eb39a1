"""A stateless fake S3 for benchmarks: N synthetic objects that cost it nothing to hold.

It serves one bucket of ``--objects`` keys, ``k/0000000`` up (at least seven digits,
zero-padded, so the keys' byte order is their numeric order), each ``--size`` bytes.
Nothing is stored: a key's body is computed from its name (the key and a newline,
repeated and cut to the size, see :func:`body`), so a file written from it can be
checked, and a million keys take no memory. It answers, path style
(``/bucket/key``, as botocore and s5cmd address a loopback endpoint) or virtual-host
style:

- ListObjectsV2 (``?list-type=2``): pages of up to 1000 (``max-keys``), continuation
  tokens, ``prefix``, ``start-after``, ``delimiter``; each entry with Key, Size, ETag
  (the quoted MD5 of the body, a strong ETag as S3 gives a single-part object) and
  LastModified.
- GET and HEAD of an object: Content-Length, ETag, Last-Modified; one ``Range``
  (``bytes=a-b``, ``a-``, ``-n``) as 206, 416 when it starts past the end; ``If-Match``
  (412), ``If-None-Match`` (304); ``partNumber=1`` as the whole object.
- HEAD of the bucket, and ``?location``.

Signatures (SigV4 or any other) are not checked. ``/_fake_s3/stats`` answers JSON:
requests by kind, the most object GETs open at once (from the request's arrival to its
last byte written: with ``--latency-ms`` each waits that long first, so this is the
most the client had in flight), bytes sent, and the server's CPU seconds;
``/_fake_s3/reset`` zeroes them. It runs in a process of its own (so it has its own
core and GIL), on uvloop when that is installed:

    python benchmarks/fake_s3.py --objects 1000000 --size 1KiB --port 9000
    # then: AWS_ENDPOINT_URL_S3=http://127.0.0.1:9000 asyncdl cp -r s3://bench/k/ out/

:class:`FakeS3Process` starts one from a benchmark and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import unquote
from xml.sax.saxutils import escape

from arguments import parse_size

if TYPE_CHECKING:
    from aiohttp import web

KEY_PREFIX = "k/"
BUCKET = "bench"
#: Every object's LastModified: a fixed instant, since nothing is ever written.
MODIFIED_EPOCH = 1_704_067_200  # 2024-01-01T00:00:00Z
LISTED_MODIFIED = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(MODIFIED_EPOCH))
HTTP_MODIFIED = formatdate(MODIFIED_EPOCH, usegmt=True)
PAGE = 1000
STATS_PATH = "/_fake_s3/stats"
RESET_PATH = "/_fake_s3/reset"
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_XML = {"Content-Type": "application/xml"}


@dataclass(frozen=True, slots=True)
class Objects:
    """The bucket's synthetic objects: names, bodies and ETags, all computed."""

    count: int
    size: int
    bucket: str = BUCKET

    @property
    def width(self) -> int:
        return max(7, len(str(max(self.count - 1, 0))))

    def key(self, index: int) -> str:
        return f"{KEY_PREFIX}{index:0{self.width}d}"

    def index(self, key: str) -> int | None:
        """The index of ``key``, or None when no object has that name."""
        digits = key.removeprefix(KEY_PREFIX)
        if len(digits) != self.width or digits == key or not digits.isascii():
            return None
        if not digits.isdigit():
            return None
        index = int(digits)
        return index if index < self.count else None

    def body(self, key: str) -> bytes:
        return body(key, self.size)

    def after(self, name: str) -> int:
        """The index of the first key sorted after ``name`` (byte order, as S3 sorts)."""
        return bisect_right(range(self.count), name.encode(), key=lambda i: self.key(i).encode())

    def span(self, prefix: str) -> range:
        """The indexes of the keys that start with ``prefix``."""
        if KEY_PREFIX.startswith(prefix):
            return range(self.count)
        digits = prefix.removeprefix(KEY_PREFIX)
        if digits == prefix or len(digits) > self.width or not digits.isdigit():
            return range(0)
        if not digits.isascii():
            return range(0)
        scale = 10 ** (self.width - len(digits))
        low = int(digits) * scale
        return range(min(low, self.count), min(low + scale, self.count))


def body(key: str, size: int) -> bytes:
    """The bytes of the object ``key``: the key and a newline, repeated, cut to ``size``."""
    unit = key.encode() + b"\n"
    return (unit * (size // len(unit) + 1))[:size]


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


@dataclass(slots=True)
class Counts:
    """What the server has answered since the last reset."""

    requests: dict[str, int] = field(default_factory=dict)
    open_gets: int = 0
    most_open_gets: int = 0
    bytes_sent: int = 0

    def count(self, kind: str) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1

    def as_json(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "requests": dict(self.requests),
            "most_open_gets": self.most_open_gets,
            "bytes_sent": self.bytes_sent,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_kib": usage.ru_maxrss,
        }


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    from aiohttp import web  # noqa: PLC0415

    text = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    )
    return web.Response(status=status, text=text, headers={**_XML, **(headers or {})})


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def _untoken(token: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeError, ValueError):
        return None


class FakeS3:
    """The request handler: aiohttp's low-level server calls it for every request."""

    def __init__(self, objects: Objects, latency: float = 0.0) -> None:
        self.objects = objects
        self.latency = latency
        self.counts = Counts()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        from aiohttp import web  # noqa: PLC0415

        path = request.path
        if path == STATS_PATH:
            return web.json_response(self.counts.as_json())
        if path == RESET_PATH:
            self.counts = Counts()
            return web.json_response({})
        bucket, key = self._address(request)
        if bucket != self.objects.bucket:
            self.counts.count("other")
            return _error(404, "NoSuchBucket", "The specified bucket does not exist")
        method = request.method
        if not key:
            return self._bucket(request, method)
        if method not in ("GET", "HEAD"):
            self.counts.count("other")
            return _error(501, "NotImplemented", f"{method} of an object is not served here")
        self.counts.count(method)
        if method == "HEAD":
            return self._object(request, key, send_body=False)
        counts = self.counts
        counts.open_gets += 1
        counts.most_open_gets = max(counts.most_open_gets, counts.open_gets)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            response = self._object(request, key, send_body=True)
            # Written here, not after return, so the GET stays open until its last byte
            # is handed to the transport.
            await response.prepare(request)
            await response.write_eof()
            return response
        finally:
            counts.open_gets -= 1

    def _address(self, request: web.BaseRequest) -> tuple[str, str]:
        """(bucket, key): virtual-host style when the Host starts with the bucket's
        name and a dot, else path style."""
        host = request.host.split(":", 1)[0]
        raw = request.raw_path.split("?", 1)[0]
        if host.startswith(self.objects.bucket + "."):
            return self.objects.bucket, unquote(raw.lstrip("/"))
        bucket, _, key = raw.lstrip("/").partition("/")
        return unquote(bucket), unquote(key)

    def _bucket(self, request: web.BaseRequest, method: str) -> web.StreamResponse:
        from aiohttp import web  # noqa: PLC0415

        query = request.query
        if method == "HEAD":
            self.counts.count("other")
            return web.Response(headers={"x-amz-bucket-region": "us-east-1"})
        if method == "GET" and "location" in query:
            self.counts.count("other")
            text = '<?xml version="1.0" encoding="UTF-8"?>\n<LocationConstraint/>'
            return web.Response(text=text, headers=_XML)
        if method == "GET" and query.get("list-type") == "2":
            self.counts.count("LIST")
            return self._list(query)
        self.counts.count("other")
        return _error(501, "NotImplemented", "only ListObjectsV2 is served on the bucket")

    def _list(self, query: Any) -> web.StreamResponse:
        from aiohttp import web  # noqa: PLC0415

        objects = self.objects
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        try:
            max_keys = min(int(query.get("max-keys", PAGE)), PAGE)
        except ValueError:
            return _error(400, "InvalidArgument", "max-keys is not a number")
        if max_keys < 0:
            return _error(400, "InvalidArgument", "max-keys is negative")
        span = objects.span(prefix)
        token = query.get("continuation-token")
        start_after = query.get("start-after", "")
        first = span.start
        if token is not None:
            last = _untoken(token)
            if last is None:
                return _error(400, "InvalidArgument", "The continuation token is not valid")
            first = max(first, objects.after(last))
        elif start_after:
            first = max(first, objects.after(start_after))
        common: list[str] = []
        if delimiter and delimiter in KEY_PREFIX[len(prefix) :]:
            # Every key shares one folder below the prefix: it is all the page holds.
            cut = KEY_PREFIX.index(delimiter, len(prefix)) + len(delimiter)
            common = [KEY_PREFIX[:cut]] if len(span) and token is None else []
            chosen = range(0)
        elif delimiter and any(c in delimiter for c in "0123456789"):
            return _error(501, "NotImplemented", "a delimiter with digits is not served")
        else:
            chosen = range(first, min(first + max_keys, span.stop))
        truncated = chosen.stop < span.stop and len(chosen) > 0
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{objects.bucket}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(chosen) + len(common)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
        ]
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        if "encoding-type" in query:
            # The keys need no escaping: they are the same encoded or not.
            parts.append(f"<EncodingType>{escape(query['encoding-type'])}</EncodingType>")
        parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        if token is not None:
            parts.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
        if start_after:
            parts.append(f"<StartAfter>{escape(start_after)}</StartAfter>")
        size = objects.size
        for index in chosen:
            key = objects.key(index)
            tag = etag_of(body(key, size)).replace('"', "&quot;")
            parts.append(
                f"<Contents><Key>{key}</Key><LastModified>{LISTED_MODIFIED}</LastModified>"
                f"<ETag>{tag}</ETag><Size>{size}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        parts.extend(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>" for p in common)
        if truncated:
            next_token = _token(objects.key(chosen.stop - 1))
            parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return web.Response(body="".join(parts).encode(), headers=_XML)

    def _object(self, request: web.BaseRequest, key: str, *, send_body: bool) -> web.Response:
        from aiohttp import web  # noqa: PLC0415

        objects = self.objects
        if objects.index(key) is None:
            return _error(404, "NoSuchKey", "The specified key does not exist.")
        data = objects.body(key)
        tag = etag_of(data)
        headers = {"ETag": tag, "Last-Modified": HTTP_MODIFIED, "Accept-Ranges": "bytes"}
        condition = request.headers.get("If-Match")
        if condition is not None and not _matches(condition, tag):
            return _error(412, "PreconditionFailed", "At least one of the pre-conditions failed")
        condition = request.headers.get("If-None-Match")
        if condition is not None and _matches(condition, tag):
            return web.Response(status=304, headers=headers)
        size = len(data)
        span: tuple[int, int] | None = None
        part = request.query.get("partNumber")
        if part is not None:
            if part != "1":
                return _error(416, "InvalidPartNumber", "The requested partnumber is not valid")
            span = (0, size - 1)
            headers["x-amz-mp-parts-count"] = "1"
        elif "Range" in request.headers:
            match = _RANGE.fullmatch(request.headers["Range"].strip())
            if match is not None and (match[1] or match[2]):
                span = _span(match[1], match[2], size)
                if span is None:
                    headers["Content-Range"] = f"bytes */{size}"
                    return _error(
                        416, "InvalidRange", "The requested range is not satisfiable", headers
                    )
        status = 200
        if span is not None:
            start, end = span
            data = data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            status = 206
        headers["Content-Type"] = "binary/octet-stream"
        if not send_body:
            headers["Content-Length"] = str(len(data))
            return web.Response(status=status, headers=headers)
        self.counts.bytes_sent += len(data)
        return web.Response(status=status, body=data, headers=headers)


def _matches(condition: str, tag: str) -> bool:
    """Whether an If-Match / If-None-Match list names ``tag`` (strong comparison)."""
    names = [name.strip() for name in condition.split(",")]
    return "*" in names or tag in names


def _span(first: str, last: str, size: int) -> tuple[int, int] | None:
    """The bytes a ``Range`` of one span asks for, or None when none is there."""
    if not first:  # the last ``last`` bytes
        count = int(last)
        return (max(size - count, 0), size - 1) if count and size else None
    start = int(first)
    if start >= size:
        return None
    end = min(int(last), size - 1) if last else size - 1
    return (start, end) if end >= start else None


async def serve(objects: Objects, host: str, port: int, latency: float) -> None:
    """Serve until SIGTERM or SIGINT; print the address once listening."""
    # Imported here: a benchmark that only starts the server (FakeS3Process) stays
    # small, and a command it starts inherits no aiohttp pages in its peak RSS.
    from aiohttp import web  # noqa: PLC0415

    server = web.Server(FakeS3(objects, latency), access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = runner.addresses[0]
    print(f"http://{bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


class FakeS3Process:
    """The fake S3 in a subprocess of its own: ``with FakeS3Process(n, size) as s3:``,
    then ``s3.endpoint``, ``s3.stats()``, ``s3.reset()``."""

    def __init__(self, objects: int, size: int, *, latency_ms: float = 0.0) -> None:
        self.objects = Objects(objects, size)
        self.latency_ms = latency_ms
        self.endpoint = ""
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        command = [sys.executable, os.path.abspath(__file__), "--port", "0"]
        command += ["--objects", str(self.objects.count), "--size", str(self.objects.size)]
        command += ["--latency-ms", str(self.latency_ms)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if not line.startswith("http://"):
            self.__exit__(None, None, None)
            raise RuntimeError(f"the fake S3 did not start (it said {line!r})")
        self.endpoint = line
        return self

    def __exit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def _ask(self, path: str) -> dict[str, Any]:
        from urllib.request import urlopen  # noqa: PLC0415

        with urlopen(self.endpoint + path, timeout=30) as answer:
            said: dict[str, Any] = json.load(answer)
        return said

    def stats(self) -> dict[str, Any]:
        return self._ask(STATS_PATH)

    def reset(self) -> None:
        self._ask(RESET_PATH)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000, help="keys (1000000)")
    parser.add_argument("--size", type=parse_size, default=1024, help="each body (1KiB)")
    parser.add_argument("--host", default="127.0.0.1", help="(127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="(0: a free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="before each GET (0)")
    args = parser.parse_args(argv)
    if args.objects < 0 or args.size < 0:
        parser.error("--objects and --size must not be negative")
    objects = Objects(args.objects, args.size)
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        asyncio.run(serve(objects, args.host, args.port, args.latency_ms / 1000))
    else:
        uvloop.run(serve(objects, args.host, args.port, args.latency_ms / 1000))


if __name__ == "__main__":
    main()
