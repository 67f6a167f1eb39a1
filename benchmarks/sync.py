"""Sync benchmark: ``asyncdl sync``, ``s5cmd sync`` and ``aws s3 sync`` of one prefix.

``--objects`` objects of ``--size`` random bytes under one prefix, put straight into a
server the benchmark starts (moto by default: s3rver lists 10,000 objects slowly and
fails pages with InternalError), and the test proxy in front, adding ``--rtt-ms`` to
every request and counting them. For each tool and run, into a fresh
directory: (a) a first sync, (b) a re-run with nothing changed, (c) a re-run after
``--changed`` objects were put again with new bytes of the same size. Each phase's
wall time (the whole command) and requests at the proxy by kind: LIST (a GET of the
bucket with a listing query), GET and HEAD of objects, anything else; after (a) and
(c) every file is checked (size, MD5) against what the bucket holds.

Each tool runs at its default concurrency, and also at ``--concurrency`` N where it
takes one and N is not its default: asyncdl ``--concurrency`` (10), s5cmd
``--numworkers`` (256), aws ``max_concurrent_requests`` in a config file of the
benchmark's own (10); aws also with ``--exact-timestamps`` (without it, it never
fetches an object replaced by one of the same size). A tool that is not installed
(``asyncdl sync`` before it exists) is reported as not available.

    python benchmarks/sync.py --objects 10000 --size 1KiB --runs 3
    nox -s bench -- sync --objects 1000 --tools s5cmd,aws
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arguments import names_from, parse_size
from batch import asyncdl_source, verify
from peers import PREFIX, executable, key_name
from resume import LEFTOVERS, SCRATCH, run_timed
from servers import SERVERS, Seeding, seed, seeding_client, serve

TOOLS = ("asyncdl", "s5cmd", "aws")
#: Each tool's own concurrency when not told.
DEFAULTS = {"asyncdl": 10, "s5cmd": 256, "aws": 10}
#: What shows a tool is there: a version of asyncdl without the sync command lacks it.
ASK = {"asyncdl": ["sync", "--help"], "s5cmd": ["version"], "aws": ["--version"]}
PHASES = ("first", "unchanged", "changed")
KINDS = ("LIST", "GET", "HEAD", "other")


@dataclass(frozen=True, slots=True)
class Variant:
    """One tool at one concurrency (None: its default), with extra flags."""

    tool: str
    concurrency: int | None
    flags: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        n = "" if self.concurrency is None else f" N={self.concurrency}"
        return " ".join([self.tool + n, *self.flags])


@dataclass(slots=True)
class Bench:
    """The bucket, the proxy in front of its server, and the objects' current MD5s."""

    args: argparse.Namespace
    endpoint: str
    proxy: Any
    bucket: str
    digests: list[str]
    scratch: Path

    def command(self, variant: Variant, directory: Path) -> tuple[list[str], dict[str, str]]:
        """The command line, and the environment it adds (aws: its config file)."""
        source, url = f"s3://{self.bucket}/{PREFIX}", self.proxy.url
        n = variant.concurrency
        if variant.tool == "asyncdl":
            argv = [executable("asyncdl"), "sync", source, str(directory), "--endpoint-url", url]
            return argv + ([] if n is None else ["--concurrency", str(n)]), {}
        if variant.tool == "s5cmd":
            argv = [executable("s5cmd"), "--endpoint-url", url]
            argv += [] if n is None else ["--numworkers", str(n)]
            # The wildcard: the keys under the prefix, named without it, into DIR/.
            return [*argv, "sync", f"{source}*", f"{directory}/"], {}
        # A config file of its own, so no ~/.aws/config of the machine's applies.
        config = self.scratch / f"aws-config-{n}"
        settings = "" if n is None else f"s3 =\n  max_concurrent_requests = {n}\n"
        config.write_text(f"[default]\n{settings}")
        argv = [executable("aws"), "s3", "sync", source, str(directory), "--endpoint-url", url]
        return [*argv, *variant.flags], {"AWS_CONFIG_FILE": str(config)}

    def phase(self, variant: Variant, directory: Path, check: bool) -> dict[str, Any]:
        """One sync into ``directory``; its wall time, requests by kind, bad files."""
        argv, env = self.command(variant, directory)
        self.proxy.reset_stats()
        wall, failed = run_timed(argv, env=env)
        done: dict[str, Any] = {"wall_s": wall, "failed": failed}
        done |= kinds(self.proxy.requests, self.bucket)
        if check:
            problems = verify(directory, self.digests, self.args.size)
            kept = [p for p in problems if _own_record(p)]
            bad = [p for p in problems if p not in kept]
            done |= {"bad": len(bad), "first_bad": bad[:3], "kept": kept[:3]}
        return done

    async def change(self) -> None:
        """Put ``--changed`` objects, spread over the prefix, again with new bytes."""
        step = max(1, self.args.objects // self.args.changed)
        seeding = Seeding(self.args.size)
        async with seeding_client(self.endpoint, seeding) as s3:
            indexes = list(range(0, self.args.objects, step))[: self.args.changed]
            puts = [seeding.put(s3, self.bucket, key_name(i)) for i in indexes]
            for index, digest in zip(indexes, await asyncio.gather(*puts), strict=True):
                self.digests[index] = digest

    def one(self, variant: Variant) -> dict[str, dict[str, Any]]:
        directory = Path(tempfile.mkdtemp(prefix="sync-", dir=self.scratch))
        try:
            first = self.phase(variant, directory, check=True)
            unchanged = self.phase(variant, directory, check=False)
            # s5cmd and aws compare a file's mtime with LastModified, which listings
            # give to the second: change the objects a second after the files were made.
            time.sleep(1.1)
            asyncio.run(self.change())
            changed = self.phase(variant, directory, check=True)
        finally:
            shutil.rmtree(directory)
        return {"first": first, "unchanged": unchanged, "changed": changed}


def _own_record(problem: str) -> bool:
    """A hidden file a tool keeps of its own (say, asyncdl's record of what it wrote),
    not a temp file or partial left behind."""
    name = problem.removeprefix("stray file ")
    return problem.startswith("stray file .") and not name.endswith(LEFTOVERS)


def kinds(requests: list[Any], bucket: str) -> dict[str, int]:
    """Requests by kind: a listing is a GET of the bucket itself with a listing query."""
    counts = dict.fromkeys(KINDS, 0)
    for request in requests:
        path, _, query = request.path.partition("?")
        of_bucket = path.strip("/") == bucket
        if request.method == "GET" and of_bucket and ("list-type=" in query or "prefix=" in query):
            counts["LIST"] += 1
        elif request.method in ("GET", "HEAD") and not of_bucket:
            counts[request.method] += 1
        else:
            counts["other"] += 1
    return counts


def available(tool: str) -> str:
    """ "" when the tool can run here, else why not."""
    try:
        command = [executable(tool), *ASK[tool]]
    except FileNotFoundError as exc:
        return str(exc)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else f"`{' '.join(command[1:])}` exited {done.returncode}"


def variants(tools: list[str], concurrency: int) -> list[Variant]:
    found = []
    for tool in tools:
        found.append(Variant(tool, None))
        if concurrency != DEFAULTS[tool]:
            found.append(Variant(tool, concurrency))
        if tool == "aws":
            # Without it aws fetches a same-size object only when the file is newer
            # than the object (it sets the file's mtime to LastModified): never, here.
            found.append(Variant(tool, None, ("--exact-timestamps",)))
    return found


def report(rows: dict[str, list[dict[str, dict[str, Any]]]], missing: dict[str, str]) -> None:
    head = ["tool", "phase", "wall s", *KINDS, "files"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, runs in rows.items():
        for phase in PHASES:
            done = [run[phase] for run in runs]
            wall = statistics.median(d["wall_s"] for d in done)
            counts = [statistics.median(d[kind] for d in done) for kind in KINDS]
            files = "" if "bad" not in done[0] else "right"
            if any(d.get("bad") or d["failed"] for d in done):
                files = f"{max(d.get('bad', 0) for d in done)} wrong" + " (failed)" * any(
                    d["failed"] for d in done
                )
            cells = [name, phase, f"{wall:.2f}", *(f"{c:.0f}" for c in counts), files]
            print("| " + " | ".join(cells) + " |")
    for name, runs in rows.items():
        for number, run in enumerate(runs, start=1):
            for phase, said in run.items():
                for note in (said["failed"], *said.get("first_bad", []), *said.get("kept", [])):
                    if note:
                        print(f"  {name}, run {number}, {phase}: {note}")
    for tool, why in missing.items():
        print(f"{tool}: not available ({why})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=10_000, help="objects (10000)")
    parser.add_argument("--size", type=parse_size, default=1024, help="each (1KiB)")
    parser.add_argument("--changed", type=int, default=100, help="put again before (c) (100)")
    parser.add_argument("--concurrency", type=int, default=10, help="N, besides defaults (10)")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="added per request (20)")
    parser.add_argument("--tools", type=names_from(TOOLS), default=list(TOOLS), help="(all)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians (3)")
    parser.add_argument("--server", choices=SERVERS, default="moto", help="(moto, embedded)")
    parser.add_argument("--dest", default=str(SCRATCH), help=f"for the files ({SCRATCH})")
    parser.add_argument("--json", help="write every run to this file")
    args = parser.parse_args(argv)
    if not 0 < args.changed <= args.objects:
        parser.error("--changed must be between 1 and --objects")
    # Ctrl-C stops the benchmark (and, their SIGINT at its default, the tools).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

    scratch = Path(args.dest)
    scratch.mkdir(parents=True, exist_ok=True)
    missing = {tool: why for tool in args.tools if (why := available(tool))}
    chosen = variants([t for t in args.tools if t not in missing], args.concurrency)
    source = asyncdl_source()
    args.load_before = " ".join(f"{n:.2f}" for n in os.getloadavg())
    with ExitStack() as stack:
        server = serve(stack, args.server, part_gets=True, scratch=args.dest)
        bucket = f"asyncdl-sync-{secrets.token_hex(4)}"
        started = time.perf_counter()
        digests = asyncio.run(seed(server.endpoint, bucket, args.objects, Seeding(args.size)))
        print(f"seeded {args.objects} x {args.size} B in {time.perf_counter() - started:.1f}s")
        print(f"server: {server.name}; asyncdl at {source}", flush=True)
        proxy = stack.enter_context(TcpProxy.for_url(server.endpoint, rtt_ms=args.rtt_ms))
        bench = Bench(args, server.endpoint, proxy, bucket, digests, scratch)
        rows: dict[str, list[dict[str, dict[str, Any]]]] = {v.name: [] for v in chosen}
        for run in range(args.runs):
            for variant in chosen:
                done = bench.one(variant)
                rows[variant.name].append(done)
                walls = ", ".join(f"{p} {done[p]['wall_s']:.2f}s" for p in PHASES)
                print(f"run {run + 1}/{args.runs} {variant.name}: {walls}", flush=True)
    load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    print(f"\n{args.objects} x {args.size} B, {args.rtt_ms:g} ms; medians of {args.runs} runs")
    print(f"load average at the end: {load} (at the start: {args.load_before})")
    report(rows, missing)
    if args.json:
        document = {"config": vars(args), "server": server.name, "asyncdl_source": source}
        document |= {"not_available": missing, "runs": rows}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 1 if any(_failed(name, runs) for name, runs in rows.items()) else 0


def _failed(name: str, runs: list[dict[str, dict[str, Any]]]) -> bool:
    """A command failed, or left wrong files; aws by default is expected to miss the
    changed objects (a finding of the table, not a failure of the benchmark)."""
    for run in runs:
        for phase, said in run.items():
            if said["failed"] or (said.get("bad") and (name != "aws" or phase != "changed")):
                return True
    return False


if __name__ == "__main__":
    sys.exit(main())
