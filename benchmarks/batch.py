"""Batch benchmark: asyncdl against its peers, many objects through a link with latency.

It seeds N objects into a fresh bucket (directly, not through the proxy), then
downloads them all with each client through asyncdl's test proxy, which adds
``--rtt-ms`` to every request (and caps each connection at ``--conn-mbps``). Each
client runs in its own subprocess so its CPU time and peak RSS are its own; requests
are counted at the proxy; every file is checked (size and MD5) against what was
seeded. Medians over ``--runs`` are printed as a table, with ratios against
asyncdl-get-first, and optionally written as JSON. ``--loop uvloop`` (or ``both``) runs
the clients on uvloop too, one row per client and loop (``obstore@uvloop``), each
loop's rows against the baseline on the same loop. The clients are in ``peers.py``,
the servers and the seeding in ``servers.py``.

    python benchmarks/batch.py --objects 1000 --size 1KiB --concurrency 10 --rtt-ms 20
    python benchmarks/batch.py --objects 1 --size 512MiB --multipart 16MiB --server fast-moto
    nox -s bench -- --server s3rver --objects 1 --size 512MiB --rtt-ms 0 --conn-mbps 40
    nox -s bench -- --server s3rver --loop both --clients asyncdl-get-first,obstore
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import math
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path
from typing import Any

from arguments import parse_size
from peers import CLIENTS, LOOPS, NO_LOOP, Job, MiB, file_name, run_worker
from report import notes, print_report, summarize
from servers import (
    CHECKSUMS,
    SERVERS,
    Seeding,
    Server,
    delete_bucket,
    seed,
    serve,
    stored_checksum,
)

GiB = 1024 * MiB
#: The clients' files are kept until the benchmark ends, not deleted before the next
#: client runs, when all of them take at most this much space (and half the free
#: space). Deleting thousands of files slows the creations that follow for half a
#: minute: ext4 without a journal (this machine's disk) passes over every inode freed
#: in the last 30 s, reading each one's dtime (``recently_deleted`` in perf, a third of
#: an ``asyncdl cp -r`` of 10,000 objects started right after another's deletion),
#: which charged each client for the one before it. Large objects go right after their
#: run: one file's deletion leaves next to nothing to pass over, and kept, gigabytes
#: would be written back to the disk while later clients run.
KEEP_FILES_MOST = 2 * GiB
#: Space a kept file of ``size`` bytes takes at least (a block).
BLOCK = 4096
#: Rounds of every client run before the counted ones, and not counted. The first
#: client of the first round runs right after the seeding (its files still being
#: written back, the server's code not yet warm): in two whole targets runs its first
#: run took 1.16-1.61 times the median of its other four in five of the six
#: workloads (1.31 on average, 0.99 in the sixth), the clients after it 1.05 on
#: average. Taking turns (:func:`in_turn`) cannot spread that: the first client of
#: the first counted round is always the first of ``--clients``, asyncdl in every
#: target.
WARM_UP = 1


def parse_clients(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown clients {unknown}; choose from {CLIENTS}")
    return names


#: Large downloads (at least this many bytes in all) run after ``warm_large_pages``.
WARM_FROM = 64 * MiB
#: The most ``warm_large_pages`` writes, whatever the download's size.
WARM_MOST = 2 * GiB
#: Its writes: as large as the CRT's (one per 8 MiB part), so the page cache takes
#: them in folios as large as the CRT's will be.
WARM_WRITE = 8 * MiB


def warm_large_pages(directory: Path, size: int) -> None:
    """Write ``size`` bytes (at most ``WARM_MOST``) in 8 MiB writes to a file in
    ``directory``, then delete it: the memory a large download's page cache is about
    to take is then memory the VM's host backs.

    This machine's kernel hands free memory back to the VM's host in blocks of 2 MiB
    and more (virtio-balloon's free page reporting, ``page_reporting_order`` 9). A
    write of 2 MiB or more is cached in folios of that size, taken from such blocks,
    and the host backs each again as it is first touched: charged to the writer as
    kernel time, inside the copy into the page cache (``copy_folio_from_iter_atomic``
    under perf). A 512 MiB file written in 8 MiB writes took 2.0 s of system time, in
    1 MiB writes 0.3 s. The CRT writes each 8 MiB part in one call, and spent anything
    from 1.1 to 4.7 s of CPU per GiB, by what the runs before it had freed; clients
    that write 256 KiB or less at a time (asyncdl, s5cmd) were not touched. The
    folios of this file, freed just before the run, are what the run's page cache
    takes. Taking turns with asyncdl's runs on the 512 MiB object, 6 runs of the CRT
    each spent 0.48-0.69 s after a warm-up of twice the object (the bound
    ``worker_main`` asks for), 0.67-1.13 s after one of the object's size, 0.49-1.80 s
    with none; asyncdl's stayed within its spread, with or without (0.58-0.71 s).
    Every large download runs after it, before its clock starts.
    """
    left = min(size, WARM_MOST)
    handle, name = tempfile.mkstemp(prefix=".warm-", dir=directory)
    # Nameless while it is written: a worker killed meanwhile leaves nothing behind.
    os.unlink(name)
    try:
        zeros = memoryview(bytes(WARM_WRITE))
        offset = 0
        while offset < left:
            offset += os.pwrite(handle, zeros[: left - offset], offset)
    finally:
        os.close(handle)


def worker_main(args: argparse.Namespace) -> None:
    """Run one client and print one JSON line: its times, peak RSS and errors."""
    where = Path(args.dest)
    job = Job(args.endpoint_url, args.bucket, args.objects, args.concurrency, where, args.loop)
    size = args.objects * args.size
    if size >= WARM_FROM:
        # Twice the download's bytes: once its size left some runs of the CRT slow.
        warm_large_pages(where.parent, 2 * size)
    print(json.dumps(run_worker(args.worker, job)), flush=True)
    # Measured and reported: the worker ends here, without the interpreter's
    # finalization. obstore's runtime aborted the process there (SIGABRT) in 4 of 30
    # runs, each after its report, which then counted as a failed run.
    os._exit(0)


def loops_of(choice: str) -> tuple[str, ...]:
    return LOOPS if choice == "both" else (choice,)


def rows(clients: list[str], loops: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each client on each loop, side by side; once for a client on no loop of ours."""
    found: list[tuple[str, str]] = []
    for client in clients:
        found += [(client, loops[0])] if client in NO_LOOP else [(client, loop) for loop in loops]
    return found


def in_turn(pairs: list[tuple[str, str]], run: int) -> list[tuple[str, str]]:
    """The pairs in the order of this run: the clients take turns going first, and so
    do a client's loops.

    A run right after another client's cost more CPU here than one right after the same
    client's (512 MiB: benchmarks/README.md, uvloop), so the loop that always went first
    looked slower. In one whole targets run the first client of a round (always asyncdl
    then) took 1.5-1.9 times the wall of its other loop right after it, in four rounds
    of five; in other runs no position paid. Taking turns charges such a cost to
    no one client, and a median of several runs leaves it out."""
    clients = list(dict.fromkeys(client for client, _ in pairs))
    shift = run % len(clients)  # --clients names one at least
    ordered: list[tuple[str, str]] = []
    for client in clients[shift:] + clients[:shift]:
        mine = [pair for pair in pairs if pair[0] == client]
        ordered += mine if run % 2 == 0 else reversed(mine)
    return ordered


def row_name(client: str, loop: str) -> str:
    """``obstore`` on asyncio's loop (the names the tables have always had), ``obstore@uvloop``."""
    return client if loop == "asyncio" or client in NO_LOOP else f"{client}@{loop}"


def yardsticks(pairs: list[tuple[str, str]], baseline: str) -> dict[str, str]:
    """The row each row's ratios are against: the baseline on the same loop."""
    return {row_name(client, loop): row_name(baseline, loop) for client, loop in pairs}


# -- the orchestrator: server, proxy, seeding, one subprocess per client and run --------


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
    client: str,
    loop: str,
    args: argparse.Namespace,
    proxy: Any,
    server: Server | None,
    *,
    bucket: str,
    digests: list[str],
    kept: list[Path] | None,
) -> dict[str, Any]:
    """One client on one loop, one run, in a fresh subprocess; the proxy counts its
    requests. Its files go into ``kept`` for later deletion, or now when it is None."""
    name = row_name(client, loop)
    dest = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=args.dest))
    url = args.direct or proxy.url
    command = [sys.executable, __file__, "--worker", client, "--endpoint-url", url]
    command += ["--bucket", bucket, "--objects", str(args.objects), "--loop", loop]
    command += ["--concurrency", str(args.concurrency), "--dest", str(dest)]
    command += ["--size", str(args.size)]
    try:
        proxy.reset_stats()
        # This process hosts the proxy (and moto; s3rver has its own process, counted
        # too): their CPU during the run is the cost of the fake network and server,
        # sharing the client's cores. Unknown for a server given by --endpoint-url.
        server_cpu = -_server_cpu(server)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        server_cpu += _server_cpu(server)
        requests = proxy.requests
        if done.returncode != 0:
            # A worker killed by a signal (a negative status) says nothing on stderr.
            said = f"exit status {done.returncode}\n{done.stderr.strip()[-2000:]}"
            if '"wall_s"' in done.stdout:
                said += "\n(after its report)"
            return {"client": name, "loop": loop, "failed": said}
        report = json.loads(done.stdout.strip().splitlines()[-1])
        problems = verify(dest, digests, args.size)
    finally:
        if kept is None:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            kept.append(dest)
    n, wall = args.objects, report["wall_s"]
    verified = report.get("verified")
    return {
        "client": name,
        "loop": loop,
        "wall_s": wall,
        "objects_per_s": n / wall,
        "cpu_ms_per_object": report["cpu_s"] * 1000 / n,
        "cpu_s_per_gib": report["cpu_s"] / (n * args.size / GiB),
        **_request_counts(requests, n, None if args.direct else proxy.max_in_flight),
        "server_cpu_ms_per_object": server_cpu * 1000 / n,
        "peak_rss_mib": report["peak_rss_kib"] / 1024,
        # NaN: a command, which does not say what it verified.
        "verified_per_object": float("nan") if verified is None else verified / n,
        "mib_per_s": n * args.size / MiB / wall,
        "client_errors": report["errors"],
        "first_errors": report["first_errors"],
        "bad_files": len(problems),
        "first_problems": problems[:3],
    }


def keeps_files(args: argparse.Namespace, clients: int) -> bool:
    """Whether every run's files can be kept until the end (``KEEP_FILES_MOST``)."""
    files: int = (args.warm_up + args.runs) * clients * args.objects
    room = min(KEEP_FILES_MOST, shutil.disk_usage(args.dest or tempfile.gettempdir()).free // 2)
    size: int = max(args.size, BLOCK)
    return files * size <= room


def delete_all(kept: list[Path]) -> None:
    for dest in kept:
        shutil.rmtree(dest, ignore_errors=True)


def _request_counts(requests: list[Any], n: int, in_flight: int | None) -> dict[str, float]:
    """Requests per object at the proxy; NaN with --direct (nothing counted them)."""
    if in_flight is None:
        names = ("get_per_object", "head_per_object", "part_gets_per_object", "max_in_flight")
        return dict.fromkeys(names, math.nan)
    return {
        "get_per_object": sum(r.method == "GET" for r in requests) / n,
        "head_per_object": sum(r.method == "HEAD" for r in requests) / n,
        "part_gets_per_object": sum("partNumber=" in r.path for r in requests) / n,
        "other_requests": sum(r.method not in ("GET", "HEAD") for r in requests),
        "max_in_flight": in_flight,
    }


def _server_cpu(server: Server | None) -> float:
    from peers import process_cpu  # noqa: PLC0415

    return process_cpu() if server is None else server.cpu()


def versions() -> dict[str, str]:
    names = ["asyncdl", "aiobotocore", "botocore", "boto3", "s3transfer", "obstore"]
    names += ["awscrt", "moto"]
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


def run_rounds(
    pairs: list[tuple[str, str]],
    args: argparse.Namespace,
    proxy: Any,
    server: Server | None,
    *,
    bucket: str,
    digests: list[str],
    kept: list[Path] | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The warm-up rounds (not counted, see ``WARM_UP``), then the counted runs: the
    results of each."""
    warm_ups: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for run in range(-args.warm_up, args.runs):  # warm-ups: the negative numbers
        # A warm-up round goes in the first counted round's order: then that round's
        # first client does not run right after its own warm-up (reversed, the last
        # warm-up pair would be the first counted one's, a run after the same client's).
        for client, loop in in_turn(pairs, max(run, 0)):
            result = run_client(
                client, loop, args, proxy, server, bucket=bucket, digests=digests, kept=kept
            )
            wall = f"{result['wall_s']:.2f}s" if "wall_s" in result else "FAILED"
            if run < 0:
                warm_ups.append(result)
                which = f"{run + args.warm_up + 1}/{args.warm_up}"
                print(f"warm-up {which} {result['client']:<22} {wall} (not counted)", flush=True)
            else:
                runs.append({"run": run + 1, **result})
                print(f"run {run + 1}/{args.runs} {result['client']:<26} {wall}", flush=True)
    return warm_ups, runs


def told(runs: list[dict[str, Any]], warm_ups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results whose failures and bad files the notes tell: every run's, and the
    warm-ups' named as such."""
    return [*runs, *({**result, "client": f"{result['client']} (warm-up)"} for result in warm_ups)]


def main_bench(args: argparse.Namespace) -> int:
    pairs = rows(args.clients or list(CLIENTS), loops_of(args.loop))
    clients = [row_name(*pair) for pair in pairs]
    source = asyncdl_source()  # before the runs: src/ may be edited while they go on
    with ExitStack() as stack:
        server = None
        endpoint = args.endpoint_url
        if endpoint is None:
            server = serve(stack, args.server, args.part_gets, args.dest)
            endpoint = server.endpoint
        args.server_name = endpoint if server is None else server.name
        args.direct = endpoint if args.direct else None
        from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

        bandwidth = args.conn_mbps * MiB if args.conn_mbps else None
        proxy = TcpProxy.for_url(endpoint, rtt_ms=args.rtt_ms, bandwidth=bandwidth)
        stack.enter_context(proxy)
        bucket = f"asyncdl-bench-{secrets.token_hex(4)}"
        started = time.perf_counter()
        seeding = Seeding(args.size, args.checksum, args.multipart, args.checksum_type)
        digests = asyncio.run(seed(endpoint, bucket, args.objects, seeding))
        stored = asyncio.run(stored_checksum(endpoint, bucket))
        print(
            f"seeded {args.objects} x {args.size} B into {bucket} on {args.server_name} "
            f"in {time.perf_counter() - started:.1f}s (HEAD says: {stored}); "
            f"clients go {'straight to' if args.direct else 'through'} {args.direct or proxy.url}; "
            f"asyncdl at {source}"
        )
        kept: list[Path] | None = [] if keeps_files(args, len(pairs)) else None
        if kept is not None:
            stack.callback(delete_all, kept)
        warm_ups, runs = run_rounds(
            pairs, args, proxy, server, bucket=bucket, digests=digests, kept=kept
        )
        if args.endpoint_url is not None:
            asyncio.run(delete_bucket(endpoint, bucket, args.objects))
    against = yardsticks(pairs, args.baseline)
    summary = summarize(runs, clients, against)
    found = notes(summary, told(runs, warm_ups), args)
    print_report(summary, args, found)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("worker", "bucket")}
        machine = {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "server": args.server_name,
        }
        document: dict[str, Any] = {"config": config, "machine": machine}
        document["versions"] = versions()
        document["asyncdl_source"] = source
        document["stored_checksum"] = stored
        document |= {**summary, "ratios_against": args.baseline, "yardsticks": against}
        document |= {"notes": found, "runs": runs, "warm_ups": warm_ups}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    # A warm-up that failed, or wrote a wrong byte, fails the benchmark as a run would.
    every = [*warm_ups, *runs]
    return 1 if any("failed" in r or r["bad_files"] or r["client_errors"] for r in every) else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000, help="objects to seed (1000)")
    parser.add_argument("--size", type=parse_size, default=1024, help="each: 1KiB, 512MiB, bytes")
    parser.add_argument("--concurrency", type=int, default=10, help="requests in flight (10)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="clients talk to the server itself: no proxy, so no latency, cap or request counts",
    )
    parser.add_argument(
        "--conn-mbps",
        type=float,
        help="cap each client connection's response bytes at this many MiB/s (no cap)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--endpoint-url", help="an existing S3-compatible server (default: moto)")
    where.add_argument(
        "--server",
        choices=SERVERS,
        default="moto",
        help="the server to start: moto, fast-moto (ranges read alone, checksums as S3), "
        "or s3rver (npm; installed on first use when node is present; stores no checksums)",
    )
    parser.add_argument("--clients", type=parse_clients, help=f"comma list (all): {CLIENTS}")
    parser.add_argument(
        "--loop",
        choices=(*LOOPS, "both"),
        default="asyncio",
        help="the event loop the clients run on (asyncio); both: a row per client and loop",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per client; medians (3)")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=WARM_UP,
        help=f"rounds of every client run first and not counted ({WARM_UP})",
    )
    parser.add_argument(
        "--baseline",
        choices=CLIENTS,
        default="asyncdl-get-first",
        help="the client the ratios are against (asyncdl-get-first; plain-get for large objects)",
    )
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
        help="embedded moto answers PartNumber GETs with the whole object (a store without "
        "part GETs, as moto before 5.2.6), not as S3",
    )
    # Internal: how the orchestrator starts one client in a subprocess.
    parser.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = seeding_problem(args.checksum, args.multipart, args.checksum_type)
    if problem:
        parser.error(problem)
    if args.direct and (args.rtt_ms or args.conn_mbps):
        parser.error("--direct has no proxy: give --rtt-ms 0 and no --conn-mbps")
    if args.conn_mbps is not None and not args.conn_mbps > 0:
        parser.error("--conn-mbps must be a positive number of MiB/s")
    if args.loop != "asyncio" and importlib.util.find_spec("uvloop") is None:
        parser.error(f"--loop {args.loop} needs uvloop (the bench extra installs it)")
    if args.runs < 1 or args.warm_up < 0:
        parser.error("--runs must be 1 or more, and --warm-up 0 or more")
    if args.dest is not None and not os.path.isdir(args.dest):
        parser.error(f"--dest {args.dest}: not a directory")
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
