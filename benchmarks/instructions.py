"""Instructions per tiny object: asyncdl's download under valgrind's callgrind.

callgrind counts the instructions a process executes (all its threads), not seconds:
the same count whatever else the machine is doing, which makes a small change in the
cost of one object measurable on a busy machine where CPU seconds move by 2x. It does
not see the kernel's side (system calls), which ``strace -c`` or the batch benchmark's
CPU column do.

The benchmark starts a server (``--server``, s3rver by default), seeds ``--high`` objects
of 1 KiB, then downloads ``--low`` and ``--high`` of them, each in a fresh process under
callgrind, and prints ``(total(high) - total(low)) / (high - low)``: what one more object
costs, with start-up, imports and the client's creation cancelled out.

    python3 -m nox -s bench -- instructions --strategy get-first
    python3 -m nox -s bench -- instructions --strategy listed --concurrency 10
    python3 -m nox -s bench -- instructions --collector command
    python3 -m nox -s bench -- instructions --strategy command --low 100 --high 1100

``--strategy command`` measures the ``asyncdl cp -r`` command itself (its listing,
its line per object, its collector), run in the measured process on the loop it
picks (``ASYNCDL_LOOP``: uvloop when installed), of a prefix of ``--low`` objects and
of one of ``--high``.

Under callgrind the process runs about 50 times slower: a stat or a small file's
publish that takes tens of microseconds takes milliseconds, and ``QuickIO`` would
find the file system slow and send file calls to the executor, which a run on a
local disk does not do. The measured process raises its limit by as much
(``--quick-io-limit``; ``0.002``, its own, measures what it decides under valgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from peers import PREFIX, file_name, key_name
from servers import SERVERS, Seeding, seed, seeding_client, serve

STRATEGIES = ("get-first", "head-first", "listed", "command")
#: Where ``--strategy command`` finds each run's objects: the low run's apart.
LOW_PREFIX = "low/"


def run_command(args: argparse.Namespace) -> None:
    """The measured process for ``--strategy command``: ``asyncdl cp -r`` of the
    ``args.count`` objects, in this process."""
    from asyncdl._files import quick_io  # noqa: PLC0415
    from asyncdl.cli import main as command  # noqa: PLC0415

    quick_io.QuickIO.LIMIT = args.quick_io_limit
    source = f"s3://{args.bucket}/{args.prefix}"
    with contextlib.redirect_stdout(io.StringIO()):  # a line per object, not measured
        try:
            command(
                [
                    "cp",
                    "-r",
                    source,
                    args.dest,
                    "--concurrency",
                    str(args.concurrency),
                    "--endpoint-url",
                    args.endpoint_url,
                ]
            )
        except SystemExit as exited:
            if exited.code:
                raise


async def download(args: argparse.Namespace) -> None:
    """The measured process: ``args.count`` objects through one engine."""
    import asyncdl  # noqa: PLC0415
    from asyncdl._files import quick_io  # noqa: PLC0415
    from asyncdl.cli.work import tuned_collector  # noqa: PLC0415

    quick_io.QuickIO.LIMIT = args.quick_io_limit
    os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    config = asyncdl.TransferConfig(max_concurrency=args.concurrency)
    dest = Path(args.dest)
    async with asyncdl.Engine(config=config) as engine:
        known: dict[str, tuple[int, str]] = {}
        if args.strategy == "listed":
            # The whole bucket, in both runs: the listing's cost cancels out.
            paginator = engine.client.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=args.bucket):
                for entry in page.get("Contents", []):
                    known[entry["Key"]] = (entry["Size"], entry["ETag"])
        items: list[asyncdl.DownloadRequest] = []
        for index in range(args.count):
            key, path = key_name(index), dest / f"{index}"
            size, etag = known.get(key, (None, None))
            items.append(asyncdl.DownloadRequest(args.bucket, key, path, size=size, etag=etag))
        strategy = "get-first" if args.strategy == "listed" else args.strategy
        with tuned_collector() if args.collector == "command" else contextlib.nullcontext():
            async for result in engine.download_many(items, strategy=strategy):
                if result.error is not None:
                    raise SystemExit(f"{result.key}: {result.error}")


async def seed_low(endpoint: str, bucket: str, objects: int) -> None:
    """``objects`` of 1 KiB under ``LOW_PREFIX`` in ``bucket``, which exists."""
    seeding = Seeding(1024, checksum="NONE")
    async with seeding_client(endpoint, seeding) as s3:
        for index in range(objects):
            await seeding.put(s3, bucket, LOW_PREFIX + file_name(index))


def instructions(args: argparse.Namespace, endpoint: str, bucket: str, count: int) -> int:
    """Instructions of one process downloading ``count`` objects."""
    with tempfile.TemporaryDirectory(dir=args.dest) as dest:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        command += [sys.executable, __file__, "--worker", str(count), "--endpoint-url", endpoint]
        command += ["--bucket", bucket, "--strategy", args.strategy]
        command += ["--concurrency", str(args.concurrency), "--dest", dest]
        command += ["--quick-io-limit", str(args.quick_io_limit), "--collector", args.collector]
        command += ["--prefix", LOW_PREFIX if count == args.low else PREFIX]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the measured process failed:\n{done.stderr[-3000:]}")
        if len(os.listdir(dest)) != count:
            raise SystemExit(f"{len(os.listdir(dest))} files, not {count}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no total from callgrind:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--strategy", choices=STRATEGIES, default="get-first")
    parser.add_argument("--concurrency", type=int, default=64, help="max_concurrency (64)")
    parser.add_argument("--low", type=int, default=50, help="objects of the short run (50)")
    parser.add_argument("--high", type=int, default=300, help="objects of the long run (300)")
    parser.add_argument("--server", choices=SERVERS, default="s3rver", help="(s3rver)")
    parser.add_argument("--dest", help="directory for the files (default: system temp)")
    parser.add_argument(
        "--quick-io-limit",
        type=float,
        default=0.2,
        help="QuickIO.LIMIT in the measured process (0.2 s: its 2 ms, as slow as valgrind)",
    )
    parser.add_argument(
        "--collector",
        choices=("python", "command"),
        default="python",
        help="the garbage collector as Python sets it, or as the asyncdl command "
        "tunes it for its downloads (frozen start-up objects, gen 0 threshold)",
    )
    for internal in ("--worker", "--endpoint-url", "--bucket", "--prefix"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.count = int(args.worker)
        if args.strategy == "command":
            run_command(args)
        else:
            asyncio.run(download(args))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH (Debian: apt install valgrind)")
    if not 0 < args.low < args.high:
        raise SystemExit("--low must be above 0 and below --high")
    with ExitStack() as stack:
        server = serve(stack, args.server, part_gets=False, scratch=args.dest)
        bucket = f"asyncdl-instructions-{secrets.token_hex(4)}"
        asyncio.run(seed(server.endpoint, bucket, args.high, Seeding(1024, checksum="NONE")))
        if args.strategy == "command":
            # The low run's objects under a prefix of their own: cp -r takes a prefix.
            asyncio.run(seed_low(server.endpoint, bucket, args.low))
        low = instructions(args, server.endpoint, bucket, args.low)
        high = instructions(args, server.endpoint, bucket, args.high)
    per_object = (high - low) / (args.high - args.low)
    print(
        f"{args.strategy}, concurrency {args.concurrency}, 1 KiB objects, server {server.name}: "
        f"{per_object / 1e6:.3f} M instructions per object "
        f"({low:,} for {args.low}, {high:,} for {args.high})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
