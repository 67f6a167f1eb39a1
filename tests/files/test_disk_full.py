"""A full disk: when the preallocation of a resumable download's partial file fails
(ENOSPC, EFBIG, any ``OSError``), the partial and its journal go, as a temp file does.
That object fails; the space it took comes back, and the objects after it that fit
are downloaded.

Run for real: ``asyncdl cp -r --concurrency 1`` as a process of its own, into an
8 MiB ext4 file system and an 8 MiB tmpfs that the test mounts (and unmounts), and
under ``RLIMIT_FSIZE`` (the kernel's ``EFBIG``, which needs no mount). ext4 keeps the
blocks a failed ``posix_fallocate`` got; tmpfs gives them back but keeps the file.
Mounting needs root: elsewhere the two mounted cases run under ``RLIMIT_FSIZE`` too.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload
from ..spawn import spawned

MIB = 1024 * 1024
#: Larger than the whole file system, or than the file size limit.
BIG = 12 * MIB
#: Each larger than a chunk (64 KiB): each a resumable download with a partial file.
SMALL = 192 * 1024
SIZE_LIMIT = 4 * MIB
#: Sets the file size limit, then runs the command (``exec``: the limit stays).
_LIMITED = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


@contextmanager
def small_disk(kind: str, where: Path, image: Path, *, mount: bool) -> Iterator[None]:
    """An 8 MiB file system of ``kind`` mounted at ``where`` while the block runs (with
    ``mount``), else a plain directory there."""
    where.mkdir()
    if not mount:
        yield
        return
    if kind == "ext4":
        with image.open("wb") as file:
            file.truncate(8 * MIB)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        command = ["mount", "-o", "loop", str(image), str(where)]
    else:
        command = ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", str(where)]
    subprocess.run(command, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(where)], check=True, capture_output=True)


@pytest.mark.parametrize("disk", ["ext4", "tmpfs", "file-size-limit"])
def test_a_preallocation_that_fails_leaves_nothing_and_the_rest_is_downloaded(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, disk: str
) -> None:
    objects = {"p/0-big.bin": payload(BIG, seed=1)}
    objects.update({f"p/{n}.bin": payload(SMALL, seed=n + 2) for n in range(1, 11)})
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    mount = disk != "file-size-limit" and os.geteuid() == 0
    dest = tmp_path / "disk"
    argv = [
        sys.executable,
        "-m",
        "asyncdl.cli",
        "cp",
        "-r",
        "--endpoint-url",
        proxy.url,
        "--chunk-size",
        "64KiB",
        "--concurrency",
        "1",
        f"s3://{bucket}/p/",
        str(dest),
    ]
    if not mount:
        argv = [sys.executable, "-c", _LIMITED, str(SIZE_LIMIT), *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    with small_disk(disk, dest, tmp_path / "disk.img", mount=mount):
        before = free_bytes(dest) if mount else 0
        # A write past the size limit sends SIGXFSZ, which kills by default: ignored,
        # the call fails with EFBIG, as a program that handles a full disk sees it.
        with spawned(
            argv,
            ignoring=(signal.SIGXFSZ,),
            env={**env, **FAKE_ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as child:
            stdout, stderr = child.communicate(timeout=120)
        assert child.returncode == 1, stderr
        errors = stderr.splitlines()
        assert len(errors) == 3, stderr  # the error, the count, the summary line
        assert errors[2].startswith("10 downloaded "), stderr
        assert errors[2].endswith(", 1 failed"), stderr
        assert errors[0].startswith(f"error: s3://{bucket}/p/0-big.bin: "), stderr
        assert errors[1] == "1 of 11 objects failed"
        assert len(stdout.splitlines()) == 10, stdout
        # The ten that fit are there, and nothing else: no partial, journal or temp file.
        made = ["lost+found"] if disk == "ext4" and mount else []  # mkfs.ext4's own
        assert sorted(os.listdir(dest)) == sorted([f"{n}.bin" for n in range(1, 11)] + made)
        for n in range(1, 11):
            assert (dest / f"{n}.bin").read_bytes() == objects[f"p/{n}.bin"]
        if mount:
            # The space the failed preallocation took came back.
            for n in range(1, 11):
                (dest / f"{n}.bin").unlink()
            assert free_bytes(dest) >= before - 64 * 1024, (before, free_bytes(dest))


def test_the_size_limit_is_the_kernels() -> None:
    """The file size limit the test sets is one the kernel enforces on
    ``posix_fallocate``: EFBIG, not a file of that size."""
    code = (
        "import os, resource, signal, sys, tempfile\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({SIZE_LIMIT}, {SIZE_LIMIT}))\n"
        "with tempfile.TemporaryFile() as file:\n"
        "    try:\n"
        f"        os.posix_fallocate(file.fileno(), 0, {BIG})\n"
        "    except OSError as exc:\n"
        "        print(exc.errno)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(errno.EFBIG)
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != SIZE_LIMIT  # the child's alone
