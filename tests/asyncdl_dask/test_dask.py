"""asyncdl.dask on a real two-process LocalCluster, against moto through the recording proxy.

The workers are other processes: they reach moto through a proxy started before the
cluster (``AWS_ENDPOINT_URL_S3`` in their environment), which counts every request.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest
from distributed import Client, LocalCluster
from distributed.protocol.pickle import dumps as dask_pickle
from moto.s3.models import s3_backends

import asyncdl
import asyncdl.dask as adask
from asyncdl._files import file_records as _skip
from asyncdl._files.writer import is_temp_file
from asyncdl.dask import _sweep
from asyncdl.dask._partition import Job, run_partition
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload

#: One xdist worker runs the whole module (``--dist loadgroup``): its cluster and its
#: 5,000 objects, module fixtures, are then made once, not once on each worker.
pytestmark = pytest.mark.xdist_group("dask")

KEYS = 5000
CONFIG = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=16, backoff_base=0.01)


def temp_files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if is_temp_file(p.name)]


def dotted_under(root: Path) -> dict[str, str]:
    """Every dotted entry under ``root`` and all below it (a run's journals, a partial,
    a temp file) by relative path, with the start of each file: a leftover says whose."""
    found: dict[str, str] = {}
    for entry in root.rglob(".*"):
        for path in [entry, *(entry.rglob("*") if entry.is_dir() else ())]:
            shown = "<dir>" if path.is_dir() else repr(path.read_bytes()[:300])
            found[path.relative_to(root).as_posix()] = shown
    return found


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
    # One GET per object (plus the missing one, and a plain GET after an empty object's
    # 416 for its ETag): no partition ran twice.
    empty = sum(1 for body in objects.values() if not body)
    assert get_count == KEYS + 1 + empty
    assert summary.requests == KEYS + 1 + empty
    # Both workers took partitions; their counts add up to the run's.
    assert set(summary.workers) == set(dask_client.run(os.getpid))
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
    dask_client: Client,
    recording: TcpProxy,
    s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = "dask-kill"
    # Several parts each (CHUNK is 64 KiB): a temp file stays open while they stream.
    objects = {f"k/{i:03d}": payload(3 * CHUNK + i, seed=i) for i in range(120)}
    seed(s3, bucket, objects)
    pids = dask_client.run(os.getpid)
    victim = sorted(pids.values())[0]
    # A relative dest_dir is the client's: the workers run elsewhere.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    # Slow every GET down so that the kill lands mid-run.
    recording.rule = lambda request: Fault(delay=0.05) if request.method == "GET" else None
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                adask.download_manifest,
                [(bucket, key) for key in objects],
                "out",
                client=dask_client,
                partition_size=10,
                config=CONFIG,
            )
            # Kill the worker while it holds a temp file open: it is sure to be left.
            deadline = time.monotonic() + 60
            while not (opened := [t for t in open_files(victim) if ".asyncdl-tmp" in t]):
                assert time.monotonic() < deadline, "the worker never opened a temp file"
                assert not running.done(), running.result()
                time.sleep(0.005)
            # A file named like one of this run's temp files, in a directory the run
            # never writes into: the sweep lists only the run's own directories.
            run = re.search(r"\.([0-9a-f]{16})-[0-9a-f]{8}\.asyncdl-tmp$", opened[0])
            elsewhere = out / "elsewhere" / f".x.{run[1] if run else 'none'}-0123abcd.asyncdl-tmp"
            elsewhere.parent.mkdir(parents=True)
            elsewhere.write_bytes(b"not this run's")
            os.kill(victim, signal.SIGKILL)
            summary = running.result(timeout=90)
    finally:
        recording.rule = None
    dask_client.wait_for_workers(2, timeout=30)

    assert (summary.downloaded, summary.failed) == (len(objects), 0), summary.failures
    for key, body in objects.items():
        assert (out / key).read_bytes() == body
    assert summary.temp_files_removed >= 1
    assert temp_files_under(out) == [elsewhere]
    assert run is not None, opened
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        [*objects, str(elsewhere.relative_to(out))]
    )


def test_the_sweep_leaves_other_downloads_temp_files_alone(
    dask_client: Client, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-lookalike"
    objects = {f"s/{i:02d}": payload(10 + i, seed=i) for i in range(20)}
    # Real objects named like temp files: of a library download, and of a Dask run.
    objects["s/.real.0123abcd.asyncdl-tmp"] = b"real"
    objects["s/.real.0123456789abcdef-0123abcd.asyncdl-tmp"] = b"real too"
    seed(s3, bucket, objects)
    # Temp files of downloads still running into the same tree: a CLI or library one
    # and another Dask run's, in a directory this run writes into, and at the top.
    (tmp_path / "s").mkdir()
    foreign = [
        tmp_path / "s" / ".a.89abcdef.asyncdl-tmp",
        tmp_path / "s" / ".b.fedcba9876543210-89abcdef.asyncdl-tmp",
        tmp_path / ".c.89abcdef.asyncdl-tmp",
    ]
    for path in foreign:
        path.write_bytes(b"in flight")
    summary = adask.download_manifest(
        [(bucket, key) for key in objects], tmp_path, client=dask_client, partition_size=5
    )
    # The objects named like temp files are refused, each as its own failure: written,
    # they would be taken for a download's leftovers (and swept by `asyncdl clean`).
    lookalikes = [key for key in objects if key.endswith(".asyncdl-tmp")]
    assert (summary.downloaded, summary.failed) == (len(objects) - 2, 2), summary.failures
    assert sorted(failure.key for failure in summary.failures) == sorted(lookalikes)
    assert all("named like one of asyncdl's own" in f.error for f in summary.failures)
    assert summary.temp_files_removed == 0
    for key, body in objects.items():
        if key not in lookalikes:
            assert (tmp_path / key).read_bytes() == body
    for key in lookalikes:
        assert not (tmp_path / key).exists()
    for path in foreign:
        assert path.read_bytes() == b"in flight"
    # Nor does the public sweep touch them: no Dask run of this tree made them.
    assert adask.remove_temp_files(tmp_path, client=dask_client) == 0
    for path in foreign:
        assert path.read_bytes() == b"in flight"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.89abcdef.asyncdl-tmp", "s"]


def stray_partition(s3: Any, dest: Path, bucket: str) -> tuple[dict[str, bytes], Job, pd.DataFrame]:
    """A partition of a run, to submit as the task Dask still runs (or starts) on a
    worker once the run's results are in: after a worker died, the scheduler may
    give a partition to a second worker while the first still runs it."""
    objects = {f"t/{i}": payload(2 * CHUNK + i, seed=i) for i in range(2)}
    seed(s3, bucket, objects)
    job = Job(str(dest), CONFIG, "auto", None, None, None, run_id=secrets.token_hex(8))
    frame = pd.DataFrame({"bucket": [bucket] * len(objects), "key": list(objects)})
    return objects, job, frame


def test_a_partition_that_starts_after_the_run_ended_writes_nothing(
    dask_client: Client, s3: Any, tmp_path: Path
) -> None:
    dest = tmp_path / "out"
    _, job, frame = stray_partition(s3, dest, "dask-late")
    worker = sorted(dask_client.run(os.getpid))[0]
    started, release = tmp_path / "started", tmp_path / "release"

    def hold(started: str, release: str) -> None:
        """Keep the worker's one thread until ``release`` exists."""
        Path(started).touch()
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)

    busy = dask_client.submit(hold, str(started), str(release), workers=[worker], pure=False)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline, busy
        time.sleep(0.01)
    # Queued behind the busy thread, so that it starts only once the run has ended.
    late = dask_client.submit(run_partition, frame, job, workers=[worker], pure=False)
    assert adask._sweep_hosts(dask_client, job.dest_dir, job.run_id) == 0
    release.touch()
    rows = late.result(timeout=60)
    busy.result(timeout=60)
    # It wrote nothing: no journal that outlives the run's sweep, no download racing
    # the caller's next step. Its rows say why (nobody reads them).
    assert dotted_under(dest) == {}
    assert not dest.exists() or list(dest.iterdir()) == []
    assert set(rows["status"]) == {"failed"}, rows


def test_the_run_ends_once_a_partition_still_running_has_finished(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    dest = tmp_path / "out"
    objects, job, frame = stray_partition(s3, dest, "dask-stray")
    worker = sorted(dask_client.run(os.getpid))[0]
    recording.rule = lambda request: Fault(delay=0.2) if request.method == "GET" else None
    try:
        stray = dask_client.submit(run_partition, frame, job, workers=[worker], pure=False)
        deadline = time.monotonic() + 30
        while not (dest / _sweep.JOURNAL_DIR).exists():
            assert time.monotonic() < deadline, stray
            time.sleep(0.01)
        adask._sweep_hosts(dask_client, job.dest_dir, job.run_id)
        # The end of the run waited for it: its files are in place, nothing of it is left.
        for key, body in objects.items():
            assert (dest / key).read_bytes() == body
        assert dotted_under(dest) == {}
        assert set(stray.result(timeout=60)["status"]) == {"downloaded"}
    finally:
        recording.rule = None


def test_every_host_is_swept_whatever_the_clients_cached_scheduler_info_holds(
    dask_client: Client, tmp_path: Path
) -> None:
    # A client refreshes its cached scheduler_info every 2 s, without the workers; a
    # refresh that lands as scheduler_info() fetches them hides them all. Refreshing
    # every millisecond makes that race frequent: the sweep must not depend on it.
    with (
        dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}),
        Client(dask_client.scheduler.address, set_as_default=False) as client,
    ):
        for attempt in range(50):
            run = secrets.token_hex(8)
            _sweep.record_dirs(tmp_path, run, [tmp_path])
            (tmp_path / f".x.{run}-0123abcd.asyncdl-tmp").write_bytes(b"left")
            assert adask.remove_temp_files(tmp_path, client=client) == 1, attempt
            assert dotted_under(tmp_path) == {}, attempt


SSE_KEY_VARIABLE = "ASYNCDL_TEST_SSE_C_KEY"


def set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def test_an_sse_c_key_is_never_put_in_the_task_graph(
    dask_client: Client, recording: TcpProxy, tmp_path: Path
) -> None:
    key = os.urandom(32)
    recording.reset_stats()
    for given in (key, base64.b64encode(key).decode()):
        with pytest.raises(adask.ManifestError, match="sse_customer_key_env"):
            adask.download_results(
                [("dask-big", "p0/d0/obj-00000")],
                tmp_path,
                client=dask_client,
                extra_args={"SSECustomerAlgorithm": "AES256", "SSECustomerKey": given},
            )
    assert recording.requests == []
    assert list(tmp_path.iterdir()) == []
    # Whatever a Job holds, its repr shows no key.
    for given in (key, base64.b64encode(key).decode(), "a" * 32):
        job = Job(
            dest_dir=str(tmp_path),
            config=CONFIG,
            strategy="auto",
            skip_existing=None,
            extra_args={"SSECustomerAlgorithm": "AES256", "SSECustomerKey": given},
            timeout=None,
            run_id="0123456789abcdef",
        )
        assert repr(given) not in repr(job)
        assert str(given) not in repr(job)
        assert "AES256" in repr(job)


def test_an_sse_c_download_on_the_cluster(
    dask_client: Client, recording: TcpProxy, s3: Any, tmp_path: Path
) -> None:
    bucket = "dask-sse-c"
    key = os.urandom(32)
    encoded = base64.b64encode(key).decode()
    # A small object (one GET) and larger ones (ranged GETs): every request needs it.
    objects = {f"c/{i}": payload(2 * CHUNK + 1000 * i, seed=i) for i in range(4)}
    objects["c/small"] = b"small"
    s3.create_bucket(Bucket=bucket)
    for name, body in objects.items():
        s3.put_object(
            Bucket=bucket, Key=name, Body=body, SSECustomerAlgorithm="AES256", SSECustomerKey=key
        )
    manifest = [(bucket, name) for name in objects]
    options: dict[str, Any] = {"client": dask_client, "config": CONFIG}
    # The key lives in the workers' environment, as their credentials do.
    dask_client.run(set_env, SSE_KEY_VARIABLE, encoded)
    try:
        results = adask.download_results(
            manifest, tmp_path, sse_customer_key_env=SSE_KEY_VARIABLE, **options
        )
        # Pickled as Dask pickles tasks for the scheduler: the collection and its graph.
        shipped = dask_pickle((results, dict(results.__dask_graph__())))
        for form in (key, encoded.encode(), key.hex().encode()):
            assert form not in shipped
        recording.reset_stats()
        summary = adask.download_manifest(
            manifest, tmp_path, sse_customer_key_env=SSE_KEY_VARIABLE, **options
        )
    finally:
        dask_client.run(set_env, SSE_KEY_VARIABLE, None)
    assert (summary.downloaded, summary.failed) == (len(objects), 0), summary.failures
    for name, body in objects.items():
        assert (tmp_path / name).read_bytes() == body
    sent = [r for r in recording.requests if r.method in ("GET", "HEAD")]
    assert len(sent) >= len(objects)
    for request in sent:
        assert request.headers.get("x-amz-server-side-encryption-customer-key") == encoded
        assert request.headers.get("x-amz-server-side-encryption-customer-algorithm") == "AES256"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "is not set"),
        ("not base64!", "base64"),
        (base64.b64encode(b"k" * 16).decode(), "32 bytes"),
    ],
    ids=["unset", "not-base64", "short"],
)
def test_a_bad_sse_c_key_on_a_worker_raises_before_anything_runs(
    value: str | None, message: str, dask_client: Client, recording: TcpProxy, tmp_path: Path
) -> None:
    dask_client.run(set_env, SSE_KEY_VARIABLE, value)
    recording.reset_stats()
    try:
        with pytest.raises(adask.ManifestError, match=f"{SSE_KEY_VARIABLE}.*{message}") as raised:
            adask.download_manifest(
                [("dask-big", "p0/d0/obj-00000")],
                tmp_path / "out",
                client=dask_client,
                sse_customer_key_env=SSE_KEY_VARIABLE,
            )
    finally:
        dask_client.run(set_env, SSE_KEY_VARIABLE, None)
    assert recording.requests == []
    assert list(tmp_path.iterdir()) == []
    # The message names the variable, never its value.
    assert value is None or value not in str(raised.value)


def open_files(pid: int) -> list[str]:
    names = []
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return names
