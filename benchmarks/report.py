"""The batch benchmark's report: medians over the runs, ratios, notes, and the table."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from peers import COMMANDS, NO_LOOP, MiB

METRICS = (
    "wall_s",
    "objects_per_s",
    "cpu_ms_per_object",
    "cpu_s_per_gib",
    "get_per_object",
    "head_per_object",
    "part_gets_per_object",
    "peak_rss_mib",
    "mib_per_s",
    "max_in_flight",
    "server_cpu_ms_per_object",
    "verified_per_object",
)


def summarize(
    runs: list[dict[str, Any]], clients: list[str], yardsticks: Mapping[str, str]
) -> dict[str, Any]:
    """The median of each metric per client, and ratios against each one's yardstick
    (the baseline client on the same event loop)."""
    medians: dict[str, dict[str, float]] = {}
    for client in clients:
        good = [r for r in runs if r["client"] == client and "failed" not in r]
        if good:
            medians[client] = {m: statistics.median(r[m] for r in good) for m in METRICS}
            medians[client]["bad_files"] = sum(r["bad_files"] + r["client_errors"] for r in good)
            medians[client]["runs"] = len(good)
    ratios = {}
    for client, row in medians.items():
        base = medians.get(yardsticks.get(client, ""))
        if base is not None:
            ratios[client] = {
                "wall": row["wall_s"] / base["wall_s"],
                "cpu": row["cpu_ms_per_object"] / base["cpu_ms_per_object"],
            }
    return {"median": medians, "ratios": ratios}


def notes(
    summary: dict[str, Any], runs: list[dict[str, Any]], args: argparse.Namespace
) -> list[str]:
    """What a reader must know to trust the table."""
    found = []
    no_head = summary["median"].get("s3transfer-no-head")
    if no_head is not None:
        version = metadata.version("s3transfer")
        if no_head["head_per_object"] > 0:
            found.append(
                f"s3transfer {version} still sends HEAD with response_checksum_validation="
                f"'when_required' ({no_head['head_per_object']:.2f}/object at the proxy): "
                "this version does not have the no-HEAD path."
            )
        else:
            found.append(
                f"s3transfer {version} sent no HEAD with response_checksum_validation="
                "'when_required' (counted at the proxy): it has the no-HEAD path."
            )
    commands = [name for name in summary["median"] if name.split("@")[0] in COMMANDS]
    if commands:
        found.append(
            f"{', '.join(commands)}: whole commands, metered from start to exit (imports, "
            "listing, start-up included) by the child's rusage; RSS is its ru_maxrss."
        )
    if args.loop != "asyncio":
        loopless = [name for name in NO_LOOP if name in summary["median"]]
        if loopless:
            found.append(
                f"{', '.join(loopless)}: no event loop of the benchmark's choosing (threads, "
                "Go, the CRT's C threads, or a command's own asyncio.run): one row each, "
                "whatever --loop."
            )
        if any(name.startswith("obstore") for name in summary["median"]):
            found.append(
                "obstore: its requests run on its own Rust (tokio) runtime; the loop carries "
                "the wake-ups of its futures and stream, and its plain file writes."
            )
    if "s3rver" in args.server_name:
        found.append(
            "s3rver stores no checksums (none on HEAD or GET, whatever ChecksumMode): "
            "asyncdl has nothing to verify here, so its verification costs nothing."
        )
    found += [f"{r['client']} worker FAILED:\n{r['failed']}" for r in runs if "failed" in r]
    for run in runs:
        if run.get("bad_files") or run.get("client_errors"):
            detail = run["first_problems"] + run["first_errors"]
            found.append(f"{run['client']}: {run['bad_files']} bad files, {detail}")
    return found


def print_report(summary: dict[str, Any], args: argparse.Namespace, found: list[str]) -> None:
    large = args.size >= MiB
    width = max([26, *map(len, summary["median"])])
    header = (
        f"{'client':<{width}} {'wall s':>8} {'obj/s':>8} {'CPU ms/obj':>10} {'GET/obj':>7} "
        f"{'HEAD/obj':>8} {'verified':>8} {'RSS MiB':>7} {'in flight':>9} {'srv CPU ms/obj':>14}"
        + (f" {'MiB/s':>7} {'CPU s/GiB':>9}" if large else "")
        + (f" {'part GET/obj':>12}" if args.multipart else "")
    )
    # What latency alone allows: one request per object, `concurrency` at a time.
    floor = -(-args.objects // args.concurrency) * args.rtt_ms / 1000
    cap = f", each connection capped at {args.conn_mbps:g} MiB/s" if args.conn_mbps else ""
    cap += ", straight to the server (no proxy)" if args.direct else ""
    print(
        f"\nmedian of {args.runs} run(s); {args.objects} x {args.size} B objects, "
        f"concurrency {args.concurrency}, {args.rtt_ms:g} ms added per request{cap} "
        f"(latency floor at 1 request/object: {floor:.2f} s); server: {args.server_name}"
    )
    print(header)
    print("-" * len(header))
    for client, row in summary["median"].items():
        rate = row["objects_per_s"]
        verified = row["verified_per_object"]
        said = "?" if math.isnan(verified) else f"{verified:.2f}"  # NaN: not said
        line = (
            f"{client:<{width}} {row['wall_s']:>8.2f} {rate:>8.{1 if rate >= 10 else 3}f} "
            f"{row['cpu_ms_per_object']:>10.3f} {row['get_per_object']:>7.2f} "
            f"{row['head_per_object']:>8.2f} {said:>8} "
            f"{row['peak_rss_mib']:>7.1f} "
            f"{row['max_in_flight']:>9.0f} {row['server_cpu_ms_per_object']:>14.3f}"
        )
        line += f" {row['mib_per_s']:>7.1f} {row['cpu_s_per_gib']:>9.3f}" if large else ""
        print(line + (f" {row['part_gets_per_object']:>12.2f}" if args.multipart else ""))
    if summary["ratios"]:
        same = ", each loop's rows against it on their loop" if args.loop != "asyncio" else ""
        print(f"\nagainst {args.baseline}{same} (>1: slower / more CPU)")
        for client, ratio in summary["ratios"].items():
            print(f"{client:<{width}} wall x{ratio['wall']:.2f}  CPU x{ratio['cpu']:.2f}")
    for note in found:
        print(f"\nNOTE: {note}")
