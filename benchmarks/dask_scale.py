"""Scale-out benchmark: asyncdl.dask.download_manifest on a LocalCluster of 1, then 2 workers.

moto's server runs in its own process, behind asyncdl's test proxy (``--rtt-ms``
added per request) in this one; the same N objects are downloaded by each cluster
size into a fresh directory, every file is checked (size and MD5), and the medians
of ``--runs`` runs are printed with the CPU each party spent: the workers, moto,
and this process (proxy, scheduler, client).

    python benchmarks/dask_scale.py --objects 5000 --size 1KiB --runs 3 --dest /work/bench-scratch

Seeding, checking and the clusters' start-up are outside the timings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from arguments import parse_size
from batch import asyncdl_source, verify
from peers import file_name, key_name, process_cpu
from servers import Seeding, seed

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def moto_process() -> Iterator[tuple[str, int]]:
    """moto's server in its own process (its CPU is then its own); yield URL and pid."""
    from asyncdl.testing.moto_server import FAKE_ENV, free_port  # noqa: PLC0415

    for name, value in FAKE_ENV.items():
        os.environ.setdefault(name, value)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("moto's server did not start")
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(timeout=10)


def cpu_of(pid: int) -> float:
    """User + system seconds of another process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_engine(config: Any) -> None:
    from asyncdl.dask._runtime import runtime  # noqa: PLC0415

    runtime().run(runtime().engine(config))


def run_once(
    workers: int, args: argparse.Namespace, proxy_url: str, moto_pid: int, bucket: str
) -> dict[str, Any]:
    """One cluster of ``workers`` processes, one download of every object."""
    from distributed import Client, LocalCluster  # noqa: PLC0415

    import asyncdl  # noqa: PLC0415
    from asyncdl.dask import download_manifest  # noqa: PLC0415
    from asyncdl.testing.moto_server import FAKE_ENV  # noqa: PLC0415

    dest = Path(tempfile.mkdtemp(prefix=f"dask-{workers}w-", dir=args.dest))
    env = {**FAKE_ENV, "AWS_ENDPOINT_URL_S3": proxy_url}
    config = asyncdl.TransferConfig(max_concurrency=args.concurrency)
    items = [(bucket, key_name(i), file_name(i)) for i in range(args.objects)]
    with (
        LocalCluster(
            n_workers=workers,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",
            env=env,
        ) as cluster,
        Client(cluster) as client,
    ):
        # Steady state: each worker process imports asyncdl and opens its engine (about a
        # second of CPU, once per process) before the clock starts.
        client.run(open_engine, config)
        worker_cpu = -sum(client.run(process_cpu).values())
        moto_cpu, own_cpu = -cpu_of(moto_pid), -process_cpu()
        started = time.perf_counter()
        summary = download_manifest(
            items, dest, client=client, partition_size=args.partition_size, config=config
        )
        wall = time.perf_counter() - started
        worker_cpu += sum(client.run(process_cpu).values())
        moto_cpu += cpu_of(moto_pid)
        own_cpu += process_cpu()
    return {
        "summary": summary,
        "wall": wall,
        "dest": dest,
        "worker_cpu": worker_cpu,
        "moto_cpu": moto_cpu,
        "own_cpu": own_cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=5000, help="objects to seed (5000)")
    parser.add_argument("--size", type=parse_size, default=1024, help="each: 1KiB, 64KiB (1KiB)")
    parser.add_argument("--workers", default="1,2", help="cluster sizes to compare (1,2)")
    parser.add_argument("--concurrency", type=int, default=32, help="per worker engine (32)")
    parser.add_argument("--partition-size", type=int, default=500, help="objects per task (500)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument("--runs", type=int, default=3, help="runs per cluster size; medians (3)")
    parser.add_argument(
        "--dest",
        default=str(ROOT.parent / "bench-scratch"),
        help="where files go (../bench-scratch)",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.workers.split(",")]
    Path(args.dest).mkdir(parents=True, exist_ok=True)
    from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

    rows: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    bad = 0
    with ExitStack() as stack:
        endpoint, moto_pid = stack.enter_context(moto_process())
        proxy = stack.enter_context(TcpProxy.for_url(endpoint, rtt_ms=args.rtt_ms))
        bucket = f"asyncdl-dask-{secrets.token_hex(4)}"
        digests = asyncio.run(seed(endpoint, bucket, args.objects, Seeding(args.size)))
        print(
            f"seeded {args.objects} x {args.size} B; asyncdl at {asyncdl_source()}; "
            f"{os.cpu_count()} CPUs"
        )
        for run in range(args.runs):
            for workers in sizes:
                proxy.reset_stats()
                done = run_once(workers, args, proxy.url, moto_pid, bucket)
                summary, n = done["summary"], args.objects
                problems = verify(done["dest"], digests, args.size)
                shutil.rmtree(done["dest"], ignore_errors=True)
                bad += len(problems) + summary.failed
                rows[workers].append(
                    {
                        "wall_s": done["wall"],
                        "objects_per_s": n / done["wall"],
                        "worker_cpu_ms": done["worker_cpu"] * 1000 / n,
                        "moto_cpu_ms": done["moto_cpu"] * 1000 / n,
                        "own_cpu_ms": done["own_cpu"] * 1000 / n,
                        "gets": len(proxy.requests) / n,
                        "busiest": max(w.downloaded for w in summary.workers.values()) / n,
                    }
                )
                print(
                    f"run {run + 1}/{args.runs} workers={workers} {done['wall']:.2f}s "
                    f"bad={len(problems) + summary.failed}",
                    flush=True,
                )
    print(
        f"\nmedian of {args.runs}; {args.objects} x {args.size} B, {args.rtt_ms:g} ms added, "
        f"concurrency {args.concurrency}/worker, {args.partition_size} objects/task"
    )
    header = (
        f"{'workers':>7} {'wall s':>7} {'obj/s':>7} {'worker CPU ms/obj':>17} "
        f"{'moto CPU ms/obj':>15} {'proxy+sched CPU ms/obj':>22} {'GET/obj':>7} {'busiest':>7}"
    )
    print(header + "\n" + "-" * len(header))
    for workers, runs in rows.items():
        m = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
        print(
            f"{workers:>7} {m['wall_s']:>7.2f} {m['objects_per_s']:>7.1f} "
            f"{m['worker_cpu_ms']:>17.3f} {m['moto_cpu_ms']:>15.3f} "
            f"{m['own_cpu_ms']:>22.3f} {m['gets']:>7.2f} {m['busiest']:>7.2f}"
        )
    if bad:
        print(f"\nNOTE: {bad} bad files or failed objects")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
