"""The S3 servers the benchmarks start (moto, fast-moto, s3rver), and the seeding of objects.

moto runs in the benchmark's own process; s3rver (npm) in a Node process of its own,
installed by the benchmark into a cache directory on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers import MiB, key_name, process_cpu

#: The servers the benchmark can start itself (see serve()).
SERVERS = ("moto", "fast-moto", "s3rver")
#: What S3 stores a checksum with; NONE puts objects whole with no checksum at all.
CHECKSUMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256", "NONE")
S3RVER_VERSION = "3.7.1"
#: s3rver's own credentials (it checks signatures against them).
S3RVER_ENV = {
    "AWS_ACCESS_KEY_ID": "S3RVER",
    "AWS_SECRET_ACCESS_KEY": "S3RVER",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass(frozen=True, slots=True)
class Server:
    """A running server: its endpoint, what to call it in tables, and its process."""

    endpoint: str
    name: str
    #: A server in a process of its own (s3rver), whose CPU is counted with the proxy's.
    pid: int | None = None

    def cpu(self) -> float:
        """CPU seconds of the fake network and server: this process (the proxy, and moto
        when it is embedded), plus the server's own process."""
        return process_cpu() + (_proc_cpu(self.pid) if self.pid is not None else 0.0)


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        # Fields after the command name (which may hold spaces): utime, stime are 14, 15.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(stack: ExitStack, server: str, part_gets: bool, scratch: str | None) -> Server:
    """Start ``server``; its data, for s3rver, in a fresh directory under ``scratch``.

    "fast-moto" is moto reading only the bytes a ranged or PartNumber GET sends (moto
    re-reads the whole object for each), and naming checksums as S3 does on HEAD.
    """
    if server == "s3rver":
        return stack.enter_context(s3rver(scratch))
    from asyncdl.testing import moto_server as moto  # noqa: PLC0415

    endpoint: str = stack.enter_context(moto.moto_server())
    # S3 answers a PartNumber GET with the part, as moto does since 5.2.6; a store
    # without part GETs (moto before) with the whole object. Either, whatever moto is.
    if part_gets:
        stack.enter_context(moto.serving_upload_parts())
    else:
        stack.enter_context(moto.serving_whole_objects_for_parts())
    if server == "fast-moto":
        stack.enter_context(moto.serving_ranges())
        stack.enter_context(moto.serving_checksum_types())
    parts = "PartNumber GETs as S3" if part_gets else "PartNumber GETs answered whole"
    return Server(endpoint, f"{server} ({parts}; in the benchmark's process)")


def s3rver_command() -> list[str]:
    """node and s3rver's entry point, installed with npm into the cache on first use."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise SystemExit(
            "--server s3rver needs Node.js: `node` and `npm` are not on PATH "
            "(install them, e.g. apt-get install nodejs npm, or use --server fast-moto)"
        )
    cache = Path(os.environ.get("ASYNCDL_BENCH_CACHE", Path.home() / ".cache" / "asyncdl-bench"))
    home = cache / f"s3rver-{S3RVER_VERSION}"
    script = home / "node_modules" / "s3rver" / "bin" / "s3rver.js"
    if not script.is_file():
        print(f"installing s3rver {S3RVER_VERSION} into {home} (npm)", flush=True)
        home.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--prefix", str(home), "--no-audit", "--no-fund"]
        subprocess.run([*command, f"s3rver@{S3RVER_VERSION}"], check=True)
    # s3rver's continuation tokens are DES-encrypted, which OpenSSL 3 (Node 17+) keeps
    # in its legacy provider: without it every listing past 1000 keys is a 500.
    return [node, "--openssl-legacy-provider", str(script)]


@contextlib.contextmanager
def s3rver(scratch: str | None) -> Iterator[Server]:
    """s3rver on a free loopback port, with a fresh data directory removed after."""
    from asyncdl.testing.moto_server import free_port  # noqa: PLC0415

    node_script = s3rver_command()
    # The clients (worker subprocesses included) sign with s3rver's credentials.
    os.environ.update(S3RVER_ENV)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    data = Path(tempfile.mkdtemp(prefix="s3rver-", dir=scratch))
    port = free_port()
    command = [*node_script, "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "-s"]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_listening(port, process, log)
            yield Server(
                f"http://127.0.0.1:{port}",
                f"s3rver {S3RVER_VERSION} (Node {_node_version()}, its own process; "
                "no checksums stored)",
                process.pid,
            )
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            shutil.rmtree(data, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            said = log.read().decode(errors="replace")
            raise SystemExit(f"s3rver exited {process.returncode} at start:\n{said}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise SystemExit("s3rver did not listen within 30 s")


def _node_version() -> str:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


@dataclass(frozen=True, slots=True)
class Seeding:
    """How the objects are stored: their checksum, and their upload parts, if any."""

    size: int
    #: One of CHECKSUMS.
    checksum: str = "CRC32"
    #: Upload in parts of this size (None: one PUT, so a FULL_OBJECT checksum).
    part_size: int | None = None
    #: Of a multipart upload: COMPOSITE or FULL_OBJECT.
    checksum_type: str = "COMPOSITE"

    async def put(self, s3: Any, bucket: str, key: str) -> str:
        """Put one object of random bytes; return its MD5.

        A multipart object's parts are made one at a time, so an object of several GiB
        never sits in memory whole.
        """
        if self.part_size is not None:
            return await self.put_multipart(s3, bucket, key, self.part_size)
        body = os.urandom(self.size)
        if self.checksum == "NONE":
            await s3.put_object(Bucket=bucket, Key=key, Body=body)
        else:
            await s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm=self.checksum)
        return hashlib.md5(body).hexdigest()

    async def put_multipart(self, s3: Any, bucket: str, key: str, part_size: int) -> str:
        """Upload in parts, each with its checksum; S3 keeps a COMPOSITE checksum of
        theirs, or a FULL_OBJECT one of the whole body, as ``checksum_type`` says."""
        algorithm = self.checksum
        upload = await s3.create_multipart_upload(
            Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm, ChecksumType=self.checksum_type
        )
        parts = []
        digest = hashlib.md5()
        for number, start in enumerate(range(0, self.size, part_size), start=1):
            body = os.urandom(min(part_size, self.size - start))
            digest.update(body)
            answer = await s3.upload_part(
                Bucket=bucket,
                Key=key,
                UploadId=upload["UploadId"],
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm=algorithm,
            )
            part = {"PartNumber": number, "ETag": answer["ETag"]}
            # s3rver keeps no checksum, and answers none to send back.
            field = f"Checksum{algorithm}"
            parts.append(part | ({field: answer[field]} if field in answer else {}))
        await s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
        )
        return digest.hexdigest()


def seeding_client(endpoint: str, seeding: Seeding) -> Any:
    from aiobotocore.config import AioConfig  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415

    # botocore adds a CRC32 to every PUT unless told a checksum is needed only when required.
    calculation = "when_required" if seeding.checksum == "NONE" else "when_supported"
    config = AioConfig(request_checksum_calculation=calculation)
    return get_session().create_client("s3", endpoint_url=endpoint, config=config)


async def seed(endpoint: str, bucket: str, objects: int, seeding: Seeding) -> list[str]:
    """Create ``bucket`` and put the objects; return each object's MD5 by index."""
    size = seeding.size
    digests = [""] * objects
    # Bound the bodies held at once: 32 small ones, or ~256 MiB of large ones.
    semaphore = asyncio.Semaphore(max(1, min(32, 256 * MiB // max(size, 1))))
    async with seeding_client(endpoint, seeding) as s3:
        await s3.create_bucket(Bucket=bucket)

        async def put(index: int) -> None:
            async with semaphore:
                digests[index] = await seeding.put(s3, bucket, key_name(index))

        async with asyncio.TaskGroup() as tasks:
            for index in range(objects):
                tasks.create_task(put(index))
    return digests


async def stored_checksum(endpoint: str, bucket: str) -> str:
    """What the server's HEAD says of the first object's checksum (the table's premise)."""
    from aiobotocore.session import get_session  # noqa: PLC0415

    async with get_session().create_client("s3", endpoint_url=endpoint) as s3:
        head = await s3.head_object(Bucket=bucket, Key=key_name(0), ChecksumMode="ENABLED")
    said = [f"{name[8:]} {value}" for name, value in head.items() if name.startswith("Checksum")]
    return ", ".join(said) or "none"


async def delete_bucket(endpoint: str, bucket: str, objects: int) -> None:
    """Leave an existing server as it was found (moto's dies with the benchmark)."""
    from aiobotocore.session import get_session  # noqa: PLC0415

    async with get_session().create_client("s3", endpoint_url=endpoint) as s3:
        for start in range(0, objects, 1000):
            keys = [{"Key": key_name(i)} for i in range(start, min(objects, start + 1000))]
            await s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        await s3.delete_bucket(Bucket=bucket)
