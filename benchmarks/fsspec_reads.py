"""The fsspec benchmark: Zarr, pandas and ``cat_ranges`` through asyncdl's file system,
beside s3fs and obstore's adapters, on s3rver through the test proxy (``--rtt-ms``
added before each request; 20: 10 ms each way).

Three cases, each on objects seeded straight into the server:

- ``zarr``: a Zarr v3 array of ``--chunks`` chunks of 4 KiB (float64, no compressor,
  so every chunk object is 4 KiB) read whole, ``array[:]``, through Zarr's own store
  over each client: ``FsspecStore`` over asyncdl's file system and over s3fs (both
  ``asynchronous=True``, as Zarr wants them), Zarr's ``ObjectStore`` over obstore's
  ``S3Store``. Zarr's concurrency is set to ``--concurrency`` (64) for every client:
  its default (10) is the same cap for all, and no user who reads 10,000 chunks keeps it;
- ``parquet`` and ``parquet-column``: ``pd.read_parquet`` of a ``--parquet-size``
  (256 MiB) file of eight columns, all of them, then one (``c3``): asyncdl and s3fs by
  URL with ``storage_options`` (``asyncdl://`` and ``s3://``), obstore's fsspec adapter
  (``obstore.fsspec.FsspecStore``) as ``filesystem=``. Each library's file object runs
  on its defaults (s3fs: a 50 MiB read-ahead block);
- ``ranges``: ``fs.cat_ranges`` of ``--ranges`` (200) random ranges of ``--range-size``
  (64 KiB) of a 1 GiB object, in one call, with each library's file system.

Each client runs in a fresh process per run. It reads a tiny other object first (not
counted), so it is measured warm, as in a running app. Then it is metered from its
first request to its last: wall, and the process's CPU in all its threads (fsspec's
and Zarr's loop threads included). What it read is compared with the local copy
(the array's bytes, the data frame, every range) after the clock: one wrong byte fails
the benchmark. The proxy counts the GETs, HEADs and listings of each case's objects,
and the GETs that carry neither ``If-Match`` nor ``versionId`` (not pinned to one
version of the object).

    python3 -m nox -s bench -- fsspec --runs 5
    python benchmarks/fsspec_reads.py --cases zarr --chunks 2000 --runs 1   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from arguments import parse_size
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy
from batch import asyncdl_source
from peers import MiB
from ranges import GiB, KiB, check, random_plan, upload
from servers import SERVERS, Seeding, seeding_client, serve

CASES = ("zarr", "parquet", "parquet-column", "ranges")
CLIENTS = ("asyncdl", "s3fs", "obstore")
#: The one column ``parquet-column`` reads.
COLUMN = "c3"
WARM_KEY = "warm.bin"
WARM_ZARR = "warm.zarr"
WARM_PARQUET = "warm.parquet"


# -- the worker: one client, one run ------------------------------------------------


def credentials() -> dict[str, str]:
    return {
        "key": os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER"),
        "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", "S3RVER"),
        "region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }


def options(client: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Each fsspec file system's ``storage_options`` for the run: the proxy, and up to
    ``concurrency`` requests at once (asyncdl's engine and botocore's pool under s3fs
    hold 10 by default; obstore's pool has no bound)."""
    said = credentials()
    if client == "asyncdl":
        return {
            "endpoint_url": plan["endpoint"],
            "config": {"max_concurrency": plan["concurrency"]},
        }
    return {
        "endpoint_url": plan["endpoint"],
        "key": said["key"],
        "secret": said["secret"],
        "config_kwargs": {"max_pool_connections": plan["concurrency"]},
    }


def filesystem(client: str, plan: dict[str, Any], *, asynchronous: bool) -> Any:
    """Each library's fsspec file system on the proxy, fresh (no instance cache)."""
    said = credentials()
    if client == "asyncdl":
        from asyncdl.fsspec import AsyncdlFileSystem  # noqa: PLC0415

        return AsyncdlFileSystem(
            **options(client, plan), asynchronous=asynchronous, skip_instance_cache=True
        )
    if client == "s3fs":
        import s3fs  # noqa: PLC0415

        return s3fs.S3FileSystem(
            **options(client, plan), asynchronous=asynchronous, skip_instance_cache=True
        )
    from obstore.fsspec import FsspecStore  # noqa: PLC0415

    return FsspecStore(
        "s3",
        config={
            "access_key_id": said["key"],
            "secret_access_key": said["secret"],
            "region": said["region"],
            "endpoint": plan["endpoint"],
        },
        client_options={"allow_http": True},
        asynchronous=asynchronous,
    )


def zarr_read(client: str, plan: dict[str, Any]) -> Callable[[], Any]:
    import zarr  # noqa: PLC0415
    from zarr.storage import FsspecStore, ObjectStore  # noqa: PLC0415

    zarr.config.set({"async.concurrency": plan["concurrency"]})
    bucket, path = plan["bucket"], plan["key"]
    if client == "obstore":
        from obstore.store import S3Store  # noqa: PLC0415

        said = credentials()
        s3 = S3Store(
            bucket,
            config={
                "access_key_id": said["key"],
                "secret_access_key": said["secret"],
                "region": said["region"],
                "endpoint": plan["endpoint"],
            },
            client_options={"allow_http": True},
        )
        store: Any = ObjectStore(s3, read_only=True)

        def opened(path: str) -> Any:
            return zarr.open_array(store=store, path=path, mode="r")

    else:
        fs = filesystem(client, plan, asynchronous=True)

        def opened(path: str) -> Any:
            return zarr.open_array(
                store=FsspecStore(fs, path=f"{bucket}/{path}", read_only=True), mode="r"
            )

    # Warm: a small array of the same chunks read the same way (connections open, the
    # codecs' modules imported).
    opened(WARM_ZARR)[:]
    return lambda: opened(path)[:]


def parquet_read(client: str, plan: dict[str, Any], columns: list[str] | None) -> Callable[[], Any]:
    import pandas as pd  # noqa: PLC0415

    bucket, key = plan["bucket"], plan["key"]
    if client == "obstore":
        fs = filesystem("obstore", plan, asynchronous=False)

        def read(key: str) -> Any:
            return pd.read_parquet(f"{bucket}/{key}", columns=columns, filesystem=fs)

    else:
        scheme = "asyncdl" if client == "asyncdl" else "s3"
        settings = options(client, plan)

        def read(key: str) -> Any:
            url = f"{scheme}://{bucket}/{key}"
            return pd.read_parquet(url, columns=columns, storage_options=settings)

    # Warm: a small file of the same columns read the same way (connections open,
    # pyarrow's and pandas's modules imported; fsspec's cached instance is the one the
    # measured read finds).
    read(WARM_PARQUET)
    return lambda: read(key)


def ranges_read(client: str, plan: dict[str, Any]) -> Callable[[], Any]:
    fs = filesystem(client, plan, asynchronous=False)
    bucket, key = plan["bucket"], plan["key"]
    fs.cat_ranges([f"{bucket}/{WARM_KEY}"] * 2, [0, 8], [4, 16])
    starts = [start for start, _ in plan["ranges"]]
    ends = [end for _, end in plan["ranges"]]
    paths = [f"{bucket}/{key}"] * len(starts)
    return lambda: fs.cat_ranges(paths, starts, ends)


def one_run(client: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Read the plan's case with ``client``: wall, CPU and what was wrong."""
    case = plan["case"]
    if case == "zarr":
        read = zarr_read(client, plan)
    elif case.startswith("parquet"):
        read = parquet_read(client, plan, [COLUMN] if case == "parquet-column" else None)
    else:
        read = ranges_read(client, plan)
    wall, cpu = time.perf_counter(), time.process_time()
    got = read()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "wrong": wrong_in(plan, got)}


def wrong_in(plan: dict[str, Any], got: Any) -> list[str]:
    """What differs from the local copy, said briefly (empty: every byte right)."""
    case = plan["case"]
    if case == "ranges":
        return check(plan["local"], [tuple(r) for r in plan["ranges"]], got)[:5]
    if case == "zarr":
        import numpy as np  # noqa: PLC0415
        import zarr  # noqa: PLC0415

        local = np.asarray(zarr.open_array(store=plan["local"], mode="r")[:])
        array = np.asarray(got)
        same = array.shape == local.shape and array.tobytes() == local.tobytes()
        return [] if same else [f"the array differs: {array.shape} against {local.shape}"]
    import pandas as pd  # noqa: PLC0415

    columns = [COLUMN] if case == "parquet-column" else None
    local = pd.read_parquet(plan["local"], columns=columns)
    return [] if got.equals(local) else [f"the frame differs: {got.shape} against {local.shape}"]


# -- the orchestrator ----------------------------------------------------------------


def zarr_plan(
    args: argparse.Namespace, scratch: Path, name: str = "grid.zarr", across: int = 100
) -> dict[str, Any]:
    """A square-ish grid of 16 x 32 float64 chunks (4 KiB each), random, uncompressed."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    down = args.chunks // 100
    local = scratch / name
    array = zarr.create_array(
        store=str(local),
        shape=(16 * down, 32 * across),
        chunks=(16, 32),
        dtype="f8",
        compressors=None,
        fill_value=0.0,
    )
    array[:] = np.random.default_rng(args.seed).standard_normal(array.shape)
    return {"key": name, "local": str(local)}


def parquet_plan(
    args: argparse.Namespace, scratch: Path, name: str = "table.parquet", rows: int = 2 * MiB // 8
) -> dict[str, Any]:
    """Eight columns of random int64 and float64 (no dictionary, no compression, so the
    file is ``--parquet-size``), row groups of ``rows`` (16 MiB), written by pyarrow."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    local = scratch / name
    schema = pa.schema([(f"c{i}", pa.int64() if i % 2 else pa.float64()) for i in range(8)])
    with pq.ParquetWriter(local, schema, use_dictionary=False, compression="none") as writer:
        for _ in range(max(1, args.parquet_size // (rows * 64))):
            columns = [
                pa.Array.from_buffers(field.type, rows, [None, pa.py_buffer(os.urandom(rows * 8))])
                for field in schema
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=rows)
    return {"key": name, "local": str(local)}


def tree(root: Path, prefix: str) -> dict[str, bytes]:
    """Every file under ``root``, keyed ``prefix/<its path>``."""
    files = [path for path in root.rglob("*") if path.is_file()]
    return {f"{prefix}/{path.relative_to(root).as_posix()}": path.read_bytes() for path in files}


async def upload_tree(endpoint: str, bucket: str, objects: dict[str, bytes]) -> int:
    """Put ``objects``, 64 at once."""
    gate = asyncio.Semaphore(64)
    async with seeding_client(endpoint, Seeding(0, "NONE")) as s3:

        async def put(key: str) -> None:
            async with gate:
                await s3.put_object(Bucket=bucket, Key=key, Body=objects[key])

        await asyncio.gather(*map(put, objects))
    return len(objects)


def seeded(args: argparse.Namespace, case: str, scratch: Path, endpoint: str, bucket: str) -> Any:
    """The case's plan, its objects put in the server (the two Parquet cases share one)."""
    if case == "zarr":
        plan = zarr_plan(args, scratch)
        objects = tree(Path(plan["local"]), plan["key"])
        count = asyncio.run(upload_tree(endpoint, bucket, objects))
        return plan | {"objects": count, "mib": count * 4 * KiB / MiB}
    if case.startswith("parquet"):
        local = scratch / "table.parquet"
        plan = {"key": local.name, "local": str(local)}
        if not local.exists():
            plan = parquet_plan(args, scratch)
            asyncio.run(upload(endpoint, bucket, plan["key"], local, create=False))
        return plan | {"objects": 1, "mib": local.stat().st_size / MiB}
    local = scratch / "random.local"
    plan = random_plan(args, local) | {"local": str(local)}
    asyncio.run(upload(endpoint, bucket, plan["key"], local, create=False))
    return plan | {"objects": 1, "mib": plan["size"] / MiB}


def measure(proxy: TcpProxy, client: str, plan_path: Path) -> dict[str, Any]:
    proxy.reset_stats()
    command = [sys.executable, __file__, "--worker", client, "--plan", str(plan_path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    requests = proxy.requests
    lines = done.stdout.splitlines()
    if not lines or not lines[-1].startswith("{"):
        said = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"{client} exited {done.returncode} before its result:\n{said}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["exit"] = done.returncode
    if result["wrong"]:
        raise SystemExit(f"{client} read wrong bytes: {result['wrong']}")
    return result | counts(requests, json.loads(plan_path.read_text())["key"])


def counts(requests: list[RequestRecord], key: str) -> dict[str, Any]:
    """The case's requests at the proxy (the warm-up's left out): a listing is a GET of
    the bucket with ``list-type`` and the key in its prefix; a GET is pinned by
    ``If-Match`` or ``versionId``."""
    listings = [
        r for r in requests if r.method == "GET" and "list-type=" in r.path and key in r.path
    ]
    mine = [r for r in requests if f"/{key}" in r.path.split("?")[0]]
    gets = [r for r in mine if r.method == "GET"]
    pinned = [r for r in gets if "if-match" in r.headers or "versionId=" in r.path]
    return {
        "gets": len(gets),
        "heads": sum(r.method == "HEAD" for r in mine),
        "lists": len(listings),
        "unpinned": len(gets) - len(pinned),
    }


def table(runs: list[dict[str, Any]], clients: Sequence[str]) -> list[str]:
    """Medians per client; each ratio is the client's against s3fs's in the same run,
    then their median."""
    base = "s3fs" if "s3fs" in clients else clients[0]
    lines = [
        "| client | wall (ms) | CPU (ms) | GET | HEAD | LIST | GETs unpinned "
        f"| wall / {base} | CPU / {base} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client in clients:
        mine = [run[client] for run in runs]

        def median(name: str, mine: list[dict[str, Any]] = mine) -> float:
            return float(statistics.median(r[name] for r in mine))

        wall = statistics.median(run[client]["wall_s"] / run[base]["wall_s"] for run in runs)
        cpu = statistics.median(run[client]["cpu_s"] / run[base]["cpu_s"] for run in runs)
        lines.append(
            f"| {client} | {median('wall_s') * 1000:.0f} | {median('cpu_s') * 1000:.0f} "
            f"| {median('gets'):g} | {median('heads'):g} | {median('lists'):g} "
            f"| {median('unpinned'):g} | {wall:.2f} | {cpu:.2f} |"
        )
    crashed = [
        f"{client} (run {number}) exited {run[client]['exit']} after printing its result"
        for number, run in enumerate(runs, start=1)
        for client in clients
        if run[client]["exit"] != 0
    ]
    return lines + [f"\nnote: {line}" for line in crashed]


def main_bench(args: argparse.Namespace) -> None:
    bucket = f"fsspec-{secrets.token_hex(4)}"
    source = asyncdl_source()  # before the runs: src/ may be edited while they go on
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dest)))
        server = serve(stack, args.server, part_gets=False, scratch=str(scratch))
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint, rtt_ms=args.rtt_ms))
        warm = scratch / WARM_KEY
        warm.write_bytes(os.urandom(16))
        asyncio.run(upload(server.endpoint, bucket, WARM_KEY, warm, create=True))
        small = argparse.Namespace(chunks=100, seed=1, parquet_size=0)
        objects = tree(Path(zarr_plan(small, scratch, WARM_ZARR, across=2)["local"]), WARM_ZARR)
        warm_parquet = Path(parquet_plan(small, scratch, WARM_PARQUET, rows=64)["local"])
        objects[WARM_PARQUET] = warm_parquet.read_bytes()
        asyncio.run(upload_tree(server.endpoint, bucket, objects))
        plans: dict[str, Path] = {}
        for case in args.cases:
            started = time.perf_counter()
            plan = seeded(args, case, scratch, server.endpoint, bucket)
            plan |= {"case": case, "bucket": bucket, "endpoint": proxy.url}
            plan["concurrency"] = args.concurrency
            plans[case] = scratch / f"{case}.json"
            plans[case].write_text(json.dumps(plan))
            print(
                f"{case}: {plan['objects']} object(s), {plan['mib']:.0f} MiB, seeded in "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in args.cases}
        for run in range(args.runs):
            for case in args.cases:
                row = {client: measure(proxy, client, plans[case]) for client in args.clients}
                results[case].append(row)
                said = ", ".join(f"{c} {r['wall_s'] * 1000:.0f} ms" for c, r in row.items())
                print(f"run {run + 1}/{args.runs} {case}: {said}", file=sys.stderr, flush=True)
    print(
        f"server {server.name}; {args.rtt_ms:g} ms added per request; medians of {args.runs}; "
        f"warm clients; asyncdl at {source}"
    )
    for case in args.cases:
        print(f"\n{case}:\n" + "\n".join(table(results[case], args.clients)))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": results}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", choices=SERVERS, default="s3rver", help="(s3rver)")
    parser.add_argument(
        "--cases", type=lambda t: t.split(","), default=list(CASES), help="a comma list (all)"
    )
    parser.add_argument(
        "--clients", type=lambda t: t.split(","), default=list(CLIENTS), help="(all)"
    )
    parser.add_argument("--runs", type=int, default=5, help="medians of (5)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument("--chunks", type=int, default=10_000, help="zarr: chunks (10000)")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="requests at once, every client (64)"
    )
    parser.add_argument(
        "--parquet-size", type=parse_size, default=256 * MiB, help="parquet: (256MiB)"
    )
    parser.add_argument("--object-size", type=parse_size, default=GiB, help="ranges: (1GiB)")
    parser.add_argument("--ranges", type=int, default=200, help="ranges: how many (200)")
    parser.add_argument("--range-size", type=parse_size, default=64 * KiB, help="(64KiB)")
    parser.add_argument("--seed", type=int, default=25, help="the random data's seed (25)")
    parser.add_argument("--dest", help="scratch directory (default: system temp)")
    parser.add_argument("--json", help="write every run to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        plan = json.loads(Path(args.plan).read_text())
        print(json.dumps(one_run(args.worker, plan)), flush=True)  # before the exit
        os._exit(0)  # the loops' threads and caches are not part of the measurement
    for name, given, known in (("cases", args.cases, CASES), ("clients", args.clients, CLIENTS)):
        if set(given) - set(known):
            parser.error(f"unknown {name} {sorted(set(given) - set(known))}: {list(known)}")
    if args.chunks < 100 or args.chunks % 100:
        parser.error("--chunks: a multiple of 100 (the grid is 100 chunks across)")
    main_bench(args)


if __name__ == "__main__":
    main()
