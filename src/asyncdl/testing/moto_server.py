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
