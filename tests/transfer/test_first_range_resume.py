"""A cut answer resumes from the byte where it was cut, the first answer too.

GET-first's first answer waits, headers read and body unread, while the download
sets up its fan-out (the checksum HEAD, the temp file). aiohttp drops the bytes it
holds when it sees the connection end, so a cut that landed in that wait, or while a
part was writing what it had gathered, sent the retry back to the range's start (or
to its last write): bytes fetched twice. The proxy cuts without a stall here, so the
cut reaches the client at once, whatever the engine is doing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.config import KiB, MiB
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import payload


def _cut_first_answers(cut: int, *, every_range: bool) -> Any:
    """A rule that cuts, after ``cut`` body bytes, the first answer of the object (or
    of each range, ``every_range``) and leaves the retries alone."""
    seen: set[int] = set()

    def rule(request: RequestRecord) -> Fault | None:
        if request.method != "GET" or request.range is None:
            return None
        end = _last_byte(request.range)
        if end in seen or (seen and not every_range):
            return None
        seen.add(end)
        return Fault(cut_after=cut)

    return rule


def _last_byte(range_header: str) -> int:
    # A retry asks for the same last byte as the answer it resumes.
    return int(range_header.rsplit("-", 1)[1])


def _ranges(size: int, chunk: int) -> list[tuple[int, int]]:
    return [(start, min(start + chunk, size)) for start in range(0, size, chunk)]


def _asked_again(proxy: TcpProxy) -> list[tuple[str, str]]:
    """(first answer's Range, its retry's Range) for every range that was asked twice."""
    first: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    for request in proxy.requests:
        if request.method != "GET" or request.range is None:
            continue
        end = _last_byte(request.range)
        if end in first:
            pairs.append((first[end], request.range))
        else:
            first[end] = request.range
    return pairs


@pytest.mark.parametrize(
    ("chunk", "concurrency"),
    [(64 * KiB, 10), (64 * KiB, 64), (1 * MiB, 10), (1 * MiB, 64), (4 * MiB, 64)],
)
async def test_a_cut_first_answer_resumes_from_the_cut(
    client: Any,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    chunk: int,
    concurrency: int,
) -> None:
    size = 2 * chunk + 7
    data = payload(size)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(
        chunk_size=chunk, max_concurrency=concurrency, backoff_base=0.001
    )
    cuts = sorted(c for c in {1_000, 10_000, 60_000, 300_000, 3 * MiB, chunk - 1} if c < chunk)
    async with asyncdl.Engine(client, config=config) as engine:
        for every_range in (False, True):
            for cut in cuts:
                proxy.reset_stats()
                proxy.rule = _cut_first_answers(cut, every_range=every_range)
                target = tmp_path / f"k-{cut}-{every_range}"
                await engine.download(bucket, "k", target, strategy="get-first")
                assert target.read_bytes() == data
                resumed = _asked_again(proxy)
                expected = [
                    (f"bytes={start}-{end - 1}", f"bytes={start + cut}-{end - 1}")
                    for start, end in _ranges(size, chunk)
                    if (every_range or start == 0) and start + cut < end
                ]
                assert sorted(resumed) == sorted(expected), (cut, every_range)
                # Each byte crossed the proxy once: nothing was fetched again.
                assert proxy.response_bytes == size, (cut, every_range)
