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

    moto 5.2 answers it with the whole object (HTTP 200); S3 answers with the upload
    part: HTTP 206, its ``Content-Range`` in the object, ``x-amz-mp-parts-count``,
    and, with ``ChecksumMode=ENABLED``, the part's own checksum. Everything else
    (If-Match, versions, errors) stays moto's. For the process's moto servers, while
    the block runs; COMPOSITE verification is tested through it.
    """
    from moto.s3.responses import S3Response  # noqa: PLC0415 - optional, the 'demo' extra
    from moto.s3.utils import compute_checksum  # noqa: PLC0415

    original = S3Response.get_object

    def get_object(self: Any) -> Any:
        status, headers, body = original(self)
        number = self._get_int_param("partNumber")
        if not number or status != 200 or not isinstance(body, bytes):
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
