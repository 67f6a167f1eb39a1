"""The least a copy command built on aiobotocore can do: the floor under ``asyncdl cp``.

Imports aiobotocore, creates one S3 client, and copies: one object to a file, or (a
SOURCE ending in ``/``) every object under the prefix into DIR, listed page by page
and fetched ``--concurrency`` at a time with plain ``get_object`` calls, each body
read whole and written with one blocking ``write`` (the cheapest way for small
objects). No retries, no checksums, no temp files, no output: what is left is the
interpreter, the stack's imports, the client and the requests. ``--client-only``
stops after creating the client; ``--marks`` prints to stderr how long each step took
(the stack's packages imported one by one, in the order they load anyway, then S3's
models read, the client created, the copy).

    python benchmarks/aiobotocore_cp.py http://127.0.0.1:5000 s3://bucket/key file
    python benchmarks/aiobotocore_cp.py URL s3://bucket/prefix/ dir --concurrency 64
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

#: What the stack imports, in an order each step adds only its own: the standard
#: library's asyncio, aiohttp (with its SSL context, which reads the CA file),
#: awscrt (botocore imports it when it is installed), urllib3, botocore, aiobotocore.
STACK = ("asyncio", "aiohttp", "awscrt.auth", "urllib3", "botocore.session", "aiobotocore.session")


class Marks:
    """Milliseconds per step, printed to stderr at the end when asked for."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self.started = self.last = time.perf_counter()

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        if self.shown:
            print(f"{(now - self.last) * 1000:8.1f} ms  {step}", file=sys.stderr)
        self.last = now

    def total(self) -> None:
        if self.shown:
            print(f"{(self.last - self.started) * 1000:8.1f} ms  in all", file=sys.stderr)


def import_stack(marks: Marks) -> Any:
    for name in STACK:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # awscrt is optional to botocore
        marks(f"import {name}")
    return importlib.import_module("aiobotocore.session").get_session()


async def copy(args: argparse.Namespace, session: Any, marks: Marks) -> None:
    import asyncio  # noqa: PLC0415 - imported (and timed) by import_stack

    from aiobotocore.config import AioConfig  # noqa: PLC0415 - imported by import_stack

    loader = session.get_component("data_loader")
    for type_name in ("service-2", "endpoint-rule-set-1"):
        loader.load_service_model("s3", type_name)
    loader.load_data("endpoints")
    marks("read S3's models")
    config = AioConfig(max_pool_connections=max(10, args.concurrency))
    async with session.create_client("s3", endpoint_url=args.endpoint_url, config=config) as s3:
        marks("create the client")
        if args.client_only:
            return
        bucket, _, key = args.source.removeprefix("s3://").partition("/")
        if not key.endswith("/"):
            await _fetch(s3, bucket, key, Path(args.dest))
            marks("copy")
            return
        semaphore = asyncio.Semaphore(args.concurrency)

        async def fetch(name: str) -> None:
            async with semaphore:
                await _fetch(s3, bucket, name, Path(args.dest, name[len(key) :]))

        async with asyncio.TaskGroup() as tasks:
            async for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=key
            ):
                for entry in page.get("Contents", []):
                    tasks.create_task(fetch(entry["Key"]))
    marks("copy")


async def _fetch(s3: object, bucket: str, key: str, path: Path) -> None:
    response = await s3.get_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
    async with response["Body"] as body:
        data = await body.read()
    path.write_bytes(data)  # noqa: ASYNC240 - blocking on purpose: the least work per object


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("endpoint_url")
    parser.add_argument("source", nargs="?", default="")
    parser.add_argument("dest", nargs="?", default="")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--client-only", action="store_true")
    parser.add_argument("--marks", action="store_true", help="each step's time, to stderr")
    args = parser.parse_args()
    marks = Marks(args.marks)
    session = import_stack(marks)
    import asyncio  # noqa: PLC0415 - imported by import_stack, timed there

    asyncio.run(copy(args, session, marks))
    marks.total()
    return 0


if __name__ == "__main__":
    sys.exit(main())
