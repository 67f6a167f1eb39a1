"""Random-access benchmark: many byte ranges of one object, asyncdl beside obstore and s3fs.

Two cases, each on one object seeded straight into the server (s3rver by default,
which serves a range from its file on disk), read by every client through the test
proxy, which adds ``--rtt-ms`` before each request (20: 10 ms each way):

- ``random``: ``--ranges`` ranges of ``--range-size`` at random offsets (``--seed``)
  of a ``--object-size`` object, in one call: asyncdl's ``read_ranges``, obstore's
  ``get_ranges_async``, s3fs's ``_cat_ranges`` (its async API).
- ``parquet``: a Parquet file written here with pyarrow (``--row-groups`` of eight
  2 MiB columns), read as a reader reads it: the last 8 bytes (the footer's length
  and ``PAR1``), then the footer, then 3 column chunks of the middle row group, whose
  offsets come from ``pyarrow.parquet.read_metadata`` on the local copy, so every
  client reads the same bytes. Three calls for the range APIs; seek and read, one
  range after the other, for the file objects (asyncdl's ``open``, obstore's
  ``open_reader_async``, s3fs's ``open`` in a thread).

``asyncdl-listed`` is ``read_ranges`` given the object's size and ETag from a listing
made before the clock, as a dataset reader has them. Each client runs in a fresh
process per run. It reads two bytes of a tiny other object first (not counted), so
it is measured warm, as in a running app; then it is metered (wall, and the
process's CPU in all its threads) from its first request to its last; a file
object is opened inside the clock. Every range read is compared with
the local copy: one wrong byte fails the benchmark. The proxy counts the requests,
the bytes it relays, and the GETs that carry neither ``If-Match`` nor ``versionId``
(reads not pinned to one version of the object).

    python3 -m nox -s bench -- ranges --runs 5
    python benchmarks/ranges.py --server fast-moto --cases random --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import os
import random
import secrets
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

from arguments import parse_size
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy
from batch import asyncdl_source
from peers import MiB
from servers import SERVERS, Seeding, seeding_client, serve

KiB = 1024
GiB = 1024 * MiB
#: Rows of each case: a range API in one call per step, or a file object (``-open``,
#: ``-reader``) that seeks and reads range after range.
CLIENTS = {
    "random": ("asyncdl", "asyncdl-listed", "obstore", "s3fs"),
    "parquet": (
        "asyncdl",
        "asyncdl-listed",
        "asyncdl-open",
        "asyncdl-reader",
        "asyncdl-reader-listed",
        "obstore",
        "obstore-reader",
        "s3fs",
        "s3fs-open",
    ),
}
Ranges = list[tuple[int, int]]
#: Reads ranges of one object and returns their bytes, in order.
Read = Callable[[Ranges], Awaitable[Sequence[Any]]]
#: A client made for the run: it gives the ``Read`` of any key of the bucket.
Client = Callable[[str], Read]
#: A tiny object each client reads one byte of before the clock starts (its requests
#: are left out of the counts), so every client is measured warm, as in a running app:
#: connections open, credentials and endpoints resolved.
WARM_KEY = "warm.bin"


# -- the worker: one client, one run ------------------------------------------------


def file_read(opened: Callable[[], Awaitable[Any]]) -> Read:
    """Seek and read each range in turn through an async file object, opened (by
    ``opened``, inside the clock) at the first read. obstore's reader "reads up to"
    the bytes asked: each range is read until it is whole, as its callers must."""
    files: list[Any] = []

    async def read(ranges: Ranges) -> list[Any]:
        if not files:
            files.append(await opened())
        out = []
        for start, end in ranges:
            seeking = files[0].seek(start)
            if inspect.isawaitable(seeking):  # obstore's seek is async (a future)
                await seeking
            pieces = [bytes(await files[0].read(end - start))]
            while (got := sum(map(len, pieces))) < end - start and pieces[-1]:
                pieces.append(bytes(await files[0].read(end - start - got)))
            out.append(b"".join(pieces))
        return out

    return read


async def asyncdl_client(plan: dict[str, Any], stack: AsyncExitStack, kind: str) -> Client:
    import asyncdl  # noqa: PLC0415

    os.environ["AWS_ENDPOINT_URL_S3"] = plan["endpoint"]
    engine = await stack.enter_async_context(asyncdl.Engine())
    bucket = plan["bucket"]
    known: dict[str, dict[str, Any]] = {}
    if kind.endswith("listed"):
        # The object's size and ETag from a listing before the clock, as a dataset
        # reader has them: every GET is pinned from the first, none waits for another.
        listing = await engine.client.list_objects_v2(Bucket=bucket, Prefix=plan["key"])
        entry = listing["Contents"][0]
        known[entry["Key"]] = {"size": entry["Size"], "etag": entry["ETag"]}
    if kind == "listed" or not kind:
        return lambda key: (
            lambda ranges: engine.read_ranges(bucket, key, ranges, **known.get(key, {}))
        )

    async def opened(key: str) -> Any:
        if key in known:  # opening sends nothing: the first read's GET is pinned
            return await stack.enter_async_context(engine.open_reader(bucket, key, **known[key]))
        # As a reader of a format with its index at the end opens it: the opening GET
        # brings the last block (1 MiB), the object's size and ETag; every other GET
        # is pinned to that ETag.
        return await stack.enter_async_context(engine.open_reader(bucket, key, first_block="end"))

    if kind == "open":
        return lambda key: file_read(lambda: opened(key))
    readers: dict[str, Any] = {}

    def reader_read(key: str) -> Read:
        # One range is read as a file reads (through the block cache); several at once
        # with the reader's read_ranges, pinned to its ETag as every read is.
        async def read(ranges: Ranges) -> list[bytes]:
            if key not in readers:
                readers[key] = await opened(key)
            reader = readers[key]
            if len(ranges) == 1:
                ((start, end),) = ranges
                reader.seek(start)
                return [await reader.read(end - start)]
            return await reader.read_ranges(ranges)  # type: ignore[no-any-return]

        return read

    return reader_read


async def obstore_client(plan: dict[str, Any], stack: AsyncExitStack, kind: str) -> Client:
    import obstore  # noqa: PLC0415
    from obstore.store import S3Store  # noqa: PLC0415

    env = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY"}
    config = {name: os.environ[var] for name, var in env.items() if var in os.environ}
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    store = S3Store(
        plan["bucket"],
        config={**config, "endpoint": plan["endpoint"], "region": region},  # type: ignore[arg-type]
        client_options={"allow_http": True},  # the proxy speaks plain HTTP
    )
    if not kind:

        def get_ranges(key: str) -> Read:
            async def read(ranges: Ranges) -> Sequence[Any]:
                starts, ends = [s for s, _ in ranges], [e for _, e in ranges]
                return await obstore.get_ranges_async(store, key, starts=starts, ends=ends)

            return read

        return get_ranges

    async def opened(key: str) -> Any:
        # Its defaults: a HEAD for the size, a 1 MiB buffer.
        reader = await obstore.open_reader_async(store, key)
        stack.callback(reader.close)
        return reader

    return lambda key: file_read(lambda: opened(key))


async def s3fs_client(plan: dict[str, Any], stack: AsyncExitStack, kind: str) -> Client:
    import s3fs  # noqa: PLC0415

    bucket, endpoint = plan["bucket"], plan["endpoint"]
    if not kind:
        # Its async API on this loop: one GET per range (fsspec merges none), gathered.
        fs = s3fs.S3FileSystem(asynchronous=True, endpoint_url=endpoint, skip_instance_cache=True)
        client = await fs.set_session()
        stack.push_async_callback(client.close)

        def cat_ranges(key: str) -> Read:
            async def read(ranges: Ranges) -> list[Any]:
                starts, ends = [s for s, _ in ranges], [e for _, e in ranges]
                paths = [f"{bucket}/{key}"] * len(ranges)
                return list(await fs._cat_ranges(paths, starts, ends))

            return read

        return cat_ranges
    # Its file object is synchronous (fsspec runs its own loop in a thread): an async
    # app calls it through a thread. Its defaults: a HEAD, a 50 MiB read-ahead cache.
    sync_fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)

    def opened(key: str) -> Any:
        file = sync_fs.open(f"{bucket}/{key}", "rb")
        stack.callback(file.close)
        return file

    def in_thread(key: str) -> Read:
        files: list[Any] = []

        def read_sync(ranges: Ranges) -> list[bytes]:
            if not files:
                files.append(opened(key))
            out = []
            for start, end in ranges:
                files[0].seek(start)
                out.append(files[0].read(end - start))
            return out

        return lambda ranges: asyncio.to_thread(read_sync, ranges)

    return in_thread


CLIENT_MAKERS = {"asyncdl": asyncdl_client, "obstore": obstore_client, "s3fs": s3fs_client}


def footer_length(tail: bytes) -> int:
    """The footer's length from a Parquet file's last 8 bytes (``<len>PAR1``)."""
    if len(tail) != 8 or tail[4:] != b"PAR1":
        raise ValueError(f"not the end of a Parquet file: {tail!r}")
    length: int = struct.unpack("<I", tail[:4])[0]
    return length


async def one_run(client: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Read the plan's ranges with ``client``: the ranges, their bytes, wall and CPU."""
    library, _, kind = client.partition("-")
    async with AsyncExitStack() as stack:
        made = await CLIENT_MAKERS[library](plan, stack, kind)
        if plan["warm"]:  # two bytes: s3rver answers bytes=0-0 with the whole object
            await made(WARM_KEY)([(0, 2)])
        read = made(plan["key"])
        wall, cpu = time.perf_counter(), time.process_time()
        if plan["case"] == "random":
            asked: Ranges = [(start, end) for start, end in plan["ranges"]]
            got = list(await read(asked))
        else:
            size = plan["size"]
            (tail,) = await read([(size - 8, size)])
            end = size - 8
            footer = (end - footer_length(bytes(tail)), end)
            chunks = [(start, end) for start, end in plan["ranges"]]
            asked = [(size - 8, size), footer, *chunks]
            got = [tail, *await read([footer]), *await read(asked[2:])]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "asked": asked, "got": got}


def check(local: str, asked: Ranges, got: Sequence[Any]) -> list[str]:
    """The ranges whose bytes differ from the local copy's (an exception is wrong too)."""
    wrong = []
    with open(local, "rb") as file:
        for (start, end), data in zip(asked, got, strict=True):
            if isinstance(data, BaseException):
                wrong.append(f"{start}-{end}: {data!r}")
                continue
            came, expected = bytes(data), os.pread(file.fileno(), end - start, start)
            if came != expected:
                pairs = zip(came, expected, strict=False)
                at = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
                where = f"{len(came)} bytes, the first wrong at +{at}"
                found = -1 if at is None else expected.find(came[at : at + 64])
                wrong.append(f"{start}-{end}: {where} (what came is at +{found})")
    return wrong


# -- the orchestrator ----------------------------------------------------------------


async def upload(endpoint: str, bucket: str, key: str, local: Path, *, create: bool) -> None:
    """Put ``local`` in 64 MiB parts (no checksum asked), as large objects are put."""
    async with seeding_client(endpoint, Seeding(0, "NONE")) as s3:
        if create:
            await s3.create_bucket(Bucket=bucket)
        upload = await s3.create_multipart_upload(Bucket=bucket, Key=key)
        parts: list[dict[str, Any]] = []
        with local.open("rb") as file:
            while body := file.read(64 * MiB):
                number = len(parts) + 1
                answer = await s3.upload_part(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload["UploadId"],
                    PartNumber=number,
                    Body=body,
                )
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
        await s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
        )


def random_plan(args: argparse.Namespace, local: Path) -> dict[str, Any]:
    with local.open("wb") as file:
        for _ in range(0, args.object_size, 64 * MiB):
            file.write(os.urandom(min(64 * MiB, args.object_size - file.tell())))
    rng = random.Random(args.seed)
    starts = [rng.randrange(args.object_size - args.range_size + 1) for _ in range(args.ranges)]
    return {
        "key": "random.bin",
        "size": args.object_size,
        "ranges": [(s, s + args.range_size) for s in starts],
    }


def parquet_plan(args: argparse.Namespace, local: Path) -> dict[str, Any]:
    """Eight columns of 2 MiB per row group (random int64 and float64, no dictionary,
    so each chunk keeps its size); the chunks of columns 1, 4 and 6 of the middle row
    group, located by the footer pyarrow wrote."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    rows = 2 * MiB // 8
    schema = pa.schema([(f"c{i}", pa.int64() if i % 2 else pa.float64()) for i in range(8)])
    with pq.ParquetWriter(local, schema, use_dictionary=False, compression="none") as writer:
        for _ in range(args.row_groups):
            columns = [
                pa.Array.from_buffers(field.type, rows, [None, pa.py_buffer(os.urandom(rows * 8))])
                for field in schema
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=rows)
    metadata = pq.read_metadata(local)
    group = metadata.row_group(args.row_groups // 2)
    ranges = []
    for index in (1, 4, 6):
        column = group.column(index)
        start = (
            column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
        )
        ranges.append((start, start + column.total_compressed_size))
    size = local.stat().st_size
    footer = (size - 8 - metadata.serialized_size, size - 8)
    return {"key": "table.parquet", "size": size, "ranges": ranges, "footer": footer}


def measure(proxy: TcpProxy, client: str, plan_path: Path) -> dict[str, Any]:
    proxy.reset_stats()
    command = [sys.executable, __file__, "--worker", client, "--plan", str(plan_path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    requests, relayed = proxy.requests, proxy.response_bytes
    lines = done.stdout.splitlines()
    if not lines or not lines[-1].startswith("{"):
        said = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"{client} exited {done.returncode} before its result:\n{said}")
    result: dict[str, Any] = json.loads(lines[-1])
    # A crash after the result was printed (at the interpreter's exit) is not a wrong
    # read: the run counts, and the table's notes say so.
    result["exit"] = done.returncode
    if result["bad"]:
        raise SystemExit(f"{client} read wrong bytes in {result['bad']} ranges: {result['wrong']}")
    key = json.loads(plan_path.read_text())["key"]
    return result | counts(requests, key) | {"mib": relayed / MiB}


def counts(requests: list[RequestRecord], key: str) -> dict[str, Any]:
    """Requests for ``key`` at the proxy (the warm-up's are left out), and the GETs not
    pinned to one version of it."""
    requests = [r for r in requests if r.path.split("?")[0].endswith(f"/{key}")]
    gets = [r for r in requests if r.method == "GET"]
    pinned = [r for r in gets if "if-match" in r.headers or "versionId=" in r.path]
    return {
        "gets": len(gets),
        "heads": sum(r.method == "HEAD" for r in requests),
        "other": sum(r.method not in ("GET", "HEAD") for r in requests),
        "unpinned": len(gets) - len(pinned),
        "etags": len({r.headers["if-match"] for r in pinned if "if-match" in r.headers}),
    }


def table(runs: list[dict[str, Any]], clients: Sequence[str]) -> list[str]:
    """Medians per client; ratios of wall and CPU to the first client's (asyncdl's) in
    the same run, then their median."""
    base = clients[0]
    lines = [
        "| client | GET | HEAD | GETs without If-Match | MiB relayed | wall (ms) | CPU (ms) "
        f"| wall / {base} | CPU / {base} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client in clients:
        mine = [run[client] for run in runs]
        median = {
            name: statistics.median(r[name] for r in mine)
            for name in mine[0]
            if name not in ("wrong",)
        }
        wall = statistics.median(run[client]["wall_s"] / run[base]["wall_s"] for run in runs)
        cpu = statistics.median(run[client]["cpu_s"] / run[base]["cpu_s"] for run in runs)
        lines.append(
            f"| {client} | {median['gets']:g} | {median['heads']:g} | {median['unpinned']:g} "
            f"| {median['mib']:.1f} | {median['wall_s'] * 1000:.0f} | {median['cpu_s'] * 1000:.0f} "
            f"| {wall:.2f} | {cpu:.2f} |"
        )
    crashed = [
        f"{client} (run {number}) exited {run[client]['exit']} after printing its result"
        for number, run in enumerate(runs, start=1)
        for client in clients
        if run[client]["exit"] != 0
    ]
    return lines + [f"\nnote: {line}" for line in crashed]


def main_bench(args: argparse.Namespace) -> None:
    bucket = f"ranges-{secrets.token_hex(4)}"
    source = asyncdl_source()  # before the runs: src/ may be edited while they go on
    chosen = set(args.clients or [c for case in CLIENTS.values() for c in case])
    clients = {case: [c for c in CLIENTS[case] if c in chosen] for case in args.cases}
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dest)))
        server = serve(stack, args.server, part_gets=False, scratch=str(scratch))
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint, rtt_ms=args.rtt_ms))
        plans: dict[str, Path] = {}
        warm = scratch / WARM_KEY
        warm.write_bytes(os.urandom(16))
        asyncio.run(upload(server.endpoint, bucket, WARM_KEY, warm, create=True))
        for case in args.cases:
            local = scratch / f"{case}.local"
            started = time.perf_counter()
            plan = (random_plan if case == "random" else parquet_plan)(args, local)
            plan |= {"case": case, "bucket": bucket, "local": str(local), "endpoint": proxy.url}
            plan["warm"] = not args.cold
            asyncio.run(upload(server.endpoint, bucket, plan["key"], local, create=False))
            plans[case] = scratch / f"{case}.json"
            plans[case].write_text(json.dumps(plan))
            took = time.perf_counter() - started
            print(
                f"{case}: {plan['size'] / MiB:.0f} MiB seeded in {took:.1f} s; "
                f"ranges {plan['ranges'][:3]}...",
                file=sys.stderr,
                flush=True,
            )
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in args.cases}
        for run in range(args.runs):
            for case in args.cases:
                row = {client: measure(proxy, client, plans[case]) for client in clients[case]}
                results[case].append(row)
                said = ", ".join(f"{c} {r['wall_s'] * 1000:.0f} ms" for c, r in row.items())
                print(f"run {run + 1}/{args.runs} {case}: {said}", file=sys.stderr, flush=True)
    print(
        f"server {server.name}; {args.rtt_ms:g} ms added per request; medians of {args.runs}; "
        f"{'cold' if args.cold else 'warm'} clients; asyncdl at {source}"
    )
    for case in args.cases:
        print(f"\n{case}:\n" + "\n".join(table(results[case], clients[case])))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "runs": results}, indent=2) + "\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", choices=SERVERS, default="s3rver", help="(s3rver)")
    parser.add_argument(
        "--cases",
        type=lambda t: t.split(","),
        default=["random", "parquet"],
        help="a comma list (random,parquet)",
    )
    parser.add_argument("--clients", type=lambda t: t.split(","), help="a comma list (all)")
    parser.add_argument("--runs", type=int, default=5, help="medians of (5)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument("--object-size", type=parse_size, default=GiB, help="random: (1GiB)")
    parser.add_argument("--ranges", type=int, default=200, help="random: ranges read (200)")
    parser.add_argument("--range-size", type=parse_size, default=64 * KiB, help="(64KiB)")
    parser.add_argument("--seed", type=int, default=25, help="random: the offsets' seed (25)")
    parser.add_argument("--row-groups", type=int, default=16, help="parquet: of 16 MiB (16)")
    parser.add_argument("--cold", action="store_true", help="no warm-up request before the clock")
    parser.add_argument("--dest", help="scratch directory (default: system temp)")
    parser.add_argument("--json", help="write every run to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        plan = json.loads(Path(args.plan).read_text())
        done = asyncio.run(one_run(args.worker, plan))
        asked = done.pop("asked")
        wrong = check(plan["local"], asked, done.pop("got"))
        said = done | {"ranges": len(asked), "wrong": wrong[:5], "bad": len(wrong)}
        print(json.dumps(said), flush=True)  # before the interpreter's exit
        return
    unknown = set(args.cases) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}: choose from {sorted(CLIENTS)}")
    every = {client for case in CLIENTS.values() for client in case}
    if args.clients and set(args.clients) - every:
        parser.error(f"unknown clients {sorted(set(args.clients) - every)}: {sorted(every)}")
    if "parquet" in args.cases and importlib.util.find_spec("pyarrow") is None:
        parser.error("the parquet case writes its file with pyarrow: pip install 'pyarrow>=15'")
    main_bench(args)


if __name__ == "__main__":
    main()
