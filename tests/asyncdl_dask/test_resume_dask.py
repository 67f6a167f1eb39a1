"""A Dask worker killed mid-download (``resume=True``): the partition runs again on a
worker that continues the partial files the dead one left."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

import asyncdl
import asyncdl.dask as adask
from asyncdl._files import partial_paths
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload
from ..transfer.test_resume import ranged
from .test_dask import dask_client, dotted_under, open_files, recording, seed  # noqa: F401

CONFIG = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01, resume=True)


def test_a_killed_worker_leaves_partials_that_the_rerun_continues(
    dask_client: Client,  # noqa: F811 - the fixture
    recording: TcpProxy,  # noqa: F811 - the fixture
    s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = "dask-resume"
    objects = {f"r/{i:02d}": payload(24 * CHUNK + i, seed=i) for i in range(8)}
    seed(s3, bucket, objects)
    pids = dask_client.run(os.getpid)
    victim = sorted(pids.values())[0]
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    # Slow GETs, so that the kill lands mid-object.
    recording.rule = lambda request: Fault(delay=0.05) if request.method == "GET" else None
    kept: dict[str, list[tuple[int, int]]] = {}
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                adask.download_manifest,
                [(bucket, key) for key in objects],
                "out",
                client=dask_client,
                partition_size=2,
                config=CONFIG,
            )
            deadline = time.monotonic() + 60
            while not (journals := _recorded_partials(victim)):
                assert time.monotonic() < deadline, "the worker never recorded a part"
                assert not running.done(), running.result()
                time.sleep(0.005)
            os.kill(victim, signal.SIGKILL)
            recording.reset_stats()
            # What the dead worker's journals hold: the rerun must not fetch it again.
            for path in journals:
                found, _ = partial_paths.peek(Path(path))
                if found is not None and found.header is not None:
                    key = f"r/{found.header.target}"
                    kept[key] = [(start, end) for start, end, _ in found.ranges]
            summary = running.result(timeout=90)
    finally:
        recording.rule = None
    dask_client.wait_for_workers(2, timeout=30)

    assert (summary.downloaded, summary.failed) == (len(objects), 0), summary.failures
    for key, body in objects.items():
        assert (out / key).read_bytes() == body
    assert dotted_under(out) == {}
    assert any(kept.values()), kept
    for key, recorded in kept.items():
        sent = [r for r in recording.requests if r.path.split("?")[0].endswith(key)]
        # The rerun starts with the HEAD pinned to the partial's ETag (what the dead
        # worker had in flight may still reach the proxy before it).
        heads = [n for n, r in enumerate(sent) if r.method == "HEAD" and "if-match" in r.headers]
        assert heads, key
        # It asks again for none of the bytes the journal kept. (How much it asks for
        # in all is no measure: a range it retries, or one the dead worker had in
        # flight that reaches the proxy late, counts twice.)
        asked = [_span(r.range) for r in sent[heads[0] :] if r.method == "GET" and r.range]
        again = [(a, b) for a, b in asked for start, end in recorded if a < end and start < b]
        assert not again, (key, recorded, asked)
        assert ranged(sent[heads[0] :]) >= len(objects[key]) - sum(b - a for a, b in recorded)


def _span(header: str) -> tuple[int, int]:
    """The bytes ``bytes=FIRST-LAST`` asks for, as ``[start, end)``."""
    first, last = header.removeprefix("bytes=").split("-")
    return int(first), int(last) + 1


def _recorded_partials(pid: int) -> list[str]:
    """The journals ``pid`` holds open that record at least one range."""
    held = []
    for name in open_files(pid):
        if name.endswith(partial_paths.JOURNAL_SUFFIX):
            found, _ = partial_paths.peek(Path(name))
            if found is not None and found.ranges:
                held.append(name)
    return held
