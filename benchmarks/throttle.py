"""Throttle benchmark: adaptive concurrency against a server that serves N at a time.

``--objects`` objects of 1 KiB on a server the benchmark starts (moto by default),
behind the test proxy, which adds ``--rtt-ms`` to every request and answers ``503
SlowDown`` to any request that arrives while ``--serves`` requests are in flight
(``asyncdl.testing.throttle.SlowDownAbove``): S3's answer to more requests than a
prefix serves, in a shape a fixed concurrency cannot adapt to. Each run downloads
them all with ``download_many`` in a fresh process (so the client's CPU is its own),
at the default ``max_attempts`` (5), in three modes:

- fixed c64: ``max_concurrency=64, adaptive=False`` (a fixed limit, as most clients have);
- adaptive c64: ``max_concurrency=64`` (the default, ``adaptive=True``);
- fixed cN: ``max_concurrency=N, adaptive=False``, the ideal: it knows N.

Reported, medians of ``--runs``: requests the proxy received, 503s it sent, objects
that failed (out of attempts), the engine's final concurrency limit and its cuts,
and wall time.

    python3 -m nox -s bench -- throttle
    python benchmarks/throttle.py --objects 2000 --serves 8 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from asyncdl.testing.tcp_proxy import TcpProxy
from asyncdl.testing.throttle import SlowDownAbove
from peers import key_name
from servers import SERVERS, Seeding, seed, serve

MODES = ("fixed c64", "adaptive c64", "fixed cN")


async def download(args: argparse.Namespace) -> None:
    """The measured process: every object through one engine; its stats as JSON."""
    import asyncdl  # noqa: PLC0415

    config = asyncdl.TransferConfig(max_concurrency=args.concurrency, adaptive=args.adaptive)
    dest = Path(args.dest)
    items = [(args.bucket, key_name(i), dest / str(i)) for i in range(args.objects)]
    failed = 0
    async with asyncdl.Engine(config=config) as engine:
        async for result in engine.download_many(items, strategy="get-first"):
            failed += result.error is not None
        stats = engine.stats()
    print(
        json.dumps(
            {
                "failed": failed,
                "limit": stats.concurrency_limit,
                "cuts": stats.limit_cuts,
                "requests": stats.requests,
                "throttles": stats.throttles,
            }
        )
    )


def one_run(args: argparse.Namespace, proxy: TcpProxy, mode: str, dest: Path) -> dict[str, float]:
    concurrency = args.serves if mode == "fixed cN" else 64
    rule = SlowDownAbove(proxy, args.serves)
    proxy.reset_stats()
    proxy.rule = rule
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--bucket",
        args.bucket,
        "--objects",
        str(args.objects),
        "--concurrency",
        str(concurrency),
        "--dest",
        str(dest),
    ]
    if mode != "adaptive c64":
        command.append("--fixed")
    env = {**os.environ, "AWS_ENDPOINT_URL_S3": proxy.url}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    engine = json.loads(done.stdout.splitlines()[-1])
    if engine["requests"] != len(proxy.requests):
        raise SystemExit(f"the engine counted {engine['requests']}, the proxy saw more")
    return {
        "requests": len(proxy.requests),
        "503s": rule.throttled,
        "failed": engine["failed"],
        "limit": engine["limit"],
        "cuts": engine["cuts"],
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=2000, help="1 KiB objects (2000)")
    parser.add_argument("--serves", type=int, default=8, help="requests served at once (8)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument("--runs", type=int, default=3, help="medians of (3)")
    parser.add_argument("--server", choices=SERVERS, default="moto", help="(moto)")
    parser.add_argument("--dest", help="directory for the files (default: system temp)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fixed", dest="adaptive", action="store_false", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(download(args))
        return
    args.bucket = f"throttle-{secrets.token_hex(4)}"
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dest)))
        server = serve(stack, args.server, part_gets=False, scratch=str(scratch))
        asyncio.run(seed(server.endpoint, args.bucket, args.objects, Seeding(1024, "NONE")))
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint, rtt_ms=args.rtt_ms))
        rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for run in range(args.runs):
            for mode in MODES:
                rows[mode].append(one_run(args, proxy, mode, scratch / "files"))
                print(f"run {run + 1}, {mode}: {rows[mode][-1]}", file=sys.stderr, flush=True)
    print(
        f"{args.objects} x 1 KiB, server {server.name}, 503 SlowDown above {args.serves} in "
        f"flight, {args.rtt_ms:g} ms added per request; medians of {args.runs}"
    )
    print("| mode | requests | 503s | failed objects | final limit | cuts | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, runs in rows.items():
        median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        label = mode.replace("cN", f"c{args.serves}")
        print(
            f"| {label} | {median['requests']:.0f} | {median['503s']:.0f} | "
            f"{median['failed']:.0f} | {median['limit']:.0f} | {median['cuts']:.0f} | "
            f"{median['wall']:.2f} |"
        )


if __name__ == "__main__":
    main()
