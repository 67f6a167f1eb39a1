"""The main job: an embedded S3 (moto), a sample set, both strategies, one table.

Run with ``asyncdl demo`` (or ``nox -s demo``; ``python -m asyncdl.demo`` also works,
without the ``cli`` extra). It seeds 1000 x 1 KiB objects and one 64 MiB object,
downloads the set with GET-first and with HEAD-first through a proxy that adds a
round-trip time to every request (as a real network would), checks every byte,
and prints objects, bytes, requests and time per strategy.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aiobotocore.session import get_session

from . import _interrupts as interrupts
from .config import MiB, TransferConfig
from .engine import Engine
from .results import DownloadResult
from .testing.moto_server import moto_server
from .testing.tcp_proxy import TcpProxy

BUCKET = "asyncdl-demo"


@dataclass(frozen=True, slots=True)
class Row:
    strategy: str
    objects: int
    bytes: int
    requests: int
    small_requests: int
    proxy_requests: int
    seconds: float


async def seed(endpoint: str, small: int, small_size: int, large_size: int) -> dict[str, str]:
    """Put the sample set; return key -> MD5 of its content."""
    digests: dict[str, str] = {}
    async with get_session().create_client("s3", endpoint_url=endpoint) as client:
        await client.create_bucket(Bucket=BUCKET)
        semaphore = asyncio.Semaphore(32)

        async def put(key: str, body: bytes) -> None:
            async with semaphore:
                await client.put_object(Bucket=BUCKET, Key=key, Body=body)
            digests[key] = hashlib.md5(body).hexdigest()

        async with asyncio.TaskGroup() as tasks:
            for i in range(small):
                tasks.create_task(put(f"small/{i:06d}", os.urandom(small_size)))
            tasks.create_task(put("large/object.bin", os.urandom(large_size)))
    return digests


async def run_strategy(
    engine: Engine, strategy: str, keys: Iterable[str], dest: Path
) -> list[DownloadResult]:
    """Download ``keys`` through the engine's bulk API (its budget bounds concurrency)."""
    items = ((BUCKET, key, dest / key.replace("/", "_")) for key in keys)
    results = [result async for result in engine.download_many(items, strategy=strategy)]
    failed = [result for result in results if result.error is not None]
    if failed:
        raise SystemExit(f"demo: {len(failed)} downloads failed, first: {failed[0].error}")
    return results


def check(results: list[DownloadResult], digests: dict[str, str]) -> None:
    for result in results:
        with open(result.path, "rb") as written:
            digest = hashlib.file_digest(written, "md5").hexdigest()
        if digest != digests[result.key]:
            raise SystemExit(f"demo: {result.key} came out wrong")


async def main_async(args: argparse.Namespace) -> list[Row]:
    rows = []
    with moto_server() as endpoint, TcpProxy.for_url(endpoint, rtt_ms=args.rtt_ms) as proxy:
        print(f"moto S3 on {endpoint}; proxy adding {args.rtt_ms:g} ms per request on {proxy.url}")
        started = time.perf_counter()
        digests = await seed(endpoint, args.objects, args.object_size, args.large_size)
        print(
            f"seeded {args.objects} x {args.object_size} B + 1 x {args.large_size // MiB} MiB "
            f"in {time.perf_counter() - started:.1f}s"
        )
        os.environ["AWS_ENDPOINT_URL_S3"] = proxy.url
        config = TransferConfig(max_concurrency=args.concurrency)
        async with Engine(config=config) as engine:
            for strategy in ("get-first", "head-first"):
                dest = Path(tempfile.mkdtemp(prefix=f"{strategy}-", dir=args.dest))
                try:
                    proxy.reset_stats()
                    started = time.perf_counter()
                    results = await run_strategy(engine, strategy, sorted(digests), dest)
                    seconds = time.perf_counter() - started
                    check(results, digests)
                    rows.append(
                        Row(
                            strategy=strategy,
                            objects=len(results),
                            bytes=sum(r.size or 0 for r in results),  # successes only: ints
                            requests=sum(r.requests for r in results),
                            small_requests=sum(
                                r.requests for r in results if r.key.startswith("small/")
                            ),
                            proxy_requests=len(proxy.requests),
                            seconds=seconds,
                        )
                    )
                finally:
                    shutil.rmtree(dest, ignore_errors=True)
    return rows


def print_table(rows: list[Row], small: int) -> None:
    header = (
        f"{'strategy':<11} {'objects':>7} {'MiB':>7} {'requests':>8} {'at proxy':>8} "
        f"{'req/small obj':>13} {'seconds':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        per_small = row.small_requests / small if small else 0.0
        print(
            f"{row.strategy:<11} {row.objects:>7} {row.bytes / MiB:>7.1f} {row.requests:>8} "
            f"{row.proxy_requests:>8} "
            f"{per_small:>13.2f} {row.seconds:>8.2f}"
        )
    print("(every byte checked against the seeded content; requests also counted at the proxy)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="asyncdl demo", description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000, help="small objects (1000)")
    parser.add_argument("--object-size", type=int, default=1024, help="bytes each (1024)")
    parser.add_argument("--large-size", type=int, default=64 * MiB, help="bytes of the large one")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight (32)")
    parser.add_argument("--rtt-ms", type=float, default=10.0, help="latency added per request")
    parser.add_argument("--dest", help="directory to download into (default: system temp)")
    args = parser.parse_args(argv)
    if args.dest is not None and not os.path.isdir(args.dest):
        parser.error(f"--dest {args.dest!r} is not an existing directory")  # before any server
    return args


def require_moto() -> None:
    """Without the 'demo' extra, one line that says what to install, not a traceback."""
    try:
        import moto.server  # noqa: F401, PLC0415 - the check itself
    except ModuleNotFoundError as missing:
        name = (missing.name or "moto").partition(".")[0]
        raise SystemExit(
            f"asyncdl demo: needs the 'demo' extra ({name} is not installed): "
            "pip install 'asyncdl[demo]'"
        ) from None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)  # --help needs no extra
    require_moto()
    try:
        rows = interrupts.run(main_async(args))
    except interrupts.Stopped as stop:  # Ctrl-C or SIGTERM: cancelled and cleaned up
        sys.exit(stop.exit_status)
    print_table(rows, args.objects)


if __name__ == "__main__":
    main()
