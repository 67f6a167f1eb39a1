"""asyncdl.dask on a real two-process LocalCluster, against moto through the recording proxy.

The workers are other processes: they reach moto through a proxy started before the
cluster (``AWS_ENDPOINT_URL_S3`` in their environment), which counts every request.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from distributed import Client, LocalCluster
from moto.s3.models import s3_backends

import asyncdl
import asyncdl.dask as adask
from asyncdl.dask import _skip
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, TcpProxy
from asyncdl.writer import is_temp_file

from .conftest import CHUNK, payload

KEYS = 5000
CONFIG = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=16, backoff_base=0.01)


def temp_files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if is_temp_file(p.name)]


def seed(s3: Any, bucket: str, objects: dict[str, bytes]) -> None:
    """Put the objects straight into moto's in-process backend: the downloads under
    test still go over HTTP, but 5,000 PUTs through moto's server would take ~30 s."""
    s3.create_bucket(Bucket=bucket)
    backend = s3_backends["123456789012"]["global"]  # moto's default account
    for key, body in objects.items():
        backend.put_object(bucket, key, body)
    # One object read back over HTTP: the shortcut stores what the server serves.
    first = next(iter(objects))
    assert s3.get_object(Bucket=bucket, Key=first)["Body"].read() == objects[first]


def gets(proxy: TcpProxy) -> int:
    return sum(r.method == "GET" and "list-type=2" not in r.path for r in proxy.requests)


@pytest.fixture(scope="module")
def recording(s3_endpoint: str) -> Iterator[TcpProxy]:
    with TcpProxy.for_url(s3_endpoint) as running:
        yield running


@pytest.fixture(scope="module")
def dask_client(recording: TcpProxy) -> Iterator[Client]:
    # Worker processes take the endpoint and credentials from their environment,
    # as they would on a real cluster.
    env = {**FAKE_ENV, "AWS_ENDPOINT_URL_S3": recording.url}
    with (
        LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            # A free port: 8787 may be taken by another cluster on the machine.
            dashboard_address=":0",
            env=env,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def big_bucket(s3: Any) -> tuple[str, dict[str, bytes]]:
    objects = {f"p{i % 10}/d{i % 7}/obj-{i:05d}": payload(i % 300, seed=i) for i in range(KEYS)}
    seed(s3, "dask-big", objects)
    return "dask-big", objects


@pytest.fixture(scope="module")
def first_run(
    dask_client: Client,
    recording: TcpProxy,
    big_bucket: tuple[str, dict[str, bytes]],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[adask.ManifestSummary, Path, int]:
    bucket, objects = big_bucket
    dest = tmp_path_factory.mktemp("big")
    keys = list(objects)
    # Both item forms, plus one key that does not exist and one that would escape.
    manifest: list[Any] = [(bucket, key) for key in keys[::2]]
    manifest += [asyncdl.DownloadRequest(bucket, key, key) for key in keys[1::2]]
    manifest += [(bucket, "p0/missing"), (bucket, "../escape")]
    recording.reset_stats()
    summary = adask.download_manifest(
        manifest, dest, client=dask_client, partition_size=500, config=CONFIG
    )
    return summary, dest, gets(recording)


def test_5000_objects_across_two_workers(
    first_run: tuple[adask.ManifestSummary, Path, int],
    big_bucket: tuple[str, dict[str, bytes]],
    dask_client: Client,
) -> None:
    summary, dest, get_count = first_run
    _, objects = big_bucket
    for key, body in objects.items():
        assert (dest / key).read_bytes() == body, key
    assert not (dest.parent / "escape").exists()
    assert temp_files_under(dest) == []

    assert (summary.objects, summary.downloaded, summary.skipped) == (KEYS + 2, KEYS, 0)
    assert summary.bytes == sum(len(body) for body in objects.values())
    failures = {f.key: f for f in summary.failures}
    assert set(failures) == {"p0/missing", "../escape"}
    assert failures["p0/missing"].error_type == "ObjectNotFoundError"
    assert failures["../escape"].error_type == "InvalidRequestError"
    assert "escape" in failures["../escape"].error
    # One GET per object (plus the missing one): no partition ran twice.
    assert get_count == KEYS + 1
    assert summary.requests == KEYS + 1
    # Both workers took partitions; their counts add up to the run's.
    assert set(summary.workers) == set(dask_client.scheduler_info()["workers"])
    assert sum(w.downloaded for w in summary.workers.values()) == KEYS
    assert sum(w.bytes for w in summary.workers.values()) == summary.bytes
    assert all(w.seconds > 0 for w in summary.workers.values())


def test_rerun_with_skip_existing_etag_makes_no_request(
    first_run: tuple[adask.ManifestSummary, Path, int],
    big_bucket: tuple[str, dict[str, bytes]],
    dask_client: Client,
    recording: TcpProxy,
    s3: Any,
) -> None:
    _, dest, _ = first_run
    bucket, objects = big_bucket
    manifest = adask.list_manifest(bucket, delimiter="/", client=dask_client)
    assert manifest.npartitions == 10  # p0/ .. p9/ (nothing at the top), one task each
    listed = manifest.compute()
    assert sorted(listed["key"]) == sorted(objects)

    recording.reset_stats()
    summary = adask.download_manifest(manifest, dest, client=dask_client, skip_existing="etag")
    assert (summary.skipped, summary.downloaded, summary.failed) == (KEYS, 0, 0)
    assert recording.requests == []

    # An object replaced by one of the same size: "size" cannot tell, "etag" can.
    changed = "p3/d3/obj-00003"
    fresh = payload(len(objects[changed]), seed=99)
    s3.put_object(Bucket=bucket, Key=changed, Body=fresh)
    # A file rewritten in place (same size): its record no longer vouches for it.
    edited = dest / "p4/d4/obj-00004"
    edited.write_bytes(bytes(len(objects["p4/d4/obj-00004"])))
    manifest = adask.list_manifest(bucket, delimiter="/", client=dask_client)

    recording.reset_stats()
    summary = adask.download_manifest(manifest, dest, client=dask_client, skip_existing="size")
    assert (summary.skipped, summary.downloaded) == (KEYS, 0)
    assert recording.requests == []
    assert (dest / changed).read_bytes() == objects[changed]

    recording.reset_stats()
    summary = adask.download_manifest(manifest, dest, client=dask_client, skip_existing="etag")
    assert (summary.skipped, summary.downloaded, summary.failed) == (KEYS - 2, 2, 0)
    assert sorted(r.path.split("?")[0] for r in recording.requests) == [
        f"/{bucket}/{changed}",
        f"/{bucket}/p4/d4/obj-00004",
    ]
    assert (dest / changed).read_bytes() == fresh
    assert edited.read_bytes() == objects["p4/d4/obj-00004"]


def test_csv_and_parquet_manifests(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-csv"
    # "NA" and "null" are keys, not missing values; "007" stays text.
    names = [*(f"inv/{i:04d}.bin" for i in range(300)), "NA", "null", "007"]
    objects = {key: payload(10 + i, seed=i) for i, key in enumerate(names)}
    seed(s3, bucket, objects)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert len(listed) == len(objects)
    # S3 Inventory's column names (case ignored), unquoted ETags, an extra column.
    inventory = pd.DataFrame(
        {
            "Bucket": bucket,
            "Key": [entry["Key"] for entry in listed],
            "Size": [entry["Size"] for entry in listed],
            "ETag": [entry["ETag"].strip('"') for entry in listed],
            "StorageClass": "STANDARD",
        }
    )
    csv = tmp_path / "inventory.csv"
    inventory.to_csv(csv, index=False)
    parquet = tmp_path / "inventory.parquet"
    inventory.to_parquet(parquet)

    for manifest, dest in ((csv, tmp_path / "from-csv"), (parquet, tmp_path / "from-parquet")):
        recording.reset_stats()
        summary = adask.download_manifest(
            manifest, dest, client=dask_client, partition_size=50, config=CONFIG
        )
        assert (summary.downloaded, summary.failed) == (len(objects), 0), summary.failures
        for key, body in objects.items():
            assert (dest / key).read_bytes() == body
        # Listed size and ETag: each object is one plain GET pinned with If-Match.
        assert gets(recording) == len(objects)
        assert all("if-match" in r.headers for r in recording.requests)


def test_etag_records_fall_back_to_a_sidecar_per_process(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-sidecar"
    objects = {f"s/{i:03d}": payload(50 + i, seed=i) for i in range(200)}
    seed(s3, bucket, objects)
    manifest = [
        asyncdl.DownloadRequest(bucket, e["Key"], e["Key"], size=e["Size"], etag=e["ETag"])
        for e in s3.list_objects_v2(Bucket=bucket)["Contents"]
    ]

    def force_sidecar(on: bool) -> None:
        _skip._force_sidecar = on

    dask_client.run(force_sidecar, True)
    try:
        first = adask.download_manifest(manifest, tmp_path, client=dask_client, partition_size=20)
        assert first.downloaded == len(objects)
        recording.reset_stats()
        again = adask.download_manifest(
            manifest, tmp_path, client=dask_client, partition_size=20, skip_existing="etag"
        )
    finally:
        dask_client.run(force_sidecar, False)
    assert (again.skipped, again.downloaded) == (len(objects), 0)
    assert recording.requests == []
    with pytest.raises(OSError, match="No data available") as no_xattr:
        os.getxattr(tmp_path / "s/000", _skip.XATTR)
    assert no_xattr.value.errno == errno.ENODATA
    # One file per writing process (both workers wrote), whole lines only.
    sidecars = sorted((tmp_path / _skip.SIDECAR_DIR).iterdir())
    assert len(sidecars) == len(first.workers) == 2
    lines = [json.loads(line) for f in sidecars for line in f.read_text().splitlines()]
    assert sorted(line["path"] for line in lines) == sorted(objects)


def test_one_engine_per_worker_process(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-engines"
    objects = {f"e/{i:03d}": payload(i, seed=i) for i in range(80)}
    seed(s3, bucket, objects)
    # A config no earlier test used: its engines are opened by this test's runs.
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=7)

    def count_clients() -> None:
        from aiobotocore.session import AioSession  # noqa: PLC0415 - in the worker

        original = AioSession.create_client

        def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
            AioSession.created += 1
            return original(self, *args, **kwargs)

        AioSession.created = 0
        AioSession.original = original
        AioSession.create_client = counting

    def uncount() -> None:
        from aiobotocore.session import AioSession  # noqa: PLC0415

        AioSession.create_client = AioSession.original

    def clients_created() -> int:
        from aiobotocore.session import AioSession  # noqa: PLC0415

        created: int = AioSession.created
        return created

    dask_client.run(count_clients)
    try:
        for dest in (tmp_path / "one", tmp_path / "two"):
            summary = adask.download_manifest(
                [(bucket, key) for key in objects],
                dest,
                client=dask_client,
                partition_size=5,
                config=config,
            )
            assert summary.downloaded == len(objects)
            assert len(summary.workers) == 2
        # 32 partitions over two runs; each worker process made one client in all.
        assert dask_client.run(clients_created) == dict.fromkeys(summary.workers, 1)
    finally:
        dask_client.run(uncount)


def test_readme_scaling_out_snippet_runs_as_written(
    dask_client: Client,
    recording: TcpProxy,
    s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("\n## Scaling out\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    objects = {"archive/top.txt": b"top", "archive/2025/a.json": b"{}", "archive/2026/b": b"b"}
    if "my-bucket" not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket="my-bucket")
    for key, body in objects.items():
        s3.put_object(Bucket="my-bucket", Key=key, Body=body)
    # The snippet's own client goes to this module's cluster, whose workers reach moto.
    monkeypatch.setenv("DASK_SCHEDULER", dask_client.scheduler.address)
    monkeypatch.chdir(tmp_path)
    for run in range(2):
        namespace: dict[str, Any] = {}
        exec(compile(code, "README.md", "exec"), namespace)  # the README's own code
        namespace["client"].close()
        printed = capsys.readouterr().out
        assert printed.startswith(f"{3 * (1 - run)} downloaded, {3 * run} skipped")
    for key, body in objects.items():
        assert (tmp_path / "mirror" / key).read_bytes() == body


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing-file", "does not exist"),
        ("no-key-column", "no 'key' column"),
        ("unknown-format", "cannot tell the format"),
        ("bad-skip", "skip_existing must be"),
        ("dest-is-a-file", "is not a directory"),
        ("bad-partition-size", "partition_size must be"),
        ("bad-strategy", "unknown strategy"),
        ("bad-item", "expected a DownloadRequest"),
        ("not-a-manifest", "manifest must be"),
    ],
)
def test_bad_input_raises_before_anything_runs(
    case: str, message: str, dask_client: Client, recording: TcpProxy, tmp_path: Path
) -> None:
    good_csv = tmp_path / "good.csv"
    good_csv.write_text("bucket,key\ndask-big,p0/d0/obj-00000\n")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("bucket,name\ndask-big,p0/d0/obj-00000\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    dest = tmp_path / "out"
    manifest: object = good_csv
    options: dict[str, Any] = {}
    if case == "missing-file":
        manifest = tmp_path / "nope.csv"
    elif case == "no-key-column":
        manifest = bad_csv
    elif case == "unknown-format":
        manifest = a_file
    elif case == "bad-skip":
        options["skip_existing"] = "mtime"
    elif case == "dest-is-a-file":
        dest = a_file
    elif case == "bad-partition-size":
        options["partition_size"] = 0
    elif case == "bad-strategy":
        options["strategy"] = "head-last"
    elif case == "bad-item":
        manifest = [("dask-big", "p0/d0/obj-00000"), "s3://dask-big/p0/d0/obj-00001"]
    elif case == "not-a-manifest":
        manifest = 42
    before = sorted(p.name for p in tmp_path.iterdir())
    recording.reset_stats()
    with pytest.raises(adask.ManifestError, match=message) as raised:
        adask.download_manifest(manifest, dest, client=dask_client, **options)
    assert isinstance(raised.value, asyncdl.InvalidRequestError)
    assert isinstance(raised.value, ValueError)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert recording.requests == []


def test_a_killed_worker_is_replaced_and_the_run_completes(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-kill"
    # Several parts each (CHUNK is 64 KiB): a temp file stays open while they stream.
    objects = {f"k/{i:03d}": payload(3 * CHUNK + i, seed=i) for i in range(120)}
    seed(s3, bucket, objects)
    pids = dask_client.run(os.getpid)
    victim = sorted(pids.values())[0]
    # Slow every GET down so that the kill lands mid-run.
    recording.rule = lambda request: Fault(delay=0.05) if request.method == "GET" else None
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                adask.download_manifest,
                [(bucket, key) for key in objects],
                tmp_path,
                client=dask_client,
                partition_size=10,
                config=CONFIG,
            )
            # Kill the worker while it holds a temp file open: it is sure to be left.
            deadline = time.monotonic() + 60
            while not any(".asyncdl-tmp" in target for target in open_files(victim)):
                assert time.monotonic() < deadline, "the worker never opened a temp file"
                assert not running.done(), running.result()
                time.sleep(0.005)
            os.kill(victim, signal.SIGKILL)
            summary = running.result(timeout=90)
    finally:
        recording.rule = None
    dask_client.wait_for_workers(2, timeout=30)

    assert (summary.downloaded, summary.failed) == (len(objects), 0), summary.failures
    for key, body in objects.items():
        assert (tmp_path / key).read_bytes() == body
    assert summary.temp_files_removed >= 1
    assert temp_files_under(tmp_path) == []
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        *sorted(objects)
    ]


def open_files(pid: int) -> list[str]:
    names = []
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return names
