"""Bandwidth-cap benchmark: capped downloads' wall time and the client's CPU.

Objects of random bytes on a server the benchmark starts (fast-moto by default),
behind the test proxy (no cap of its own: it counts the GETs, the answers open at
once, that is not yet wholly relayed, and the body bytes it relays; on loopback the
socket buffers take the last MiBs of a capped part early, so fewer answers are open
than parts are in flight). Each scenario runs in a fresh worker process, one
asyncdl ``Engine`` with ``chunk_size=--chunk`` (4 MiB: a 64 MiB object is 16 parts,
so that the default concurrency of 10 has 10 parts in flight), and reports its wall
time and its own CPU (user + system, all threads) from the first request to the last
byte on disk, and the most reads that waited for the cap at once (each a part in
flight); every file is checked against the object's MD5. Scenarios, in turn in
each run:

- ``uncapped``: one ``--size`` object, no cap (what the cap slows down);
- ``capped``: the same with ``max_bandwidth=--rate``: expected ``size / rate``;
- ``two at once``: two objects of half the size on one engine, started together,
  capped: together they take ``size / rate``; each has the share of the rate that
  its parts have of the reads, that is of the budget's slots (``two at once, 20
  slots``: ``max_concurrency=20``, room for all 16 parts of both at once);
- ``asyncdl cp``: the command, ``--max-bandwidth --rate --chunk-size --chunk``, as a
  process: its wall and CPU (from its rusage) include the interpreter's start-up,
  which ``asyncdl cp, uncapped`` (no ``--max-bandwidth``) shows.

    python benchmarks/bandwidth.py --runs 3
    nox -s bench -- bandwidth --size 64MiB --rate 8MiB
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from arguments import parse_size
from batch import asyncdl_source
from peers import MiB, executable, key_name
from servers import SERVERS, Seeding, seed, serve

#: Each scenario's objects (of ``--size`` / objects bytes), and whether it is capped.
SCENARIOS = {
    "uncapped": (1, False),
    "capped": (1, True),
    "two at once": (2, True),
    "two at once, 20 slots": (2, True),
    "asyncdl cp, uncapped": (1, False),
    "asyncdl cp": (1, True),
}


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def md5(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "md5").hexdigest()


async def download(args: argparse.Namespace) -> dict[str, Any]:
    """The worker's part: one scenario's downloads on one engine, timed in-process."""
    import asyncdl  # noqa: PLC0415 - the worker only

    objects, capped = SCENARIOS[args.worker]
    config = asyncdl.TransferConfig(
        chunk_size=args.chunk,
        max_bandwidth=args.rate if capped else None,
        max_concurrency=20 if args.worker.endswith("20 slots") else 10,
    )
    waiting = count_waiting()
    keys = [key_name(i) for i in range(objects)]
    files = [Path(args.dest, f"file{i}") for i in range(len(keys))]
    walls: list[float] = []
    async with asyncdl.Engine(config=config) as engine:

        async def one(key: str, file: Path) -> None:
            await engine.download(args.bucket, key, file)
            walls.append(time.perf_counter() - started)

        started, cpu = time.perf_counter(), cpu_seconds()
        async with asyncio.TaskGroup() as tasks:
            for key, file in zip(keys, files, strict=True):
                tasks.create_task(one(key, file))
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return {
        "wall": wall,
        "cpu": cpu,
        "each": sorted(walls),
        "md5": [md5(f) for f in files],
        "waiting": waiting["most"],
    }


def count_waiting() -> dict[str, int]:
    """Count the reads waiting for the cap at once (the most, and now)."""
    from asyncdl._wire.bandwidth import TokenBucket  # noqa: PLC0415 - the worker only

    counts = {"now": 0, "most": 0}
    take = TokenBucket.take

    async def counted(bucket: TokenBucket, size: int) -> None:
        counts["now"] += 1
        counts["most"] = max(counts["most"], counts["now"])
        try:
            await take(bucket, size)
        finally:
            counts["now"] -= 1

    TokenBucket.take = counted  # type: ignore[method-assign,assignment]
    return counts


def run_cp(
    args: argparse.Namespace, env: dict[str, str], dest: Path, *, capped: bool
) -> dict[str, Any]:
    argv = [executable("asyncdl"), "cp", f"s3://{args.buckets[0]}/{key_name(0)}", str(dest)]
    argv += ["--chunk-size", str(args.chunk), "-q"]
    argv += ["--max-bandwidth", str(args.rate)] if capped else []
    started, cpu = time.perf_counter(), cpu_seconds(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu
    return {"wall": wall, "cpu": cpu, "each": [wall], "md5": [md5(dest)], "waiting": None}


def one_run(args: argparse.Namespace, scenario: str, proxy: Any) -> dict[str, Any]:
    """``scenario`` once, in a fresh directory and process; the proxy's counts with it."""
    env = os.environ | {"AWS_ENDPOINT_URL_S3": proxy.url}
    proxy.reset_stats()
    with tempfile.TemporaryDirectory(dir=args.dest) as directory:
        if scenario.startswith("asyncdl cp"):
            done = run_cp(args, env, Path(directory) / "file", capped=scenario == "asyncdl cp")
        else:
            bucket = args.buckets[SCENARIOS[scenario][0] - 1]
            command = [sys.executable, __file__, "--worker", scenario, "--bucket", bucket]
            command += ["--dest", directory, "--rate", str(args.rate), "--chunk", str(args.chunk)]
            answer = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if answer.returncode != 0:
                raise SystemExit(f"the {scenario} worker failed:\n{answer.stderr}")
            done = json.loads(answer.stdout)
    digests = args.digests[SCENARIOS[scenario][0] - 1]
    done["md5_ok"] = done["md5"] == digests[: len(done["md5"])]
    done["max_in_flight"] = proxy.max_in_flight
    done["gets"] = sum(r.method == "GET" for r in proxy.requests)
    done["mib_sent"] = proxy.response_bytes / MiB
    return done


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    expected = args.size / args.rate
    print(
        f"\n{args.size / MiB:g} MiB, cap {args.rate / MiB:g} MiB/s (expected {expected:.2f} s), "
        f"chunk {args.chunk / MiB:g} MiB; medians of {args.runs} runs"
    )
    head = ("scenario", "wall s", "÷ expected", "each s", "client CPU s", "CPU ÷ wall")
    more = ("reads waiting", "answers open", "GETs", "MiB sent", "MD5 ok")
    print(row(head + more))
    print(row(("---",) * len(head + more)))
    for name, runs in rows.items():
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        each = [statistics.median(walls) for walls in zip(*(r["each"] for r in runs), strict=True)]
        ratio = f"{wall / expected:.3f}" if SCENARIOS[name][1] else "-"
        cells = [name, f"{wall:.2f}", ratio]
        cells += [" / ".join(f"{w:.2f}" for w in each), f"{cpu:.2f}", f"{cpu / wall:.1%}"]
        waiting = [r["waiting"] for r in runs if r["waiting"] is not None]
        cells += [str(max(waiting)) if waiting else "-"]
        cells += [str(max(r["max_in_flight"] for r in runs))]
        cells += [f"{statistics.median(r['gets'] for r in runs):.0f}"]
        cells += [f"{statistics.median(r['mib_sent'] for r in runs):.1f}"]
        cells.append("yes" if all(r["md5_ok"] for r in runs) else "no")
        print(row(cells))


def row(cells: Any) -> str:
    """A Markdown table row, to paste into benchmarks/README.md."""
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--size", type=parse_size, default=64 * MiB, help="(64MiB)")
    parser.add_argument("--rate", type=parse_size, default=8 * MiB, help="bytes/s (8MiB)")
    parser.add_argument("--chunk", type=parse_size, default=4 * MiB, help="(4MiB)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians (3)")
    parser.add_argument("--server", choices=SERVERS, default="fast-moto", help="(fast-moto)")
    parser.add_argument("--dest", help="directory for the files (default: system temp)")
    parser.add_argument("--json", help="write every run to this file")
    # Internal: a scenario run by a worker process (see one_run()).
    for internal in ("--worker", "--bucket"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(asyncio.run(download(args))))
        return 0
    from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

    with ExitStack() as stack:
        server = serve(stack, args.server, part_gets=False, scratch=args.dest)
        tag = secrets.token_hex(4)
        args.buckets = [f"asyncdl-bandwidth-{tag}", f"asyncdl-bandwidth-{tag}-halves"]
        args.digests = [
            asyncio.run(seed(server.endpoint, args.buckets[0], 1, Seeding(args.size))),
            asyncio.run(seed(server.endpoint, args.buckets[1], 2, Seeding(args.size // 2))),
        ]
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint))
        print(f"server: {server.name}; asyncdl at {asyncdl_source()}", flush=True)
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCENARIOS}
        for run in range(args.runs):
            for name in SCENARIOS:
                done = one_run(args, name, proxy)
                rows[name].append(done)
                print(f"run {run + 1}/{args.runs} {name}: {done['wall']:.2f} s", flush=True)
    report(rows, args)
    if args.json:
        document = {"config": {k: v for k, v in vars(args).items() if k != "digests"}}
        Path(args.json).write_text(json.dumps({**document, "runs": rows}, indent=2) + "\n")
    return 0 if all(r["md5_ok"] for runs in rows.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
