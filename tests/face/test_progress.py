"""progress=: byte deltas with the total from discovery, rewound when bytes are discarded.

A callable that can take two positional arguments gets ``(delta, total)``; one that
takes one (boto3's ``Callback``, tqdm's ``update``) gets the delta alone.
"""

from __future__ import annotations

import asyncio
import functools
import io
import operator
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress

import asyncdl
from asyncdl.cli.app import make_settings
from asyncdl.cli.output import Output
from asyncdl.cli.work import copy_prefix
from asyncdl.progress import Reporter
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, make_client, payload


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, delta: int, total: int) -> None:
        self.calls.append((delta, total))

    @property
    def net(self) -> int:
        return sum(delta for delta, _ in self.calls)


async def test_download_progress(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    data = payload(5 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    seen = Recorder()
    await engine.download(bucket, "k", tmp_path / "k", progress=seen)
    assert seen.net == len(data)
    assert len(seen.calls) > 1
    assert {total for _, total in seen.calls} == {len(data)}
    assert all(delta > 0 for delta, _ in seen.calls)


async def test_async_progress_and_many(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    sizes = {f"k{i}": 100 * (i + 1) for i in range(5)}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size))
    deltas: list[int] = []

    async def record(delta: int, total: int) -> None:
        deltas.append(delta)

    items = [(bucket, key, tmp_path / key) for key in sizes]
    results = [r async for r in engine.download_many(items, progress=record)]
    assert all(r.ok for r in results)
    assert sum(deltas) == sum(sizes.values())
    deltas.clear()
    listed = tmp_path / "listed"
    listed.mkdir()
    results = [r async for r in engine.download_prefix(bucket, "", listed, progress=record)]
    assert all(r.ok for r in results)
    assert sum(deltas) == sum(sizes.values())


async def test_progress_is_rewound_when_bytes_are_discarded(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    corrupted: list[RequestRecord] = []

    def corrupt_first(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and not corrupted:
            corrupted.append(request)
            return Fault(corrupt_at=10)
        return None

    proxy.rule = corrupt_first
    seen = Recorder()
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(
            bucket, "k", tmp_path / "k", strategy="head-first", progress=seen
        )
        assert result.verified
        assert min(delta for delta, _ in seen.calls) == -len(data)  # the fresh attempt
        assert seen.net == len(data)
        failed = Recorder()
        proxy.rule = lambda r: (
            Fault(status=403, error_code="AccessDenied", delay=0.5)
            if r.range == f"bytes={2 * CHUNK}-{3 * CHUNK - 1}"
            else None
        )
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(
                bucket, "k", tmp_path / "j", strategy="head-first", progress=failed
            )
        assert max(delta for delta, _ in failed.calls) > 0  # parts were written...
        assert failed.net == 0  # nothing of a failed download was kept


async def test_stream_progress(engine: asyncdl.Engine, s3: Any, bucket: str) -> None:
    data = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    seen = Recorder()
    got = b"".join([p async for p in engine.stream(bucket, "k", start=1, progress=seen)])
    assert got == data[1:]
    assert seen.net == len(data) - 1
    assert {total for _, total in seen.calls} == {len(data) - 1}


# -- one-argument callables, as boto3 and tqdm users write them ------------------------


class TqdmLike:
    """tqdm's shape: ``bar.update(n=1)`` adds ``n``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def update(self, n: float | None = 1) -> bool | None:
        self.calls.append((n,))
        return None


class AsyncBar:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def update(self, n: int) -> None:
        self.calls.append((n,))


class ProgressPercentage:
    """boto3's documented ``Callback`` class: ``__call__(self, bytes_amount)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, bytes_amount: int) -> None:
        self.calls.append((bytes_amount,))


def callback_kinds() -> dict[str, Callable[[], tuple[Any, list[tuple[Any, ...]]]]]:
    """name -> a factory of (the callable, the list of argument tuples it received)."""

    def function() -> tuple[Any, list[tuple[Any, ...]]]:
        calls: list[tuple[Any, ...]] = []

        def callback(bytes_transferred: int) -> None:  # boto3's Callback
            calls.append((bytes_transferred,))

        return callback, calls

    def async_function() -> tuple[Any, list[tuple[Any, ...]]]:
        calls: list[tuple[Any, ...]] = []

        async def callback(delta: int) -> None:
            calls.append((delta,))

        return callback, calls

    def star_args() -> tuple[Any, list[tuple[Any, ...]]]:
        calls: list[tuple[Any, ...]] = []
        return (lambda *args: calls.append(args)), calls

    def partial_two() -> tuple[Any, list[tuple[Any, ...]]]:
        calls: list[tuple[Any, ...]] = []

        def labelled(label: str, delta: int, total: int) -> None:
            calls.append((delta, total))

        return functools.partial(labelled, "object"), calls

    def rich_advance() -> tuple[Any, list[tuple[Any, ...]]]:
        # rich's Progress.advance(task_id, advance=1), with the task bound: one argument.
        progress = Progress(disable=True)
        task = progress.add_task("download", total=None)
        calls: list[tuple[Any, ...]] = []
        original = progress.advance

        def advance(task_id: Any, advance: float = 1) -> None:
            calls.append((advance,))
            original(task_id, advance)

        progress.advance = advance  # type: ignore[method-assign]
        return functools.partial(progress.advance, task), calls

    def bound(cls: Any) -> Callable[[], tuple[Any, list[tuple[Any, ...]]]]:
        def make() -> tuple[Any, list[tuple[Any, ...]]]:
            bar = cls()
            return (bar.update if hasattr(bar, "update") else bar), bar.calls

        return make

    return {
        "tqdm update (bound, n=1)": bound(TqdmLike),
        "async bound method": bound(AsyncBar),
        "boto3 Callback class": bound(ProgressPercentage),
        "boto3 Callback function": function,
        "async function": async_function,
        "partial of rich's advance": rich_advance,
        "partial leaving two": partial_two,
        "*args": star_args,
    }


KINDS = callback_kinds()
TWO_ARGUMENTS = {"partial leaving two", "*args"}


def check_calls(kind: str, calls: list[tuple[Any, ...]], total: int) -> None:
    assert calls
    assert {len(args) for args in calls} == {2 if kind in TWO_ARGUMENTS else 1}
    assert sum(args[0] for args in calls) == total
    if kind in TWO_ARGUMENTS:
        assert all(args[1] > 0 for args in calls)


@pytest.mark.parametrize("kind", KINDS)
async def test_progress_forms_on_every_api(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path, kind: str
) -> None:
    data = payload(3 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    s3.put_object(Bucket=bucket, Key="small", Body=b"tiny")

    callback, calls = KINDS[kind]()
    await engine.download(bucket, "big", tmp_path / "big", progress=callback)
    check_calls(kind, calls, len(data))

    callback, calls = KINDS[kind]()
    items = [(bucket, "big", tmp_path / "many-big"), (bucket, "small", tmp_path / "many-small")]
    results = [r async for r in engine.download_many(items, progress=callback)]
    assert all(r.ok for r in results)
    check_calls(kind, calls, len(data) + 4)

    callback, calls = KINDS[kind]()
    got = b"".join([p async for p in engine.stream(bucket, "big", start=7, progress=callback)])
    assert got == data[7:]
    check_calls(kind, calls, len(data) - 7)


async def test_one_call_download_takes_progress(
    client: Any, config: asyncdl.TransferConfig, s3: Any, bucket: str, tmp_path: Path
) -> None:
    data = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    bar = TqdmLike()
    result = await asyncdl.download(
        bucket, "k", tmp_path / "k", client=client, config=config, progress=bar.update
    )
    assert result.size == len(data)
    check_calls("tqdm update", bar.calls, len(data))
    two = Recorder()
    await asyncdl.download(bucket, "k", tmp_path / "j", client=client, config=config, progress=two)
    assert two.net == len(data)
    assert {total for _, total in two.calls} == {len(data)}


async def test_a_callable_without_a_signature_gets_the_delta() -> None:
    # Some builtins have no signature to read; they are called as boto3 calls its
    # Callback. methodcaller("bit_length") takes exactly one argument.
    reporter = Reporter(operator.methodcaller("bit_length"))
    reporter.total = 10
    await reporter.add(10)
    assert reporter.sent == 10


def no_arguments() -> None: ...


def three_arguments(a: int, b: int, c: int) -> None: ...


def keyword_only(delta: int, *, total: int) -> None: ...


@pytest.mark.parametrize(
    "callback",
    [no_arguments, three_arguments, keyword_only, "not callable", 42],
    ids=["no arguments", "three arguments", "keyword-only total", "a string", "a number"],
)
async def test_a_callback_that_fits_neither_form_is_refused_before_anything_is_sent(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, callback: Any
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    with pytest.raises(ValueError, match="progress must") as refused:
        await engine.download(bucket, "k", tmp_path / "k", progress=callback)
    assert repr(callback) in str(refused.value)
    with pytest.raises(ValueError, match="progress must"):
        engine.stream(bucket, "k", progress=callback)
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []


# -- the command line's bar -------------------------------------------------------------


@pytest.mark.parametrize("objects", [None, 1])
def test_the_bar_ends_with_the_object_total_and_the_average_speed(
    objects: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bar draws on stderr; a file there (not a terminal) gets its last state only:
    # the finished line a terminal keeps.
    drawn = io.StringIO()
    monkeypatch.setattr(sys, "stderr", drawn)
    count = objects or 3
    output = Output(objects=objects, bar=True)
    with output:
        for _ in range(count):
            for _ in range(4):
                output.progress(256 * 1024, 1024 * 1024)
                time.sleep(0.01)
            output.count(None)
        if objects is None:
            output.all_listed()  # as cp -r and sync do when their listing has ended
    (line,) = drawn.getvalue().splitlines()
    assert line.startswith(f"{count}/{count} objects "), line
    assert f"{count}.0/{count}.0 MiB" in line, line
    speed = re.search(r" ([\d.]+) (k|M|G)?B/s ", line)
    assert speed is not None, line
    # The average over the run, not the rate of its last moments.
    elapsed = 0.01 * 4 * count
    assert float(speed[1]) * {"k": 1e3, "M": 1e6, "G": 1e9}[speed[2] or "k"] <= (
        count * 2**20 / elapsed
    )


def test_cp_r_bar_learns_the_object_total_when_the_listing_ends(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"p/{i}", Body=payload(1000 + i, seed=i))
    s3.put_object(Bucket=bucket, Key="p/big", Body=payload(3 * CHUNK))
    drawn = io.StringIO()
    monkeypatch.setattr(sys, "stderr", drawn)
    settings = make_settings(
        concurrency=2,
        chunk_size=CHUNK,
        max_bandwidth=None,
        validate="when_available",
        endpoint_url=proxy.url,
        quiet=False,
        debug=False,
    )
    output = Output(objects=None, bar=True, quiet=True)
    with output:
        complete = asyncio.run(
            copy_prefix(settings, bucket, "p/", tmp_path, strategy="auto", output=output)
        )
    assert complete
    (line,) = drawn.getvalue().splitlines()
    size = (sum(1000 + i for i in range(5)) + 3 * CHUNK) / 2**10
    assert line.startswith("6/6 objects "), line
    assert f"{size:.1f}/{size:.1f} KiB" in line, line
    assert re.search(r" [\d.]+ (k|M|G)?B/s ", line), line


def test_cp_r_bar_shows_the_totals_once_the_listing_ends_not_once_all_is_done(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The big object's answer is held back: the listing has long ended while it is
    # still on its way, and the bar knows by then how many objects and bytes there are.
    sizes = {f"p/{i}": 1000 + i for i in range(5)} | {"p/big": 3 * CHUNK}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size))
    proxy.rule = lambda r: Fault(delay=1.0) if r.path.endswith("/p/big") else None
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    settings = make_settings(
        concurrency=2,
        chunk_size=4 * CHUNK,
        max_bandwidth=None,
        validate="when_available",
        endpoint_url=proxy.url,
        quiet=False,
        debug=False,
    )
    output = Output(objects=None, bar=True, quiet=True)
    seen: list[tuple[int, str, float | None]] = []

    async def run() -> bool:
        async def watch() -> None:
            while True:
                task = output._bar._progress.tasks[0] if output._bar is not None else None
                shown = output._objects_text()
                seen.append((output.done, shown, task.total if task else None))
                await asyncio.sleep(0.02)

        watching = asyncio.create_task(watch())
        try:
            return await copy_prefix(
                settings, bucket, "p/", tmp_path, strategy="auto", output=output
            )
        finally:
            watching.cancel()

    with output:
        assert asyncio.run(run())
    # Seen while the big object was still on its way: all six objects and their bytes.
    assert (5, "5/6 objects", sum(sizes.values())) in seen, seen[-5:]
