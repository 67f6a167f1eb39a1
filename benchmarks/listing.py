"""Listing at scale: ``download_prefix`` over up to a million listed objects, beside s5cmd.

A stateless fake S3 (``fake_s3.py``, in a process of its own) serves ``--objects``
synthetic keys of ``--size`` bytes; nothing is seeded, so a million keys cost the
server nothing. Each tool copies the whole prefix into a fresh directory under
``--dest``, at ``--concurrency``:

- ``asyncdl``: ``Engine(config=TransferConfig(max_concurrency=N)).download_prefix(
  "bench", "k/", dir)`` in a worker process of its own, metered from its first request
  to its last result (imports and the engine's opening outside). The worker samples
  its own RSS (and Python's allocated blocks) every 2 % of the objects, so memory per
  object is measured twice: (peak RSS - RSS before the first request) / N, which
  carries the fixed cost of the first connections and lazily built state, and the
  growth from 10 % of the objects to the end, per object, which does not.
- ``asyncdl-cli``: ``asyncdl cp -r s3://bench/k/ DIR --concurrency N``, whole.
- ``s5cmd``: ``s5cmd --numworkers N cp 's3://bench/k/*' DIR/`` (its Go binary), whole.

Per tool and run: wall, objects/s, client CPU per object, the server's CPU per
object, peak RSS, requests by kind and the most object GETs open at once at the
server (with ``--latency-ms`` each GET waits that long before its answer, so that
figure is the most the client had in flight). Then every file is counted (names and
sizes; nothing else may be left) and ``--check`` of them, spread over the keys, are
read back against the bytes the server computes; the directory is removed. Medians
over ``--runs``.

``--tracemalloc``: asyncdl alone, under tracemalloc; what was allocated between 10 %
of the objects and the end and is still held, by line and by traceback.

    nox -s bench -- listing --objects 50000,200000,1000000 --runs 1
    nox -s bench -- listing --objects 200000 --tools asyncdl --tracemalloc
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from arguments import names_from, parse_size
from fake_s3 import BUCKET, KEY_PREFIX, FakeS3Process, Objects
from peers import executable, process_cpu

TOOLS = ("asyncdl", "asyncdl-cli", "s5cmd")
COMMANDS = ("asyncdl-cli", "s5cmd")
MiB = 1024 * 1024
#: Where the files go unless told: a tmpfs (creating a file on / costs up to 1 ms here).
TMPFS = Path("/dev/shm")
SCRATCH = Path(__file__).resolve().parent / "results" / "scratch"
#: What one tiny file costs a tmpfs: a page of data, an inode and a dentry.
_FILE_COST = 4096 + 1024
#: Fake credentials: the fake S3 checks no signature, but the clients sign.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "fake",
    "AWS_SECRET_ACCESS_KEY": "fake",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def rss_kib() -> int:
    """This process's resident set now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_rss_kib() -> int:
    """This process's own peak RSS (VmHWM: ru_maxrss would carry the parent's over exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# -- the asyncdl worker -------------------------------------------------------------------


async def run_asyncdl(args: argparse.Namespace) -> dict[str, Any]:
    """download_prefix of the whole prefix; times, RSS samples, results, errors."""
    import asyncdl  # noqa: PLC0415

    os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    config = asyncdl.TransferConfig(max_concurrency=args.concurrency)
    expected = args.objects
    step = max(1, expected // 50)
    tracing = args.tracemalloc
    snapshots: list[tracemalloc.Snapshot] = []
    samples: list[tuple[int, int, int]] = []
    errors: list[str] = []
    done = failed = verified = 0
    async with asyncdl.Engine(config=config) as engine:
        if tracing:
            tracemalloc.start(6)
        samples.append((0, rss_kib(), sys.getallocatedblocks()))
        started_wall, started_cpu = time.perf_counter(), process_cpu()
        async for result in engine.download_prefix(BUCKET, KEY_PREFIX, args.dest):
            done += 1
            verified += result.verified
            if result.error is not None:
                failed += 1
                if len(errors) < 3:
                    errors.append(repr(result.error))
            if done % step == 0:
                samples.append((done, rss_kib(), sys.getallocatedblocks()))
                if tracing and done == expected // 10 // step * step:
                    snapshots.append(tracemalloc.take_snapshot())
        wall, cpu = time.perf_counter() - started_wall, process_cpu() - started_cpu
        samples.append((done, rss_kib(), sys.getallocatedblocks()))
        if tracing:
            snapshots.append(tracemalloc.take_snapshot())
            tracemalloc.stop()
        stats = engine.stats()
    report: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "results": done, "failed": failed}
    report |= {"verified": verified, "errors": errors, "samples": samples}
    report |= {"peak_rss_kib": peak_rss_kib(), "base_rss_kib": samples[0][1]}
    report["engine_stats"] = repr(stats)
    if len(snapshots) == 2:
        early, late = snapshots
        report["tracemalloc"] = grown(early, late, objects=done - expected // 10 // step * step)
    return report


def grown(early: tracemalloc.Snapshot, late: tracemalloc.Snapshot, objects: int) -> list[str]:
    """What was allocated between the two snapshots and is still held, largest first."""
    lines = [f"held between the snapshots, over {objects} objects:"]
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    early, late = early.filter_traces(ignore), late.filter_traces(ignore)
    for stat in late.compare_to(early, "lineno")[:20]:
        lines.append(f"  {stat.size_diff:+,} B {stat.count_diff:+,} blocks  {stat.traceback[0]}")
    for stat in late.compare_to(early, "traceback")[:3]:
        lines.append(f"traceback of {stat.size_diff:+,} B in {stat.count_diff:+,} blocks:")
        lines += [f"    {line}" for line in stat.traceback.format()]
    return lines


def worker_main(args: argparse.Namespace) -> None:
    print(json.dumps(asyncio.run(run_asyncdl(args))), flush=True)


# -- the orchestrator ------------------------------------------------------------------------


def command(tool: str, endpoint: str, dest: Path, concurrency: int) -> list[str]:
    if tool == "s5cmd":
        argv = [executable("s5cmd"), "--endpoint-url", endpoint, "--numworkers", str(concurrency)]
        # The wildcard: the keys under the prefix, named without it, into DIR/.
        return [*argv, "cp", f"s3://{BUCKET}/{KEY_PREFIX}*", f"{dest}/"]
    argv = [executable("asyncdl"), "cp", "-r", f"s3://{BUCKET}/{KEY_PREFIX}", str(dest)]
    return [*argv, "--concurrency", str(concurrency), "--endpoint-url", endpoint]


def run_command(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """A whole command: wall, CPU and peak RSS from its own rusage (which is at least
    this small orchestrator's RSS at the fork: Linux carries it over exec)."""
    # The commands print a line per object: a million lines would fill a pipe's reader.
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        errors = []
        if code != 0:
            stderr.seek(0)
            said = stderr.read()[-1500:].decode(errors="replace").strip()
            errors.append(f"{Path(argv[0]).name} exited {code}: {said}")
    report: dict[str, Any] = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}
    return report | {"peak_rss_kib": usage.ru_maxrss, "errors": errors}


def run_worker(
    args: argparse.Namespace, endpoint: str, dest: Path, env: dict[str, str]
) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--worker", "--endpoint-url", endpoint]
    argv += ["--objects", str(args.count), "--concurrency", str(args.concurrency)]
    argv += ["--dest", str(dest)] + ["--tracemalloc"] * args.tracemalloc
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"errors": [f"the worker exited {done.returncode}: {done.stderr[-1500:]}"]}
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def check_files(dest: Path, objects: Objects, sample: int) -> list[str]:
    """Every object's file with its size, nothing else; ``sample`` read back whole.

    Names are checked one by one as the directory is read, never held in a set: this
    process's RSS is the floor under a command's peak RSS."""
    problems: list[str] = []
    found = 0
    with os.scandir(dest) as entries:
        for entry in entries:
            if objects.index(KEY_PREFIX + entry.name) is None or not entry.is_file():
                if len(problems) < 5:
                    problems.append(f"stray {entry.name}")
                continue
            found += 1
            if entry.stat().st_size != objects.size and len(problems) < 5:
                problems.append(f"{entry.name} has {entry.stat().st_size} bytes")
    if found != objects.count:
        problems.append(f"{found} files of {objects.count}")
    chosen = {0, objects.count - 1, *random.Random(1).sample(range(objects.count), sample)}
    for index in sorted(chosen):
        key = objects.key(index)
        path = dest / key.removeprefix(KEY_PREFIX)
        with contextlib.suppress(FileNotFoundError):
            if path.read_bytes() != objects.body(key) and len(problems) < 10:
                problems.append(f"{path.name} has the wrong bytes")
    return problems


def one_run(args: argparse.Namespace, tool: str, server: FakeS3Process) -> dict[str, Any]:
    dest = Path(tempfile.mkdtemp(prefix=f"listing-{tool}-", dir=args.root))
    env = os.environ | FAKE_ENV
    try:
        server.reset()
        before = server.stats()
        if tool == "asyncdl":
            report = run_worker(args, server.endpoint, dest, env)
        else:
            report = run_command(command(tool, server.endpoint, dest, args.concurrency), env)
        after = server.stats()
        report["server_cpu_s"] = after["cpu_s"] - before["cpu_s"]
        report["requests"] = after["requests"]
        report["most_open_gets"] = after["most_open_gets"]
        checked = time.perf_counter()
        report["problems"] = check_files(dest, server.objects, min(args.check, args.count))
        report["check_s"] = time.perf_counter() - checked
    finally:
        removed = time.perf_counter()
        shutil.rmtree(dest, ignore_errors=True)
    report["remove_s"] = time.perf_counter() - removed
    return report


def memory(report: dict[str, Any], objects: int) -> dict[str, float]:
    """Bytes of RSS per object: peak over the baseline, and the growth from 10 % of
    the objects to the end (RSS and Python's allocated blocks), which leaves out the
    warm-up's fixed cost."""
    samples = report.get("samples")
    if not samples or objects <= 0:
        return {}
    done = samples[-1][0]
    early = next((s for s in samples if s[0] >= done // 10 and s[0] > 0), samples[-1])
    late_rss = max(s[1] for s in samples if s[0] >= early[0])
    span = max(done - early[0], 1)
    return {
        "per_object_b": (report["peak_rss_kib"] - report["base_rss_kib"]) * 1024 / objects,
        "late_growth_b": (late_rss - early[1]) * 1024 / span,
        "blocks_per_object": (samples[-1][2] - early[2]) / span,
    }


def default_root(objects: int, size: int) -> Path:
    """The tmpfs when it has room for the largest run's files twice over, else the
    git-ignored scratch directory."""
    need = 2 * objects * (_FILE_COST + (size + 4095) // 4096 * 4096)
    if TMPFS.is_dir() and shutil.disk_usage(TMPFS).free > need:
        return TMPFS / "asyncdl-listing"
    return SCRATCH


def cell(values: list[float], form: str) -> str:
    return format(statistics.median(values), form) if values else "-"


def print_table(count: int, rows: dict[str, list[dict[str, Any]]]) -> None:
    head = [
        "objects",
        "tool",
        "wall s",
        "obj/s",
        "CPU ms/obj",
        "srv CPU ms/obj",
        "peak RSS MiB",
        "RSS before MiB",
        "B/obj (peak)",
        "B/obj (10 %→end)",
        "blocks/obj",
        "most GETs open",
        "LIST",
        "GET",
        "HEAD",
        "files",
    ]
    print("| " + " | ".join(head) + " |\n|" + "---|---|" + "---:|" * (len(head) - 3) + "---|")
    for tool, runs in rows.items():
        good = [r for r in runs if "wall_s" in r]
        mem = [memory(r, count) for r in good]

        def values(name: str, runs: list[dict[str, Any]] = good) -> list[float]:
            return [float(r[name]) for r in runs if name in r]

        walls = values("wall_s")
        requests = [r.get("requests", {}) for r in good]
        bad = [p for r in runs for p in r.get("problems", []) + r.get("errors", [])]
        cells = [
            f"{count:,}",
            tool,
            cell(walls, ".1f"),
            cell([count / w for w in walls], ",.0f"),
            cell([r["cpu_s"] / count * 1000 for r in good], ".3f"),
            cell([r["server_cpu_s"] / count * 1000 for r in good], ".3f"),
            cell([r["peak_rss_kib"] / 1024 for r in good], ".1f"),
            cell([r["base_rss_kib"] / 1024 for r in good if "base_rss_kib" in r], ".1f"),
            cell([m["per_object_b"] for m in mem if m], ".1f"),
            cell([m["late_growth_b"] for m in mem if m], ".1f"),
            cell([m["blocks_per_object"] for m in mem if m], ".3f"),
            cell(values("most_open_gets"), ".0f"),
            *(cell([q.get(kind, 0) for q in requests], ".0f") for kind in ("LIST", "GET", "HEAD")),
            "right" if not bad else f"{len(bad)} problems",
        ]
        print("| " + " | ".join(cells) + " |")
    for tool, runs in rows.items():
        for number, run in enumerate(runs, start=1):
            for note in [*run.get("problems", []), *run.get("errors", [])]:
                print(f"  {tool}, run {number}: {note}")
            for line in run.get("tracemalloc", []):
                print(f"  {tool}, run {number}: {line}")


def parse_counts(text: str) -> list[int]:
    try:
        counts = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of counts: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("counts must be at least 1")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=parse_counts, default=[1_000_000], help="N[,N...]")
    parser.add_argument("--size", type=parse_size, default=1024, help="each object (1KiB)")
    parser.add_argument("--concurrency", type=int, default=64, help="(64)")
    parser.add_argument(
        "--tools",
        type=names_from(TOOLS),
        default=["asyncdl", "s5cmd"],
        help="asyncdl,s5cmd; also asyncdl-cli",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs per N; medians (1)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="per GET, at the server")
    parser.add_argument("--check", type=int, default=1000, help="files read back per run")
    parser.add_argument("--dest", help=f"for the files ({TMPFS} if it has room, else {SCRATCH})")
    parser.add_argument("--tracemalloc", action="store_true", help="asyncdl under tracemalloc")
    parser.add_argument("--json", help="write every run to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.objects = args.objects[0]
        worker_main(args)
        return 0
    if args.tracemalloc:
        args.tools = ["asyncdl"]
    root = Path(args.dest) if args.dest else default_root(max(args.objects), args.size)
    root.mkdir(parents=True, exist_ok=True)
    args.root = str(root)
    source = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(f"files under {root}; asyncdl at {source or '?'}", flush=True)
    everything: dict[str, Any] = {"config": dict(vars(args)), "runs": {}}
    load_before = " ".join(f"{n:.2f}" for n in os.getloadavg())
    tables: list[tuple[int, dict[str, list[dict[str, Any]]]]] = []
    for count in args.objects:
        args.count = count
        rows: dict[str, list[dict[str, Any]]] = {tool: [] for tool in args.tools}
        with FakeS3Process(count, args.size, latency_ms=args.latency_ms) as server:
            for run in range(args.runs):
                for tool in args.tools:
                    done = one_run(args, tool, server)
                    rows[tool].append(done)
                    said = f"{done['wall_s']:.1f}s" if "wall_s" in done else "failed"
                    if "peak_rss_kib" in done:
                        said += f", peak RSS {done['peak_rss_kib'] / 1024:.1f} MiB"
                    if per := memory(done, count):
                        said += f", {per['per_object_b']:.1f} B/obj over the start"
                        said += f", {per['late_growth_b']:.1f} B/obj from 10 %"
                    print(
                        f"{count:,} objects, run {run + 1}/{args.runs}, {tool}: {said}"
                        f" (check {done['check_s']:.1f}s, removal {done['remove_s']:.1f}s)",
                        flush=True,
                    )
        tables.append((count, rows))
        everything["runs"][str(count)] = rows
    load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    print(f"\n{args.size} B each, concurrency {args.concurrency}, latency {args.latency_ms:g} ms")
    print(f"medians of {args.runs}; load average {load} (at the start: {load_before})")
    print(f"orchestrator RSS (the floor under a command's peak): {rss_kib() / 1024:.1f} MiB")
    for count, rows in tables:
        print_table(count, rows)
    if args.json:
        everything |= {"asyncdl_source": source}
        Path(args.json).write_text(json.dumps(everything, indent=2, default=str) + "\n")
    failed = any(
        r.get("problems") or r.get("errors")
        for _, rows in tables
        for runs in rows.values()
        for r in runs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
