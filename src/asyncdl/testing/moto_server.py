"""moto's S3 server on a free loopback port, for the demo, tests and benchmarks."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Credentials and region moto accepts; set before any client is created.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's server in a thread; yield its endpoint URL."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - optional, the 'demo' extra

    for name, value in FAKE_ENV.items():
        os.environ.setdefault(name, value)
    # werkzeug logs every request at INFO; a bulk run would drown the terminal.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server: Any = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextmanager
def serving_upload_parts() -> Iterator[None]:
    """Make moto's GetObject answer ``PartNumber`` on a multipart object as S3 does.

    moto before 5.2.6 answers it with the whole object (HTTP 200); S3, and moto since,
    with the upload part: HTTP 206, its ``Content-Range`` in the object,
    ``x-amz-mp-parts-count``, and, with ``ChecksumMode=ENABLED``, the part's own
    checksum. Everything else (If-Match, versions, errors) stays moto's. For the
    process's moto servers, while the block runs; COMPOSITE verification is tested
    through it, whichever moto is installed.
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - optional, the 'demo' extra
    from moto.s3.utils import compute_checksum  # noqa: PLC0415

    original = S3Response.get_object

    def get_object(self: Any) -> Any:
        status, headers, body = original(self)
        number = self._get_int_param("partNumber")
        if not number or status != 200 or not isinstance(body, bytes | _Window):
            return status, headers, body
        key, _ = self._get_key()
        if not key.multipart:
            return status, headers, body
        # The parts' own buffers are gone after completion; their sizes remain.
        sizes = [key.multipart.parts[n].size for n in key.multipart.partlist]
        if number > len(sizes):
            return 416, {}, b""
        start = sum(sizes[: number - 1])
        part = body[start : start + sizes[number - 1]]
        headers = {
            name: value
            for name, value in headers.items()
            if not name.lower().startswith(("x-amz-checksum-", "content-length"))
        }
        headers["content-range"] = f"bytes {start}-{start + len(part) - 1}/{key.size}"
        headers["x-amz-mp-parts-count"] = str(len(sizes))
        algorithm = key.checksum_algorithm
        if self.headers.get("x-amz-checksum-mode") == "ENABLED" and algorithm:
            value = compute_checksum(part, algorithm).decode()
            headers[f"x-amz-checksum-{algorithm.lower()}"] = value
            headers["x-amz-checksum-type"] = key.checksum_type or "COMPOSITE"
        return 206, headers, part

    # A patch of moto's handler, the one place it differs from S3 here.
    S3Response.get_object = get_object  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.get_object = original  # type: ignore[method-assign]


@contextmanager
def serving_whole_objects_for_parts() -> Iterator[None]:
    """Make moto's GetObject answer ``PartNumber`` on a multipart object with the whole
    object (HTTP 200, no ``Content-Range``), as moto did before 5.2.6 and as a store
    without part GETs does: the engine must notice, and fetch by ranges.

    The part number is taken out of the request before moto reads it; a single-part
    object's part 1 stays moto's answer. For the process's moto servers, while the
    block runs (with ``serving_upload_parts()``, in either order, this one wins).
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - optional, the 'demo' extra

    original = S3Response.get_object

    def get_object(self: Any) -> Any:
        if self.querystring.get("partNumber") is not None:
            key, _ = self._get_key()
            if key.multipart:
                self.querystring = {
                    name: value for name, value in self.querystring.items() if name != "partNumber"
                }
        return original(self)

    S3Response.get_object = get_object  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.get_object = original  # type: ignore[method-assign]


class _Window:
    """A moto key's bytes, read from its buffer only where sliced.

    It stands in for ``key.value`` in a GET: moto, and ``serving_upload_parts()``, slice
    the value for a range or a part, so a slice reads just those bytes; a value sent
    whole is read whole at the end (``serving_ranges()``'s ``key_response``).
    """

    __slots__ = ("_key",)

    def __init__(self, key: Any) -> None:
        self._key = key

    def __len__(self) -> int:
        return int(self._key.size)

    def __getitem__(self, index: slice) -> bytes:
        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ValueError("a key's bytes are read in order")
        # The lock moto holds for its own reads: a seek and a read are one step.
        with self._key.lock:
            buffer = self._key._value_buffer
            buffer.seek(start)
            data: bytes = buffer.read(max(0, stop - start))
            return data

    def __bytes__(self) -> bytes:
        return self[:]


class _LazyKey:
    """A moto key whose ``value`` is a :class:`_Window`; the rest is the key's own."""

    __slots__ = ("_key",)

    def __init__(self, key: Any) -> None:
        self._key = key

    @property
    def value(self) -> _Window:
        return _Window(self._key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._key, name)


@contextmanager
def serving_ranges() -> Iterator[None]:
    """Make moto's GetObject read only the bytes it sends, as a store on disk does.

    moto reads (copies) the whole object for every GET, then slices out the range
    or part asked for: a 512 MiB object in 64 ranges of 8 MiB costs it 32 GiB of
    copying, and a benchmark's wall time is moto's. Here the GET's value is read from
    moto's buffer where it is sliced; every answer (status, headers, ranges honoured or
    ignored, errors) stays moto's, and ``serving_upload_parts()`` may run with it. For
    the process's moto servers, while the block runs; the benchmark's fast server.
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - optional, the 'demo' extra

    original_get, original_response = S3Response.get_object, S3Response.key_response

    def get_object(self: Any) -> Any:
        # One S3Response per request: the lazy key is this request's only.
        get_key = self._get_key

        def lazy_key(*args: Any, **kwargs: Any) -> tuple[_LazyKey, bool]:
            key, not_modified = get_key(*args, **kwargs)
            return _LazyKey(key), not_modified

        self._get_key = lazy_key
        return original_get(self)

    def key_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        status, headers, body = original_response(self, *args, **kwargs)
        # Not a range or a part (or one moto ignores): the whole object after all.
        return status, headers, bytes(body) if isinstance(body, _Window) else body

    S3Response.get_object = get_object  # type: ignore[method-assign]
    S3Response.key_response = key_response  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.get_object = original_get  # type: ignore[method-assign]
        S3Response.key_response = original_response  # type: ignore[method-assign]


def _name_checksum(headers: dict[str, Any], key: Any) -> None:
    """Say ``key``'s checksum as S3 does: its type, and a COMPOSITE value with its ``-N``."""
    algorithm = key.checksum_algorithm
    name = f"x-amz-checksum-{(algorithm or '').lower()}"
    if not algorithm or name not in headers:
        return
    checksum_type = key.checksum_type or "FULL_OBJECT"  # moto leaves a single PUT's unsaid
    if checksum_type == "COMPOSITE":
        headers[name] = f"{key.checksum_value}-{key.checksum_parts}"
    headers["x-amz-checksum-type"] = checksum_type


@contextmanager
def serving_checksum_types() -> Iterator[None]:
    """Make moto's HEAD and GetObject name the checksum as S3 does (``ChecksumMode=ENABLED``).

    S3 sends ``x-amz-checksum-type`` with the value (FULL_OBJECT for an object put
    whole) and a COMPOSITE value with its ``-N``, on HEAD as on a whole GET. moto 5.2
    leaves the type out of every HEAD and out of a single PUT's GET, and the ``-N`` out
    of HEAD, so a client that reads the type from a HEAD takes another path on moto
    than on S3. A ranged GET still carries no checksum (moto strips it, type and all);
    ``PartNumber`` answers stay as they were (``serving_upload_parts()`` names a part's).
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - optional, the 'demo' extra

    original_get, original_head = S3Response.get_object, S3Response.head_object

    def get_object(self: Any) -> Any:
        status, headers, body = original_get(self)
        # A part's own checksum (serving_upload_parts()) is the part's to name.
        whole = status == 200 and not self._get_int_param("partNumber")
        if whole and self.headers.get("x-amz-checksum-mode") == "ENABLED":
            _name_checksum(headers, self._get_key()[0])
        return status, headers, body

    def head_object(
        self: Any, bucket_name: str, query: dict[str, Any], key_name: str, headers: Any
    ) -> Any:
        status, answer, body = original_head(self, bucket_name, query, key_name, headers)
        wanted = headers.get("x-amz-checksum-mode") == "ENABLED" and "partNumber" not in query
        if status == 200 and wanted:
            version = query.get("versionId", [None])[0]
            key = self.backend.get_object(bucket_name, key_name, version_id=version)
            _name_checksum(answer, key)
        return status, answer, body

    S3Response.get_object = get_object  # type: ignore[method-assign]
    S3Response.head_object = head_object  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.get_object = original_get  # type: ignore[method-assign]
        S3Response.head_object = original_head  # type: ignore[method-assign]
