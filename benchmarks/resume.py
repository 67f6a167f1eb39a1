"""Resume benchmark: ``asyncdl cp`` of a large object SIGKILLed half-way, then run again.

One object of ``--size`` random bytes on a server the benchmark starts (s3rver by
default: it serves a range from disk, where moto re-reads the whole object for each),
behind the test proxy, which caps each client connection at ``--conn-mbps`` MiB/s so
the download takes a while, and counts the response body bytes it relays. Each run:

1. ``asyncdl cp s3://B/K DIR/file --endpoint-url PROXY --json`` in a child process,
   SIGKILLed once the proxy has sent ``--kill-at`` of the object's bytes; then what is
   on disk: the files left in DIR, and how much of the partial file is already the
   object's bytes (compared in 1 MiB blocks with the object itself).
2. The same command again, to completion: the bytes and requests at the proxy, wall
   time, the target's MD5, what asyncdl says it reused (``reused_bytes`` in ``--json``),
   and that nothing but the target is left in DIR.
3. The baseline: a fresh DIR, killed the same way, then run again with
   ``--no-resume``.

"Missing" is the object's size less what asyncdl reused from its journal (its own
``reused_bytes``; less the bytes sent before the kill when it does not say). The
resumed run passes when it fetched at most the missing bytes plus one chunk.

    python benchmarks/resume.py --runs 3 --dest /work/bench-scratch
    nox -s bench -- resume --size 256MiB --conn-mbps 2
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
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
from pathlib import Path
from typing import Any

from arguments import parse_size
from batch import asyncdl_source
from peers import MiB, executable, key_name
from servers import SERVERS, Seeding, seed, seeding_client, serve

#: The granularity of the on-disk comparison (asyncdl writes in 1 MiB pieces).
BLOCK = MiB
#: What a killed or finished download may leave beside its target, by suffix.
LEFTOVERS = (".asyncdl-tmp", ".asyncdl-partial", ".asyncdl-journal")
#: Where files go by default: the system temp dir costs ~1 ms per file created here.
SCRATCH = Path(__file__).resolve().parent / "results" / "scratch"


def run_timed(
    argv: list[str], stdout: Any = subprocess.DEVNULL, env: dict[str, str] | None = None
) -> tuple[float, str]:
    """Run ``argv`` to its end (with ``env`` added to the environment); its wall
    seconds, and "" or why it failed."""
    environment = None if env is None else os.environ | env
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        done = subprocess.run(argv, stdout=stdout, stderr=stderr, env=environment, check=False)
        code = done.returncode
        wall = time.perf_counter() - started
        stderr.seek(0)
        said = stderr.read().decode(errors="replace").strip()[-1500:]
    return wall, "" if code == 0 else f"{Path(argv[0]).name} exited {code}: {said}"


def block_digests(data: bytes | Path, offset: int = 0) -> list[bytes]:
    """The MD5 of each ``BLOCK`` of ``data`` (bytes, or a file read a block at a time
    from ``offset`` on)."""
    if isinstance(data, bytes):
        return [hashlib.md5(data[i : i + BLOCK]).digest() for i in range(0, len(data), BLOCK)]
    digests = []
    with data.open("rb") as file:
        file.seek(offset)
        while block := file.read(BLOCK):
            digests.append(hashlib.md5(block).digest())
    return digests


def md5(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "md5").hexdigest()


async def fetch_reference(endpoint: str, bucket: str) -> tuple[str, list[bytes]]:
    """The object as stored (read straight from the server): its MD5 and block digests."""
    async with seeding_client(endpoint, Seeding(0)) as s3:
        answer = await s3.get_object(Bucket=bucket, Key=key_name(0))
        async with answer["Body"] as body:
            data = await body.read()
    return hashlib.md5(data).hexdigest(), block_digests(data)


class Bench:
    """The object, the proxy in front of its server, and the command that copies it."""

    def __init__(self, args: argparse.Namespace, proxy: Any, bucket: str) -> None:
        self.args = args
        self.proxy = proxy
        self.command = [executable("asyncdl"), "cp", f"s3://{bucket}/{key_name(0)}"]
        self.options = ["--endpoint-url", proxy.url, "--json"]
        if args.concurrency is not None:
            self.options += ["--concurrency", str(args.concurrency)]
        self.digest = ""
        self.blocks: list[bytes] = []

    def killed(self, target: Path) -> dict[str, Any]:
        """Start the copy and SIGKILL it once ``--kill-at`` of the bytes went out."""
        self.proxy.reset_stats()
        threshold = self.args.kill_at * self.args.size
        argv = [*self.command, str(target), *self.options]
        with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as child:
            while child.poll() is None and self.proxy.response_bytes < threshold:
                time.sleep(0.02)
            if child.poll() is not None:
                raise SystemExit(
                    f"the copy ended (exit {child.returncode}) before the kill point: "
                    "give a lower --conn-mbps"
                )
            child.send_signal(signal.SIGKILL)
        # Let the proxy notice the closed connections before its count is read.
        time.sleep(0.2)
        left = {path.name: path.stat().st_size for path in target.parent.iterdir()}
        partial = next((target.parent / n for n in left if n.endswith(LEFTOVERS[:2])), None)
        return {
            "sent": self.proxy.response_bytes,
            "left": left,
            "right_on_disk": 0 if partial is None else self.right_bytes(partial),
        }

    def right_bytes(self, partial: Path) -> int:
        """How many of the partial file's bytes are already the object's, block by block.

        The object's bytes may sit after a header of the journal's (a larger partial):
        the larger count of the two placements is the one.
        """
        extra = partial.stat().st_size - self.args.size
        counts = []
        for offset in {0, max(0, extra)}:
            found = block_digests(partial, offset)
            counts.append(sum(a == b for a, b in zip(found, self.blocks, strict=False)))
        return max(counts) * BLOCK

    def again(self, target: Path, flags: list[str]) -> dict[str, Any]:
        """Run the copy to its end; what it fetched, said and left."""
        self.proxy.reset_stats()
        with tempfile.TemporaryFile() as out:
            wall, failed = run_timed([*self.command, str(target), *self.options, *flags], out)
            out.seek(0)
            lines = [json.loads(line) for line in out.read().decode().splitlines() if line]
        said = lines[-1] if lines else {}
        requests = self.proxy.requests
        gets = [r for r in requests if r.method == "GET"]
        return {
            "wall_s": wall,
            "failed": failed,
            "sent": self.proxy.response_bytes,
            "get": len(gets),
            "get_if_match": sum("if-match" in r.headers for r in gets),
            "head": sum(r.method == "HEAD" for r in requests),
            "reused": said.get("reused_bytes"),
            "partial_discarded": said.get("partial_discarded"),
            "verified": said.get("verified"),
            "md5_ok": target.is_file() and md5(target) == self.digest,
            "left_after": sorted(set(os.listdir(target.parent)) - {target.name}),
        }

    def one(self, flags: list[str]) -> dict[str, Any]:
        """A killed copy and its second run (with ``flags``), in a fresh directory."""
        directory = Path(tempfile.mkdtemp(prefix="resume-", dir=self.args.dest))
        target = directory / "file"
        try:
            first = self.killed(target)
            second = self.again(target, flags)
        finally:
            shutil.rmtree(directory)
        size = self.args.size
        reused = second["reused"]
        missing = size - (first["sent"] if reused is None else reused)
        return {
            "run1_sent": first["sent"],
            "left_after_kill": first["left"],
            "right_on_disk": first["right_on_disk"],
            **{f"run2_{name}": value for name, value in second.items()},
            "missing": missing,
            "within": second["sent"] <= missing + self.args.chunk,
            # A journal may claim only bytes that are really there.
            "claims_ok": reused is None or reused <= first["right_on_disk"],
        }


def resumes(asyncdl: str) -> bool:
    """Whether this asyncdl has ``--no-resume`` (so resuming, on by default)."""
    done = subprocess.run([asyncdl, "cp", "--help"], capture_output=True, text=True, check=False)
    return "--no-resume" in done.stdout


def report(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    print(f"\nobject {args.size / MiB:.0f} MiB, chunk {args.chunk / MiB:.0f} MiB; medians of")
    print(f"{args.runs} runs; MiB at the proxy (response bodies); killed at {args.kill_at:.0%}")
    head = ("second run", "run 1", "right", "run 2", "reused", "missing", "≤ miss+chunk")
    more = ("GET", "If-Match", "HEAD", "wall s", "MD5 ok", "verified", "clean", "claims ok")
    print(row(head + more))
    print(row(("---",) * len(head + more)))
    for name, runs in rows.items():

        def median(field: str, runs: list[dict[str, Any]] = runs) -> float:
            values = [r[field] for r in runs if r[field] is not None]
            return statistics.median(values) if values else float("nan")

        mib = [median(f) / MiB for f in ("run1_sent", "right_on_disk", "run2_sent")]
        mib += [median("run2_reused") / MiB, median("missing") / MiB]
        cells = [name, *(f"{value:.1f}" for value in mib)]
        cells.append(_all(runs, "within"))
        cells += [f"{median(f):.0f}" for f in ("run2_get", "run2_get_if_match", "run2_head")]
        cells.append(f"{median('run2_wall_s'):.2f}")
        cells.append(_all(runs, "run2_md5_ok"))
        cells.append(_all(runs, "run2_verified"))
        cells.append("yes" if all(not r["run2_left_after"] for r in runs) else "no")
        cells.append(_all(runs, "claims_ok"))
        print(row(cells))
        for run in runs:
            notes = [f"after the kill: {run['left_after_kill']}"]
            if run["run2_left_after"]:
                notes.append(f"left after run 2: {run['run2_left_after']}")
            if run["run2_partial_discarded"]:
                notes.append(f"partial discarded: {run['run2_partial_discarded']}")
            if run["run2_failed"]:
                notes.append(run["run2_failed"])
            print(f"  {name}: " + "; ".join(notes))


def row(cells: Any) -> str:
    """A Markdown table row, to paste into benchmarks/README.md."""
    return "| " + " | ".join(cells) + " |"


def _all(runs: list[dict[str, Any]], field: str) -> str:
    return "yes" if all(r[field] for r in runs) else "no"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--size", type=parse_size, default=256 * MiB, help="(256MiB)")
    parser.add_argument("--conn-mbps", type=float, default=2.0, help="MiB/s per connection (2)")
    parser.add_argument(
        "--concurrency", type=int, help="asyncdl's --concurrency (default: its own, 10)"
    )
    parser.add_argument("--kill-at", type=float, default=0.5, help="share sent at the kill (0.5)")
    parser.add_argument("--runs", type=int, default=3, help="runs; medians (3)")
    parser.add_argument("--server", choices=SERVERS, default="s3rver", help="(s3rver)")
    parser.add_argument("--dest", default=str(SCRATCH), help=f"for the files ({SCRATCH})")
    parser.add_argument("--json", help="write every run to this file")
    args = parser.parse_args(argv)
    Path(args.dest).mkdir(parents=True, exist_ok=True)
    if not 0 < args.kill_at < 1:
        parser.error("--kill-at is a share of the object: between 0 and 1")
    # Children inherit an ignored SIGINT (a background job's): give them the default,
    # as a shell's foreground job has it (exec resets a handled signal to its default).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import asyncdl  # noqa: PLC0415
    from asyncdl.testing.tcp_proxy import TcpProxy  # noqa: PLC0415

    args.chunk = asyncdl.TransferConfig().chunk_size
    source = asyncdl_source()
    with ExitStack() as stack:
        server = serve(stack, args.server, part_gets=True, scratch=args.dest)
        bucket = f"asyncdl-resume-{secrets.token_hex(4)}"
        asyncio.run(seed(server.endpoint, bucket, 1, Seeding(args.size)))
        proxy = TcpProxy.for_url(server.endpoint, bandwidth=args.conn_mbps * MiB)
        bench = Bench(args, stack.enter_context(proxy), bucket)
        bench.digest, bench.blocks = asyncio.run(fetch_reference(server.endpoint, bucket))
        can_resume = resumes(bench.command[0])
        print(f"server: {server.name}; asyncdl at {source}; resumes: {can_resume}", flush=True)
        variants = {"resume (default)": [], "--no-resume": ["--no-resume"]}
        if not can_resume:
            variants = {"no resume flag (cannot resume)": []}
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for run in range(args.runs):
            for name, flags in variants.items():
                done = bench.one(flags)
                rows[name].append(done)
                fetched = f"{done['run1_sent'] / MiB:.1f} + {done['run2_sent'] / MiB:.1f} MiB"
                print(f"run {run + 1}/{args.runs} {name}: {fetched}", flush=True)
    report(rows, args)
    if args.json:
        document = {"config": vars(args), "server": server.name, "asyncdl_source": source}
        Path(args.json).write_text(json.dumps({**document, "runs": rows}, indent=2) + "\n")
    good = all(r["within"] and r["run2_md5_ok"] for r in rows.get("resume (default)", []))
    return 0 if good and not any(r["run2_failed"] for runs in rows.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
