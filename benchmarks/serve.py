"""Serving benchmark: ``object_response`` under load from one uvicorn worker.

The app (one route, ``object_response``) runs under uvicorn in a process of its own,
so its RSS is its own; S3 (``--server``, as batch.py's) sits behind the test proxy,
which adds ``--rtt-ms`` of latency and counts the requests in flight. Then:

- **Load**: ``--clients`` clients at once, each streaming its own ``--size-mib`` object
  at ``--rate-mib`` MiB/s (a player, a slow link), once per chunking in
  ``--chunkings`` (``chunk:prefetch``; each with a fresh server process). Reported:
  the server's RSS before and at its peak, S3 requests in flight at most against
  ``max_concurrency``, whether every client got the right bytes (MD5), and the
  callbacks that held the server's loop 50 ms or more (asyncio's debug mode).
- **TTFB**: a ``Range: bytes=N-`` from the middle of a ``--large-mib`` object, timed
  to its first body byte, with the S3 requests sent before that byte; next to a
  bare ranged ``get_object`` through the same proxy (one round trip).

    python benchmarks/serve.py --server s3rver
    nox -s bench -- serve --server s3rver --clients 100
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import logging
import os
import re
import secrets
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

from fastapi import Request, Response

# At the top: FastAPI reads the route's annotations (strings here) in this namespace.
from asyncdl.contrib.fastapi import EngineDep, lifespan, object_response
from peers import MiB, key_name
from servers import SERVERS, Seeding, seed, serve

KiB = 1024


def _child(args: argparse.Namespace) -> None:
    """The server process: the app under uvicorn (one worker), the loop in debug mode
    counting slow callbacks, ``/stats`` reporting them."""
    import uvicorn  # noqa: PLC0415
    from fastapi import FastAPI  # noqa: PLC0415

    import asyncdl  # noqa: PLC0415

    slow: list[tuple[float, str]] = []

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # "Executing <Task ... coro=<name() running at file:line> ...> took 0.061 seconds"
            said = record.getMessage()
            if (took := re.search(r"took ([0-9.]+) seconds", said)) is not None:
                where = re.search(r"coro=<([^ ]+)\(\) (?:running|done)", said)
                what = where.group(1) if where else said.split(" created at")[0][10:80]
                slow.append((float(took.group(1)), what))

    logging.getLogger("asyncio").addHandler(Counter(logging.WARNING))
    # A collection runs inside whichever callback allocates: a long one shows up as a
    # slow callback of that place. Timed here, so the two can be told apart.
    collections: list[float] = []
    began = [0.0]

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        elif (took := time.perf_counter() - began[0]) >= 0.02:
            collections.append(took)

    gc.callbacks.append(timed_gc)
    config = asyncdl.TransferConfig(max_concurrency=args.max_concurrency)
    app = FastAPI(lifespan=lifespan(config=config))
    chunk, prefetch = _chunking(args.chunking)

    @app.get("/o/{bucket}/{key:path}")
    async def get(bucket: str, key: str, request: Request, engine: EngineDep) -> Response:
        return await object_response(
            engine, bucket, key, request, chunk_size=chunk, prefetch=prefetch
        )

    @app.get("/stats")
    async def stats(reset: bool = False) -> dict[str, Any]:
        by_place: dict[str, list[float]] = {}
        for took, what in slow:
            by_place.setdefault(what, []).append(took)
        said = {
            "slow_callbacks": len(slow),
            "examples": {
                what: f"{len(times)} x, longest {max(times) * 1000:.0f} ms"
                for what, times in by_place.items()
            },
            "gc_pauses": f"{len(collections)} of 20 ms or more"
            + (f", longest {max(collections) * 1000:.0f} ms" if collections else ""),
        }
        if reset:  # after the warm-up: what the first request sets up once is not load
            slow.clear()
            collections.clear()
            if args.gc_freeze:
                # What start-up made (botocore's models, the app) lives as long as the
                # process: out of every later collection's scan.
                gc.collect()
                gc.freeze()
        return said

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_debug(args.debug)
        loop.slow_callback_duration = 0.05
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
        )
        await server.serve()

    asyncio.run(run())


def _chunking(text: str) -> tuple[int, int]:
    size, prefetch = text.split(":")
    unit = {"K": KiB, "M": MiB}[size[-1].upper()]
    return int(size[:-1]) * unit, int(prefetch)


def _rss_mib(pid: int) -> tuple[float, float]:
    """The process's resident set now, and at its peak (VmRSS, VmHWM), in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return int(fields["VmRSS"][0]) / 1024, int(fields["VmHWM"][0]) / 1024


class ServerProcess:
    """The app in its own process on a free port."""

    def __init__(self, args: argparse.Namespace, chunking: str, endpoint: str) -> None:
        from asyncdl.testing.moto_server import free_port  # noqa: PLC0415

        self.port = free_port()
        argv = [sys.executable, __file__, "--child", "--port", str(self.port)]
        argv += ["--chunking", chunking, "--max-concurrency", str(args.max_concurrency)]
        argv += [] if args.debug else ["--no-debug"]
        argv += ["--gc-freeze"] if args.gc_freeze else []
        env = {**os.environ, "AWS_ENDPOINT_URL_S3": endpoint}
        self.process = subprocess.Popen(argv, env=env)

    async def started(self) -> None:
        import aiohttp  # noqa: PLC0415

        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                try:
                    async with session.get(f"{self.url}/stats") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        raise SystemExit("the server did not start within 30 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def _client(session: Any, url: str, rate: float, digest: str) -> tuple[bool, float]:
    """Read the object at ``rate`` bytes/s; whether its MD5 is right, and the seconds."""
    md5 = hashlib.md5()
    received = 0
    started = time.perf_counter()
    async with session.get(url) as response:
        response.raise_for_status()
        async for piece in response.content.iter_chunked(64 * KiB):
            md5.update(piece)
            received += len(piece)
            ahead = received / rate - (time.perf_counter() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
    return md5.hexdigest() == digest, time.perf_counter() - started


async def load(
    args: argparse.Namespace, chunking: str, proxy: Any, bucket: str, digests: list[str]
) -> dict[str, Any]:
    import aiohttp  # noqa: PLC0415

    server = ServerProcess(args, chunking, proxy.url)
    try:
        await server.started()
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            warm = f"{server.url}/o/{bucket}/{key_name(0)}"
            async with session.get(warm, headers={"Range": "bytes=0-0"}) as response:
                await response.read()
            async with session.get(f"{server.url}/stats?reset=true") as response:
                await response.read()
            idle, _ = _rss_mib(server.process.pid)
            proxy.reset_stats()
            urls = [f"{server.url}/o/{bucket}/{key_name(i)}" for i in range(args.clients)]
            clients = [
                asyncio.create_task(
                    _client(session, url, args.rate_mib * MiB, digests[i % len(digests)])
                )
                for i, url in enumerate(urls)
            ]
            started = time.perf_counter()
            await asyncio.wait(clients)
            wall = time.perf_counter() - started
            results = [task.result() for task in clients]
            async with session.get(f"{server.url}/stats") as response:
                stats = await response.json()
        _, peak = _rss_mib(server.process.pid)
    finally:
        server.stop()
    return {
        "chunking": chunking,
        "clients": args.clients,
        "rss_idle_mib": round(idle, 1),
        "rss_peak_mib": round(peak, 1),
        "per_client_kib": round((peak - idle) * 1024 / args.clients),
        "in_flight_max": proxy.max_in_flight,
        "max_concurrency": args.max_concurrency,
        "correct": sum(ok for ok, _ in results),
        "slow_callbacks": stats["slow_callbacks"],
        "slow_examples": stats["examples"],
        "gc_pauses": stats["gc_pauses"],
        "client_seconds_median": round(statistics.median(s for _, s in results), 2),
        "wall_seconds": round(wall, 2),
    }


async def ttfb(args: argparse.Namespace, proxy: Any, bucket: str, size: int) -> dict[str, Any]:
    """Median time to the first body byte of ``bytes=N-`` from the middle, and the S3
    requests sent before it; a bare ranged get_object through the proxy alongside."""
    import aiohttp  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415

    server = ServerProcess(args, args.chunkings.split(",")[0], proxy.url)
    served, bare, before = [], [], []
    try:
        await server.started()
        async with (
            aiohttp.ClientSession() as session,
            get_session().create_client("s3", endpoint_url=proxy.url) as s3,
        ):
            for run in range(args.runs + 1):  # the first warms the connections up
                start = size // 2 + run * 4099
                proxy.reset_stats()
                began = time.perf_counter()
                headers = {"Range": f"bytes={start}-"}
                async with session.get(f"{server.url}/o/{bucket}/large", headers=headers) as r:
                    await r.content.readany()
                    took = time.perf_counter() - began
                    sent = [f"{q.method} {q.range}" for q in proxy.requests]
                began = time.perf_counter()
                answer = await s3.get_object(Bucket=bucket, Key="large", Range=f"bytes={start}-")
                async with answer["Body"] as body:
                    await body.read(1)
                    bare_took = time.perf_counter() - began
                if run:
                    served.append(took)
                    bare.append(bare_took)
                    before.append(sent)
    finally:
        server.stop()
    return {
        "ttfb_ms_median": round(statistics.median(served) * 1000, 1),
        "bare_get_ms_median": round(statistics.median(bare) * 1000, 1),
        "s3_requests_before_first_byte": before[-1],
        "runs": args.runs,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

    with ExitStack() as stack:
        server = serve(stack, args.server, False, args.scratch)
        bucket = f"serve-{secrets.token_hex(4)}"
        objects = min(args.clients, args.objects)
        print(f"seeding {objects} x {args.size_mib} MiB and {args.large_mib} MiB", flush=True)
        digests = await seed(server.endpoint, bucket, objects, Seeding(args.size_mib * MiB, "NONE"))
        large = f"{bucket}-large"
        await seed(server.endpoint, large, 1, Seeding(args.large_mib * MiB, "NONE"))
        await _rename(server.endpoint, large, key_name(0), "large")
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint, rtt_ms=args.rtt_ms))
        report: dict[str, Any] = {"server": server.name, "rtt_ms": args.rtt_ms}
        report["ttfb"] = await ttfb(args, proxy, large, args.large_mib * MiB)
        print(json.dumps(report["ttfb"]), flush=True)
        report["load"] = []
        for chunking in args.chunkings.split(","):
            row = await load(args, chunking, proxy, bucket, digests)
            print(json.dumps(row), flush=True)
            report["load"].append(row)
        return report


async def _rename(endpoint: str, bucket: str, old: str, new: str) -> None:
    from aiobotocore.session import get_session  # noqa: PLC0415

    async with get_session().create_client("s3", endpoint_url=endpoint) as s3:
        await s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        await s3.delete_object(Bucket=bucket, Key=old)


def table(report: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"{report['server']}; proxy {report['rtt_ms']} ms; {args.clients} clients x "
        f"{args.size_mib} MiB at {args.rate_mib} MiB/s each; one uvicorn worker",
        "",
        "| parts (chunk:prefetch) | RSS idle | RSS peak | per client | in flight max "
        "| correct | slow callbacks | client s (median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["load"]:
        lines.append(
            f"| {row['chunking']} | {row['rss_idle_mib']} MiB | {row['rss_peak_mib']} MiB "
            f"| {row['per_client_kib']} KiB | {row['in_flight_max']} / "
            f"{row['max_concurrency']} | {row['correct']} / {row['clients']} "
            f"| {row['slow_callbacks']} | {row['client_seconds_median']} |"
        )
    lines.append("")
    for row in report["load"]:
        lines.append(
            f"slow callbacks with {row['chunking']}: {row['slow_examples'] or 'none'}; "
            f"garbage collections: {row['gc_pauses']}"
        )
    t = report["ttfb"]
    lines += [
        "",
        f"TTFB of `Range: bytes=N-` from the middle of {args.large_mib} MiB (median of "
        f"{t['runs']}): {t['ttfb_ms_median']} ms; a bare ranged get_object: "
        f"{t['bare_get_ms_median']} ms; S3 requests before the first byte: "
        f"{t['s3_requests_before_first_byte']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", choices=SERVERS, default="moto", help="(moto, embedded)")
    parser.add_argument("--clients", type=int, default=100, help="clients at once (100)")
    parser.add_argument("--objects", type=int, default=100, help="distinct objects (100)")
    parser.add_argument("--size-mib", type=int, default=8, help="each object's size (8)")
    parser.add_argument("--rate-mib", type=float, default=0.25, help="each client MiB/s (0.25)")
    parser.add_argument("--large-mib", type=int, default=256, help="the TTFB object (256)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="proxy latency (20)")
    parser.add_argument("--max-concurrency", type=int, default=32, help="the engine's (32)")
    parser.add_argument(
        "--chunkings", default="512K:2,8M:4", help="chunk:prefetch, comma-separated"
    )
    parser.add_argument("--runs", type=int, default=7, help="TTFB runs; median (7)")
    parser.add_argument("--no-debug", dest="debug", action="store_false", help="no slow check")
    parser.add_argument("--scratch", help="directory for s3rver's data")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() in the server after its warm-up"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    # Internal: the server process.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--chunking", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    report = asyncio.run(measure(args))
    print(json.dumps(report) if args.json else table(report, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
