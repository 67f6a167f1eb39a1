"""Real readers on asyncdl's file system, against moto: pandas, pyarrow's datasets,
Dask and Zarr (v3, its fsspec store). What each reads through ``asyncdl://`` is
compared with what the same reader makes of the bytes boto3 reads."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import zarr
from fsspec.registry import known_implementations
from zarr.core.sync import sync as zarr_sync
from zarr.storage import FsspecStore, LocalStore

from asyncdl.fsspec import AsyncdlFileSystem
from asyncdl.testing.tcp_proxy import TcpProxy

CONFIG = {"chunk_size": 64 * 1024, "max_concurrency": 8}


@pytest.fixture
def options(proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The storage options every reader passes, with ``asyncdl://`` registered as the
    package's entry point registers it (this environment's installed metadata may
    predate it); the file systems the readers made are closed after (conftest)."""
    monkeypatch.setitem(
        known_implementations,
        "asyncdl",
        {"class": "asyncdl.fsspec.AsyncdlFileSystem"},
    )
    return {"endpoint_url": proxy.url, "config": CONFIG}


def boto3_bytes(s3: Any, bucket: str, key: str) -> bytes:
    body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def upload_tree(s3: Any, bucket: str, root: Path, prefix: str) -> list[str]:
    keys = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(root).as_posix()}"
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
        keys.append(key)
    return keys


def download_tree(s3: Any, bucket: str, keys: list[str], prefix: str, root: Path) -> None:
    for key in keys:
        target = root / key.removeprefix(f"{prefix}/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(boto3_bytes(s3, bucket, key))


def frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "value": rng.standard_normal(rows),
            "name": [f"name-{i % 97}" for i in range(rows)],
            "year": np.where(np.arange(rows) % 3 == 0, 2023, 2024).astype("int64"),
        }
    )


def test_pandas_read_parquet(
    s3: Any, bucket: str, options: dict[str, Any], proxy: TcpProxy
) -> None:
    buffer = io.BytesIO()
    # Row groups of 5,000 rows: several column chunks, read at offsets.
    frame(40_000).to_parquet(buffer, row_group_size=5_000)
    s3.put_object(Bucket=bucket, Key="t/sales.parquet", Body=buffer.getvalue())
    expected = pd.read_parquet(io.BytesIO(boto3_bytes(s3, bucket, "t/sales.parquet")))
    url = f"asyncdl://{bucket}/t/sales.parquet"
    got = pd.read_parquet(url, storage_options=options)
    pd.testing.assert_frame_equal(got, expected)
    one = pd.read_parquet(url, columns=["value"], storage_options=options)
    pd.testing.assert_frame_equal(one, expected[["value"]])
    assert any(r.method == "GET" and "sales.parquet" in r.path for r in proxy.requests)
    fs = fsspec.filesystem("asyncdl", **options)
    assert fs.cat_file(f"{bucket}/t/sales.parquet") == buffer.getvalue()


def test_pyarrow_partitioned_dataset(
    s3: Any, bucket: str, options: dict[str, Any], tmp_path: Path, proxy: TcpProxy
) -> None:
    table = pa.Table.from_pandas(frame(30_000), preserve_index=False)
    ds.write_dataset(
        table,
        tmp_path / "written",
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("year", pa.int64())]), flavor="hive"),
        max_rows_per_file=6_000,
        max_rows_per_group=3_000,
    )
    keys = upload_tree(s3, bucket, tmp_path / "written", "sales")
    assert len(keys) >= 4
    download_tree(s3, bucket, keys, "sales", tmp_path / "boto3")
    expected = ds.dataset(tmp_path / "boto3", format="parquet", partitioning="hive").to_table()
    fs = fsspec.filesystem("asyncdl", **options)
    proxy.reset_stats()
    got = ds.dataset(f"{bucket}/sales", filesystem=fs, format="parquet", partitioning="hive")
    assert sorted(got.files) == sorted(f"{bucket}/{key}" for key in keys)
    assert got.to_table().sort_by("id").equals(expected.sort_by("id"))
    filtered = got.to_table(filter=ds.field("year") == 2023, columns=["id", "year"])
    assert filtered.sort_by("id").equals(
        expected.filter(pa.compute.equal(expected["year"], 2023))
        .select(["id", "year"])
        .sort_by("id")
    )
    # The dataset's listing gave every file's size and ETag: every GET was pinned.
    object_gets = [r for r in proxy.requests if r.method == "GET" and "list-type=" not in r.path]
    assert object_gets
    assert all("if-match" in r.headers for r in object_gets)


# dask (2026.8) sets and resets a partition's index with inplace=True, which pandas 3.1
# deprecates: its warning, not ours, would fail the test (warnings are errors here).
@pytest.mark.filterwarnings("ignore:The inplace keyword:pandas.errors.Pandas4Warning")
def test_dask_read_parquet(s3: Any, bucket: str, options: dict[str, Any], tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    data = frame(24_000)
    for i in range(4):
        data.iloc[i * 6_000 : (i + 1) * 6_000].to_parquet(parts / f"part-{i}.parquet", index=False)
    keys = upload_tree(s3, bucket, parts, "events")
    download_tree(s3, bucket, keys, "events", tmp_path / "boto3")
    expected = pd.concat(
        [pd.read_parquet(tmp_path / "boto3" / f"part-{i}.parquet") for i in range(4)],
        ignore_index=True,
    )
    got = dd.read_parquet(f"asyncdl://{bucket}/events/", storage_options=options)
    assert got.npartitions == 4
    computed = got.compute(scheduler="threads").reset_index(drop=True)
    pd.testing.assert_frame_equal(computed, expected, check_dtype=False)


def test_zarr_array_of_many_chunks(s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path) -> None:
    values = np.random.default_rng(3).standard_normal((200, 200))
    written = zarr.create_array(
        store=LocalStore(tmp_path / "written"), shape=values.shape, chunks=(10, 10), dtype="f8"
    )
    written[:] = values
    keys = upload_tree(s3, bucket, tmp_path / "written", "grid.zarr")
    assert len(keys) > 400  # 400 chunks and the metadata
    download_tree(s3, bucket, keys, "grid.zarr", tmp_path / "boto3")
    local = zarr.open_array(store=LocalStore(tmp_path / "boto3", read_only=True), mode="r")
    expected = np.asarray(local[:])
    fs = AsyncdlFileSystem(
        endpoint_url=proxy.url, config=CONFIG, asynchronous=True, skip_instance_cache=True
    )
    try:
        store = FsspecStore(fs, path=f"{bucket}/grid.zarr", read_only=True)
        array = zarr.open_array(store=store, mode="r")
        got = np.asarray(array[:])
        assert got.tobytes() == expected.tobytes()
        assert np.array_equal(got, values)
        assert np.asarray(array[37:61, 5:7]).tobytes() == expected[37:61, 5:7].tobytes()
        stats = zarr_sync(fs.engine()).stats()
        assert stats.requests >= 400
    finally:
        zarr_sync(fs.aclose())
