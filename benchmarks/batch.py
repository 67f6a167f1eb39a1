"""Batch benchmark: asyncdl against its peers, many objects through a link with latency.

It seeds N objects into a fresh bucket (directly, not through the proxy), then
downloads them all with each client through asyncdl's test proxy, which adds
``--rtt-ms`` to every request. Each client runs in its own subprocess so its CPU
time and peak RSS are its own; requests are counted at the proxy; every file is
checked (size and MD5) against what was seeded. Medians over ``--runs`` are printed
as a table, with ratios against asyncdl-get-first, and optionally written as JSON.

    python benchmarks/batch.py --objects 1000 --size 1KiB --concurrency 10 --rtt-ms 20
    python benchmarks/batch.py --objects 1 --size 512MiB --multipart 16MiB --server fast-moto
    nox -s bench -- --objects 1 --size 512MiB --dest /some/dir

Client libraries are imported inside the functions that use them (hence the
``noqa: PLC0415``): a worker loads only its own client, so its RSS is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import re
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
CLIENTS = (
    "asyncdl-get-first",
    "asyncdl-head-first",
    # The validation modes side by side (issue: verified downloads): listing metadata
    # lets small objects be verified in their one GET; "required" makes GET-first send
    # a HEAD alongside; "-off" turns checking off.
    "asyncdl-prefix",
    "asyncdl-prefix-off",
    "asyncdl-get-first-required",
    "asyncdl-head-first-off",
    "asyncdl-get-first-off",
    "s3transfer-default",
    "s3transfer-no-head",
    "aiobotocore-loop",
    "obstore",
)
BASELINE = "asyncdl-get-first"
METRICS = (
    "wall_s",
    "objects_per_s",
    "cpu_ms_per_object",
    "get_per_object",
    "head_per_object",
    "part_gets_per_object",
    "peak_rss_mib",
    "mib_per_s",
    "max_in_flight",
    "server_cpu_ms_per_object",
    "verified_per_object",
)
_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": MiB, "gib": 1024 * MiB}
#: What S3 stores a checksum with; NONE puts objects whole with no checksum at all.
CHECKSUMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256", "NONE")
#: The servers the benchmark can start itself (see serve()).
SERVERS = ("moto", "fast-moto")
# Peers write files with aiofiles in 1 MiB pieces, as asyncdl does (its write_size).
_WRITE_SIZE = MiB


def parse_size(text: str) -> int:
    """``1KiB``, ``64KiB``, ``512MiB``, ``1GiB`` or plain bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]ib|b)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1KiB, 512MiB, 1024)")
    return int(match[1]) * _UNITS[(match[2] or "").lower()]


def parse_clients(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown clients {unknown}; choose from {CLIENTS}")
    return names


PREFIX = "bench/"


def key_name(index: int) -> str:
    return f"{PREFIX}{index:07d}"


def file_name(index: int) -> str:
    return f"{index:07d}"


# -- the worker: one client, one subprocess ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """What a worker downloads, and where to."""

    endpoint: str
    bucket: str
    objects: int
    concurrency: int
    dest: Path

    def items(self) -> Iterator[tuple[str, str, Path]]:
        return ((self.bucket, key_name(i), self.dest / file_name(i)) for i in range(self.objects))


def process_cpu() -> float:
    """User + system seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """Wall and CPU time (all threads) between the first download and the last."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._started = (0.0, 0.0)
        #: Objects checked against S3's checksum (asyncdl reports it; peers check none).
        self.verified = 0

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.perf_counter(), process_cpu()

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> None:
        wall, cpu = self._now()
        self.wall, self.cpu = wall - self._started[0], cpu - self._started[1]


async def run_asyncdl(
    job: Job, meter: Meter, strategy: str, validate: str = "when_available", prefix: bool = False
) -> list[str]:
    import asyncdl  # noqa: PLC0415

    os.environ["AWS_ENDPOINT_URL_S3"] = job.endpoint
    errors: list[str] = []
    config = asyncdl.TransferConfig(max_concurrency=job.concurrency, validate=validate)
    async with asyncdl.Engine(config=config) as engine:
        meter.start()
        if prefix:
            # Listed as it downloads: each object's size and ETag come from the listing.
            results = engine.download_prefix(job.bucket, PREFIX, job.dest)
        else:
            results = engine.download_many(job.items(), strategy=strategy)
        async for result in results:
            if result.error is not None:
                errors.append(repr(result.error))
            meter.verified += result.verified
        meter.stop()
    return errors


def run_s3transfer(job: Job, meter: Meter, no_head: bool) -> list[str]:
    import boto3  # noqa: PLC0415
    from boto3.s3.transfer import TransferConfig, create_transfer_manager  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    options: dict[str, Any] = {"max_pool_connections": max(10, job.concurrency)}
    if no_head:
        # s3transfer skips its HEAD only when the caller opts out of response checksums.
        options["response_checksum_validation"] = "when_required"
    client = boto3.client("s3", endpoint_url=job.endpoint, config=Config(**options))
    # "classic": the threaded s3transfer manager, never the CRT one boto3 may pick.
    config = TransferConfig(max_concurrency=job.concurrency, preferred_transfer_client="classic")
    errors: list[str] = []
    with create_transfer_manager(client, config) as manager:
        meter.start()
        futures = [manager.download(bucket, key, str(path)) for bucket, key, path in job.items()]
        for future in futures:
            try:
                future.result()
            except Exception as exc:
                errors.append(repr(exc))
        meter.stop()
    return errors


async def _write_file(path: Path, chunks: AsyncIterable[bytes]) -> None:
    """Write an async iterable of bytes to ``path`` through aiofiles' thread pool."""
    import aiofiles  # noqa: PLC0415

    async with aiofiles.open(path, "wb") as file:
        async for chunk in chunks:
            await file.write(chunk)


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def run_aiobotocore(job: Job, meter: Meter) -> list[str]:
    from aiobotocore.config import AioConfig  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415

    errors: list[str] = []
    semaphore = asyncio.Semaphore(job.concurrency)
    config = AioConfig(max_pool_connections=max(10, job.concurrency))
    async with get_session().create_client("s3", endpoint_url=job.endpoint, config=config) as s3:

        async def fetch(bucket: str, key: str, path: Path) -> None:
            async with semaphore:
                try:
                    response = await s3.get_object(Bucket=bucket, Key=key)
                    async with response["Body"] as body:
                        data = await body.read()
                    await _write_file(path, _one(data))
                except Exception as exc:
                    errors.append(repr(exc))

        meter.start()
        async with asyncio.TaskGroup() as tasks:
            for item in job.items():
                tasks.create_task(fetch(*item))
        meter.stop()
    return errors


async def run_obstore(job: Job, meter: Meter) -> list[str]:
    import obstore  # noqa: PLC0415
    from obstore.store import S3Store  # noqa: PLC0415

    env = {
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
    }
    config = {name: os.environ[var] for name, var in env.items() if var in os.environ}
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    store = S3Store(
        job.bucket,
        config={**config, "endpoint": job.endpoint, "region": region},  # type: ignore[arg-type]
        # The proxy (and moto) speak plain HTTP; obstore refuses it unless told.
        client_options={"allow_http": True},
    )
    errors: list[str] = []
    semaphore = asyncio.Semaphore(job.concurrency)

    async def fetch(key: str, path: Path) -> None:
        async with semaphore:
            try:
                result = await obstore.get_async(store, key)
                # Streamed, so a large object is never held whole in memory.
                await _write_file(path, result.stream(min_chunk_size=_WRITE_SIZE))
            except Exception as exc:
                errors.append(repr(exc))

    meter.start()
    async with asyncio.TaskGroup() as tasks:
        for _, key, path in job.items():
            tasks.create_task(fetch(key, path))
    meter.stop()
    return errors


RUNNERS: dict[str, Callable[[Job, Meter], list[str]]] = {
    "asyncdl-get-first": lambda job, m: asyncio.run(run_asyncdl(job, m, "get-first")),
    "asyncdl-head-first": lambda job, m: asyncio.run(run_asyncdl(job, m, "head-first")),
    "asyncdl-prefix": lambda job, m: asyncio.run(run_asyncdl(job, m, "auto", prefix=True)),
    "asyncdl-prefix-off": lambda job, m: asyncio.run(
        run_asyncdl(job, m, "auto", validate="off", prefix=True)
    ),
    "asyncdl-get-first-required": lambda job, m: asyncio.run(
        run_asyncdl(job, m, "get-first", validate="required")
    ),
    "asyncdl-head-first-off": lambda job, m: asyncio.run(
        run_asyncdl(job, m, "head-first", validate="off")
    ),
    "asyncdl-get-first-off": lambda job, m: asyncio.run(
        run_asyncdl(job, m, "get-first", validate="off")
    ),
    "s3transfer-default": partial(run_s3transfer, no_head=False),
    "s3transfer-no-head": partial(run_s3transfer, no_head=True),
    "aiobotocore-loop": lambda job, m: asyncio.run(run_aiobotocore(job, m)),
    "obstore": lambda job, m: asyncio.run(run_obstore(job, m)),
}


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB.

    Linux carries ru_maxrss across exec, so a worker forked from the orchestrator
    (moto's server and all) would report the orchestrator's peak; VmHWM is the
    worker's own address space only.
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS


def worker_main(args: argparse.Namespace) -> None:
    """Run one client and print one JSON line: its times, peak RSS and errors."""
    job = Job(args.endpoint_url, args.bucket, args.objects, args.concurrency, Path(args.dest))
    meter = Meter()
    errors = RUNNERS[args.worker](job, meter)
    report: dict[str, Any] = {"wall_s": meter.wall, "cpu_s": meter.cpu}
    report["verified"] = meter.verified
    report["peak_rss_kib"] = peak_rss_kib()
    print(json.dumps({**report, "errors": len(errors), "first_errors": errors[:3]}))


# -- the orchestrator: server, proxy, seeding, one subprocess per client and run --------


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

    async def put(self, s3: Any, bucket: str, key: str, body: bytes) -> None:
        if self.part_size is not None:
            await self.put_multipart(s3, bucket, key, body, self.part_size)
        elif self.checksum == "NONE":
            await s3.put_object(Bucket=bucket, Key=key, Body=body)
        else:
            await s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm=self.checksum)

    async def put_multipart(
        self, s3: Any, bucket: str, key: str, body: bytes, part_size: int
    ) -> None:
        """Upload ``body`` in parts, each with its checksum; S3 keeps a COMPOSITE checksum
        of theirs, or a FULL_OBJECT one of the whole body, as ``checksum_type`` says."""
        algorithm = self.checksum
        upload = await s3.create_multipart_upload(
            Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm, ChecksumType=self.checksum_type
        )
        parts = []
        for number, start in enumerate(range(0, len(body), part_size), start=1):
            answer = await s3.upload_part(
                Bucket=bucket,
                Key=key,
                UploadId=upload["UploadId"],
                PartNumber=number,
                Body=body[start : start + part_size],
                ChecksumAlgorithm=algorithm,
            )
            field = f"Checksum{algorithm}"
            parts.append({"PartNumber": number, "ETag": answer["ETag"], field: answer[field]})
        await s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
        )


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
                body = os.urandom(size)
                digests[index] = hashlib.md5(body).hexdigest()
                await seeding.put(s3, bucket, key_name(index), body)

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


def verify(dest: Path, digests: list[str], size: int) -> list[str]:
    """Every expected file, with the right size and bytes, and nothing else left behind."""
    problems = []
    expected = {file_name(i) for i in range(len(digests))}
    problems += [f"stray file {name}" for name in sorted(set(os.listdir(dest)) - expected)]
    for index, digest in enumerate(digests):
        path = dest / file_name(index)
        if not path.is_file():
            problems.append(f"{path.name} missing")
        elif path.stat().st_size != size:
            problems.append(f"{path.name} has {path.stat().st_size} bytes, not {size}")
        else:
            with path.open("rb") as file:
                if hashlib.file_digest(file, "md5").hexdigest() != digest:
                    problems.append(f"{path.name} has the wrong bytes")
    return problems


def run_client(
    client: str, args: argparse.Namespace, proxy: Any, bucket: str, digests: list[str]
) -> dict[str, Any]:
    """One client, one run, in a fresh subprocess; the proxy counts its requests."""
    dest = Path(tempfile.mkdtemp(prefix=f"bench-{client}-", dir=args.dest))
    command = [sys.executable, __file__, "--worker", client, "--endpoint-url", proxy.url]
    command += ["--bucket", bucket, "--objects", str(args.objects)]
    command += ["--concurrency", str(args.concurrency), "--dest", str(dest)]
    try:
        proxy.reset_stats()
        # This process hosts the proxy (and moto, unless --endpoint-url): its CPU during
        # the run is the cost of the fake network and server, sharing the client's cores.
        server_cpu = -process_cpu()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        server_cpu += process_cpu()
        requests = proxy.requests
        if done.returncode != 0:
            return {"client": client, "failed": done.stderr.strip()[-2000:]}
        report = json.loads(done.stdout.strip().splitlines()[-1])
        problems = verify(dest, digests, args.size)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    n, wall = args.objects, report["wall_s"]
    return {
        "client": client,
        "wall_s": wall,
        "objects_per_s": n / wall,
        "cpu_ms_per_object": report["cpu_s"] * 1000 / n,
        "get_per_object": sum(r.method == "GET" for r in requests) / n,
        "head_per_object": sum(r.method == "HEAD" for r in requests) / n,
        "part_gets_per_object": sum("partNumber=" in r.path for r in requests) / n,
        "other_requests": sum(r.method not in ("GET", "HEAD") for r in requests),
        "max_in_flight": proxy.max_in_flight,
        "server_cpu_ms_per_object": server_cpu * 1000 / n,
        "peak_rss_mib": report["peak_rss_kib"] / 1024,
        "verified_per_object": report.get("verified", 0) / n,
        "mib_per_s": n * args.size / MiB / wall,
        "client_errors": report["errors"],
        "first_errors": report["first_errors"],
        "bad_files": len(problems),
        "first_problems": problems[:3],
    }


def summarize(runs: list[dict[str, Any]], clients: list[str]) -> dict[str, Any]:
    """The median of each metric per client, and ratios against the baseline."""
    medians: dict[str, dict[str, float]] = {}
    for client in clients:
        good = [r for r in runs if r["client"] == client and "failed" not in r]
        if good:
            medians[client] = {m: statistics.median(r[m] for r in good) for m in METRICS}
            medians[client]["bad_files"] = sum(r["bad_files"] + r["client_errors"] for r in good)
            medians[client]["runs"] = len(good)
    ratios = {}
    if BASELINE in medians:
        base = medians[BASELINE]
        for client, row in medians.items():
            ratios[client] = {
                "wall": row["wall_s"] / base["wall_s"],
                "cpu": row["cpu_ms_per_object"] / base["cpu_ms_per_object"],
            }
    return {"median": medians, "ratios": ratios}


def notes(summary: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """What a reader must know to trust the table."""
    found = []
    no_head = summary["median"].get("s3transfer-no-head")
    if no_head is not None:
        version = metadata.version("s3transfer")
        if no_head["head_per_object"] > 0:
            found.append(
                f"s3transfer {version} still sends HEAD with response_checksum_validation="
                f"'when_required' ({no_head['head_per_object']:.2f}/object at the proxy): "
                "this version does not have the no-HEAD path."
            )
        else:
            found.append(
                f"s3transfer {version} sent no HEAD with response_checksum_validation="
                "'when_required' (counted at the proxy): it has the no-HEAD path."
            )
    found += [f"{r['client']} worker FAILED:\n{r['failed']}" for r in runs if "failed" in r]
    for run in runs:
        if run.get("bad_files") or run.get("client_errors"):
            detail = run["first_problems"] + run["first_errors"]
            found.append(f"{run['client']}: {run['bad_files']} bad files, {detail}")
    return found


def print_report(summary: dict[str, Any], args: argparse.Namespace, found: list[str]) -> None:
    large = args.size >= MiB
    header = (
        f"{'client':<26} {'wall s':>8} {'obj/s':>8} {'CPU ms/obj':>10} {'GET/obj':>7} "
        f"{'HEAD/obj':>8} {'verified':>8} {'RSS MiB':>7} {'in flight':>9} {'srv CPU ms/obj':>14}"
        + (f" {'MiB/s':>7}" if large else "")
        + (f" {'part GET/obj':>12}" if args.multipart else "")
    )
    # What latency alone allows: one request per object, `concurrency` at a time.
    floor = -(-args.objects // args.concurrency) * args.rtt_ms / 1000
    print(
        f"\nmedian of {args.runs} run(s); {args.objects} x {args.size} B objects, "
        f"concurrency {args.concurrency}, {args.rtt_ms:g} ms added per request "
        f"(latency floor at 1 request/object: {floor:.2f} s)"
    )
    print(header)
    print("-" * len(header))
    for client, row in summary["median"].items():
        rate = row["objects_per_s"]
        line = (
            f"{client:<26} {row['wall_s']:>8.2f} {rate:>8.{1 if rate >= 10 else 3}f} "
            f"{row['cpu_ms_per_object']:>10.3f} {row['get_per_object']:>7.2f} "
            f"{row['head_per_object']:>8.2f} {row['verified_per_object']:>8.2f} "
            f"{row['peak_rss_mib']:>7.1f} "
            f"{row['max_in_flight']:>9.0f} {row['server_cpu_ms_per_object']:>14.3f}"
        )
        line += f" {row['mib_per_s']:>7.1f}" if large else ""
        print(line + (f" {row['part_gets_per_object']:>12.2f}" if args.multipart else ""))
    if summary["ratios"]:
        print(f"\nagainst {BASELINE} (>1: slower / more CPU)")
        for client, ratio in summary["ratios"].items():
            print(f"{client:<26} wall x{ratio['wall']:.2f}  CPU x{ratio['cpu']:.2f}")
    for note in found:
        print(f"\nNOTE: {note}")


def versions() -> dict[str, str]:
    names = ("asyncdl", "aiobotocore", "botocore", "boto3", "s3transfer", "obstore", "moto")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def asyncdl_source() -> str:
    """The commit measured, and whether src/ had uncommitted changes (it is edited live)."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    try:
        commit = _git([*git, "rev-parse", "--short", "HEAD"])
        dirty = _git([*git, "status", "--porcelain", "src"])
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit.strip() + (" + uncommitted changes in src/" if dirty.strip() else "")


def _git(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def serve(stack: ExitStack, server: str, part_gets: bool) -> str:
    """Start moto's server in this process; return its endpoint.

    "fast-moto" is moto reading only the bytes a ranged or PartNumber GET sends (moto
    re-reads the whole object for each), and naming checksums as S3 does on HEAD.
    """
    from asyncdl.testing import moto_server as moto  # noqa: PLC0415

    endpoint: str = stack.enter_context(moto.moto_server())
    if part_gets:
        # moto answers a PartNumber GET with the whole object; S3 with the part.
        stack.enter_context(moto.serving_upload_parts())
    if server == "fast-moto":
        stack.enter_context(moto.serving_ranges())
        stack.enter_context(moto.serving_checksum_types())
    return endpoint


def server_name(args: argparse.Namespace) -> str:
    if args.endpoint_url is not None:
        return str(args.endpoint_url)
    parts = "PartNumber GETs as S3" if args.part_gets else "PartNumber GETs as moto"
    return f"{args.server} ({parts}; in the benchmark's process, with the proxy)"


def main_bench(args: argparse.Namespace) -> int:
    clients = args.clients or list(CLIENTS)
    source = asyncdl_source()  # before the runs: src/ may be edited while they go on
    runs: list[dict[str, Any]] = []
    with ExitStack() as stack:
        endpoint = args.endpoint_url or serve(stack, args.server, args.part_gets)
        from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

        proxy = stack.enter_context(TcpProxy.for_url(endpoint, rtt_ms=args.rtt_ms))
        bucket = f"asyncdl-bench-{secrets.token_hex(4)}"
        started = time.perf_counter()
        seeding = Seeding(args.size, args.checksum, args.multipart, args.checksum_type)
        digests = asyncio.run(seed(endpoint, bucket, args.objects, seeding))
        stored = asyncio.run(stored_checksum(endpoint, bucket))
        print(
            f"seeded {args.objects} x {args.size} B into {bucket} on {server_name(args)} "
            f"in {time.perf_counter() - started:.1f}s (HEAD says: {stored}); "
            f"clients go through {proxy.url}; asyncdl at {source}"
        )
        for run in range(args.runs):
            for client in clients:
                result = run_client(client, args, proxy, bucket, digests)
                runs.append({"run": run + 1, **result})
                wall = f"{result['wall_s']:.2f}s" if "wall_s" in result else "FAILED"
                print(f"run {run + 1}/{args.runs} {client:<26} {wall}", flush=True)
        if args.endpoint_url is not None:
            asyncio.run(delete_bucket(endpoint, bucket, args.objects))
    summary = summarize(runs, clients)
    found = notes(summary, runs)
    print_report(summary, args, found)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("worker", "bucket")}
        machine = {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "server": server_name(args),
        }
        document: dict[str, Any] = {"config": config, "machine": machine}
        document["versions"] = versions()
        document["asyncdl_source"] = source
        document["stored_checksum"] = stored
        document |= {**summary, "ratios_against": BASELINE, "notes": found, "runs": runs}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    return 1 if any("failed" in r or r["bad_files"] or r["client_errors"] for r in runs) else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000, help="objects to seed (1000)")
    parser.add_argument("--size", type=parse_size, default=1024, help="each: 1KiB, 512MiB, bytes")
    parser.add_argument("--concurrency", type=int, default=10, help="requests in flight (10)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", help="an existing S3-compatible server (default: moto)")
    where.add_argument(
        "--server",
        choices=SERVERS,
        default="moto",
        help="the server to start: moto, or fast-moto (ranges read alone, checksums as S3)",
    )
    parser.add_argument("--clients", type=parse_clients, help=f"comma list (all): {CLIENTS}")
    parser.add_argument("--runs", type=int, default=3, help="runs per client; medians (3)")
    parser.add_argument("--dest", help="directory for the files (default: system temp)")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument(
        "--checksum",
        type=str.upper,
        choices=CHECKSUMS,
        default="CRC32",
        help="the objects' checksum algorithm, or NONE (CRC32, botocore's default)",
    )
    parser.add_argument(
        "--multipart",
        type=parse_size,
        help="upload each object in parts of this size (the checksum: COMPOSITE by default)",
    )
    parser.add_argument(
        "--checksum-type",
        choices=("COMPOSITE", "FULL_OBJECT"),
        help="of a --multipart upload (COMPOSITE; FULL_OBJECT for CRC64NVME, as S3 has it)",
    )
    parser.add_argument(
        "--no-part-gets",
        dest="part_gets",
        action="store_false",
        help="embedded moto answers PartNumber GETs as moto does (the whole object), not as S3",
    )
    # Internal: how the orchestrator starts one client in a subprocess.
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = seeding_problem(args.checksum, args.multipart, args.checksum_type)
    if problem:
        parser.error(problem)
    if args.checksum_type is None:
        args.checksum_type = "FULL_OBJECT" if args.checksum == "CRC64NVME" else "COMPOSITE"
    return args


def seeding_problem(checksum: str, multipart: int | None, checksum_type: str | None) -> str:
    """What S3 would refuse (or what cannot be asked) of these seeding options."""
    if multipart is None:
        if checksum_type == "COMPOSITE":
            return "--checksum-type COMPOSITE needs --multipart (one PUT is FULL_OBJECT)"
        return ""
    if checksum == "NONE":
        return "--multipart needs a --checksum (S3 gives every multipart upload one)"
    if checksum_type == "COMPOSITE" and checksum == "CRC64NVME":
        return "CRC64NVME is FULL_OBJECT only (S3 refuses it as COMPOSITE)"
    if checksum_type == "FULL_OBJECT" and checksum.startswith("SHA"):
        return f"{checksum} is COMPOSITE only for multipart uploads (S3 refuses FULL_OBJECT)"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
