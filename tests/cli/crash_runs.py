"""The harness of the crash-consistency tests: ``asyncdl cp -r`` or ``asyncdl sync`` as
a process of its own, killed with SIGKILL at a moment drawn from a seeded
``random.Random``, and what the tree under its destination must hold after each kill.

What a kill may leave: files not downloaded yet, partial files and their journals,
and (rarely, a kill between create and rename) a temp file. What it may never leave:
a target with bytes that are not its object's, a ``download:`` line (or ``--json``
line with ``ok``) for a file that is not on disk with its object's bytes, or a sync
record that vouches for bytes that are not those of the ETag it names.

``zero_journaled`` is the power-loss case: with ``fsync=False`` the journal can reach
the disk while the bytes it records do not, and the preallocated extents read back
as zeros; the next run must not trust them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncdl._files import journal
from asyncdl._files.file_records import SIDECAR_DIR, EtagStore
from asyncdl._files.partial_paths import JOURNAL_SUFFIX, PARTIAL_SUFFIX
from asyncdl._files.writer import is_temp_file
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import TcpProxy

from ..spawn import spawned

#: A page: what a power loss loses of a file's data at a time.
PAGE = 4096
_DOWNLOAD = re.compile(
    r"^download: s3://(?P<bucket>[^/]+)/(?P<key>\S+) to (?P<path>.+?)(?: \(resumed: .*\))?$"
)


def md5(data: bytes) -> str:
    """The ETag S3 gives an object put in one request."""
    return hashlib.md5(data).hexdigest()


def is_ours(name: str) -> bool:
    """A temp file, a partial file or a journal: never a target."""
    return is_temp_file(name) or (
        name.startswith(".") and name.endswith((PARTIAL_SUFFIX, JOURNAL_SUFFIX))
    )


def leftovers(root: Path) -> list[str]:
    """asyncdl's own files under ``root`` (relative paths)."""
    return sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and is_ours(path.name)
    )


def targets(root: Path) -> Iterator[Path]:
    """The files under ``root`` that are not asyncdl's own (nor the sync sidecar)."""
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != SIDECAR_DIR]
        for name in files:
            if not is_ours(name):
                yield Path(directory, name)


@dataclass
class Bucket:
    """The objects under a prefix, and every version each key ever held (by ETag)."""

    s3: Any
    name: str
    prefix: str
    current: dict[str, bytes] = field(default_factory=dict)
    versions: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=self.name, Key=key, Body=body, ChecksumAlgorithm="CRC32")
        self.current[key] = body
        self.versions.setdefault(key, {})[md5(body)] = body

    def relative(self, key: str) -> str:
        return key.removeprefix(self.prefix)


@dataclass
class Run:
    """One run of the command: how it ended and what it said."""

    number: int
    killed: bool
    returncode: int
    stdout: str
    stderr: str
    #: Seconds from its first request to the kill (``None``: not killed).
    delay: float | None
    #: Seconds from its first request to its end.
    elapsed: float
    #: Seconds from its start to its first request.
    startup: float
    #: ``(key, path, line)`` of each object it reported done.
    reported: list[tuple[str, Path, str]]


def reported_lines(stdout: str, *, json_lines: bool) -> list[tuple[str, Path, str]]:
    """The objects a run reported done. Only whole lines count: a kill may cut one."""
    done = []
    for whole in stdout.splitlines(keepends=True):
        if not whole.endswith("\n"):
            continue
        line = whole.rstrip("\n")
        if json_lines:
            value = json.loads(line)
            if value.get("ok") and not value.get("skipped") and "key" in value:
                done.append((value["key"], Path(value["path"]), line))
        elif (match := _DOWNLOAD.match(line)) is not None:
            done.append((match["key"], Path(match["path"]), line))
    return done


def command(proxy: TcpProxy, *args: str) -> list[str]:
    return [sys.executable, "-m", "asyncdl.cli", *args, "--endpoint-url", proxy.url]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    return {**env, **FAKE_ENV}


def run_once(
    proxy: TcpProxy,
    argv: list[str],
    number: int,
    *,
    kill_after: float | None,
    json_lines: bool,
) -> Run:
    """Start the command; ``kill_after`` seconds after the proxy saw its first request,
    SIGKILL it (unless it ended by then). ``None``: let it finish."""
    proxy.reset_stats()
    # Files, not pipes: a run that prints more than a pipe holds would block on it, and
    # a kill would land on a process that waits for its reader.
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        spawned(argv, env=child_env(), stdout=out, stderr=err) as child,
    ):
        # SIGKILL cannot be ignored or caught, whatever started pytest: ``spawned`` is
        # used for its reaping (a failed assertion still kills and collects the child).
        started = time.monotonic()
        deadline = started + 60
        while not proxy.requests and child.poll() is None:
            assert time.monotonic() < deadline, "the command sent no request in 60 s"
            time.sleep(0.002)
        began = time.monotonic()
        startup = began - started
        try:
            child.wait(timeout=90 if kill_after is None else kill_after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        elapsed = time.monotonic() - began
        # Not sent to a child that ended just before: then the run is a whole one.
        killed = child.returncode == -signal.SIGKILL
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return Run(
        number=number,
        killed=killed,
        returncode=child.returncode,
        stdout=text,
        stderr=errors,
        delay=kill_after if killed else None,
        elapsed=elapsed,
        startup=startup,
        reported=reported_lines(text, json_lines=json_lines),
    )


def problems_after(run: Run, bucket: Bucket, root: Path, *, records: bool) -> list[str]:
    """What is wrong in ``root`` after ``run`` (killed or not), as sentences."""
    found: list[str] = []
    for key, path, line in run.reported:
        want = bucket.current.get(key)
        if want is None:
            found.append(f"reported a key that was never put: {line}")
            continue
        if path != root / bucket.relative(key):
            found.append(f"reported {key} written to {path}, not to its target: {line}")
        try:
            have = path.read_bytes()
        except FileNotFoundError:
            found.append(f"reported done, not on disk: {line}")
            continue
        if have != want:
            found.append(f"reported done, wrong bytes on disk ({difference(have, want)}): {line}")
    store = EtagStore(root) if records else None
    try:
        for path in sorted(targets(root)):
            relative = path.relative_to(root).as_posix()
            key = bucket.prefix + relative
            have = path.read_bytes()
            if key not in bucket.versions:
                found.append(f"{relative}: a file that is the target of no key")
            elif md5(have) not in bucket.versions[key]:
                # Published targets are replaced atomically: never half-written.
                want = bucket.current[key]
                found.append(f"{relative}: bytes of no version of {key} ({difference(have, want)})")
            if store is not None:
                etag = store.recorded(path, os.stat(path))
                if etag is not None and etag != md5(have):
                    found.append(
                        f"{relative}: the sync record vouches for ETag {etag}, the file holds "
                        f"{md5(have)} ({difference(have, bucket.versions[key].get(etag, b''))})"
                    )
    finally:
        if store is not None:
            store.close()
    return found


def difference(have: bytes, want: bytes) -> str:
    """Where two byte strings differ, page by page, briefly (for a failure message)."""
    if len(have) != len(want):
        return f"{len(have)} bytes, the object has {len(want)}"
    runs: list[list[int]] = []
    for offset in range(0, len(have), PAGE):
        if have[offset : offset + PAGE] != want[offset : offset + PAGE]:
            end = min(offset + PAGE, len(have))
            if runs and runs[-1][1] == offset:
                runs[-1][1] = end
            else:
                runs.append([offset, end])
    shown = [
        f"[{first}, {last})" + ("" if have[first:last].strip(bytes(1)) else " all zeros")
        for first, last in runs[:6]
    ]
    more = f" and {len(runs) - 6} more" if len(runs) > 6 else ""
    return f"pages {', '.join(shown)}{more} differ"


def zero_journaled(root: Path, rng: random.Random) -> list[str]:
    """In every partial file under ``root``, zero a random page-aligned piece (at most
    64 KiB) of a random range its journal records: what a power loss leaves of bytes
    that were written with ``fsync=False`` while their journal line reached the disk.
    Returns what was zeroed, for the failure message."""
    zeroed = []
    for partial in sorted(root.rglob(f"*{PARTIAL_SUFFIX}")):
        name = partial.name.removesuffix(PARTIAL_SUFFIX)
        journal_path = partial.with_name(f"{name}{JOURNAL_SUFFIX}")
        try:
            found = journal.parse(journal_path.read_bytes())
        except FileNotFoundError:
            continue
        if found.damaged is not None or not found.ranges:
            continue
        start, end, _ = rng.choice(found.ranges)
        first = max(start, (rng.randrange(start, end) // PAGE) * PAGE)
        last = min(end, first + PAGE * rng.randint(1, 16))
        fd = os.open(partial, os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(last - first), first)
        finally:
            os.close(fd)
        zeroed.append(
            f"{partial.relative_to(root)}: [{first}, {last}) of recorded [{start}, {end})"
        )
    return zeroed


@dataclass
class Campaign:
    """Kills, reruns and checks; one failure message that says how to replay it."""

    seed: int
    kills: int
    history: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.history.append(text)

    def fail(self, problems: list[str]) -> str:
        replay = f"ASYNCDL_CRASH_SEED={self.seed}"
        # The last runs, and any earlier one that left a temp file behind.
        earlier = [line for line in self.history[:-12] if "; left " in line]
        tail = "\n".join([*earlier, *self.history[-12:]])
        return (
            f"seed {self.seed} (replay: {replay}), {self.kills} kills:\n  "
            + "\n  ".join(problems)
            + f"\nlast runs:\n{tail}"
        )


def describe(run: Run, extra: str = "") -> str:
    how = f"killed {run.delay:.3f} s after its first request" if run.killed else "finished"
    return (
        f"run {run.number}: first request {run.startup:.2f} s after its start, {how}, "
        f"status {run.returncode}, {len(run.reported)} reported{extra}"
    )
