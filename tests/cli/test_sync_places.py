"""A record names where asyncdl wrote its file (bucket, key, and the path under the
synced directory) and vouches for the file only there: ``sync --delete`` removes no
file that was moved, copied or synced in from elsewhere, with either record backend
(the xattr that travels with the file, or the sidecar that does not)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl._files import file_records, skipping
from asyncdl._files.file_records import XATTR, EtagStore
from asyncdl._files.stale import stale_files
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload

_names = itertools.count()


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture(params=["xattr", "sidecar"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Records in xattrs (this file system has them), or in the sidecar."""
    file_records._force_sidecar = request.param == "sidecar"
    try:
        yield request.param
    finally:
        file_records._force_sidecar = False


def sync(proxy: TcpProxy, *args: str) -> Result:
    return CliRunner().invoke(cli, ["sync", "--endpoint-url", proxy.url, *args])


def gets(proxy: TcpProxy) -> list[str]:
    return sorted(r.path.split("?")[0] for r in proxy.requests if "list-type=2" not in r.path)


def new_bucket(s3: Any, objects: dict[str, bytes]) -> str:
    name = f"places-{next(_names)}"
    s3.create_bucket(Bucket=name)
    for key, body in objects.items():
        s3.put_object(Bucket=name, Key=key, Body=body)
    return name


MODELS = {"m/report.csv": payload(300, seed=1), "m/weights.bin": payload(500, seed=2)}
CONFIGS = {"c/app.yaml": b"debug: false\n"}


def test_delete_leaves_files_moved_copied_or_synced_in_from_elsewhere(
    backend: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    models, configs = new_bucket(s3, MODELS), new_bucket(s3, CONFIGS)
    data = tmp_path / "data"
    assert sync(proxy, f"s3://{models}/m", str(data)).exit_code == 0
    assert sync(proxy, f"s3://{configs}/c", str(data / "configs")).exit_code == 0
    (data / "keep").mkdir()
    os.rename(data / "report.csv", data / "keep/report-2026.csv")  # mv keeps xattr and mtime
    shutil.copy2(data / "weights.bin", data / "weights-copy.bin")  # as cp -a: xattrs too
    proxy.reset_stats()

    result = sync(proxy, "--delete", f"s3://{models}/m", str(data))

    assert result.exit_code == 0, result.output
    assert (data / "configs/app.yaml").read_bytes() == CONFIGS["c/app.yaml"]
    assert (data / "keep/report-2026.csv").read_bytes() == MODELS["m/report.csv"]
    assert (data / "weights-copy.bin").read_bytes() == MODELS["m/weights.bin"]
    assert "delete:" not in result.stdout
    # The renamed file's key is fetched again to its own place; nothing else is.
    assert result.stdout == f"download: s3://{models}/m/report.csv to {data / 'report.csv'}\n"
    assert gets(proxy) == [f"/{models}/m/report.csv"]
    left_alone = sorted(line for line in result.stderr.splitlines() if "left alone" in line)
    assert len(left_alone) == 3, result.stderr
    assert left_alone[0].startswith(f"left alone: {data / 'configs/app.yaml'} (")


def test_a_synced_directory_moved_as_a_whole_is_still_vouched_for(
    backend: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    models = new_bucket(s3, MODELS)
    assert sync(proxy, f"s3://{models}/m", str(tmp_path / "data")).exit_code == 0
    os.rename(tmp_path / "data", tmp_path / "data2")
    s3.delete_object(Bucket=models, Key="m/weights.bin")
    proxy.reset_stats()

    result = sync(proxy, "--delete", f"s3://{models}/m", str(tmp_path / "data2"))

    assert result.exit_code == 0, result.output
    assert gets(proxy) == []  # records relative to the synced directory moved with it
    assert result.stdout == f"delete: {tmp_path / 'data2/weights.bin'}\n"


def test_a_record_of_another_bucket_or_key_at_the_same_place_does_not_vouch(
    backend: str, tmp_path: Path
) -> None:
    (tmp_path / "x").write_bytes(b"data")
    store = EtagStore(tmp_path)
    store.record(tmp_path / "x", '"e"', bucket="other", key="q/x")
    store.close()
    store = EtagStore(tmp_path)
    try:
        (stale,) = stale_files(store, lambda _: False, lambda _: True, bucket="b", prefix="p/")
        assert stale.kept_because == "written by asyncdl from s3://other/q/x"
        (stale,) = stale_files(store, lambda _: False, lambda _: True, bucket="other", prefix="q/")
        assert stale.kept_because is None
    finally:
        store.close()


def old_record(backend: str, root: Path, path: Path) -> None:
    """A record as asyncdl wrote it before records named their place."""
    st = path.stat()
    value = {"etag": "e", "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if backend == "xattr":
        os.setxattr(path, XATTR, json.dumps(value).encode())
    else:
        (root / file_records.SIDECAR_DIR).mkdir(exist_ok=True)
        line = {"path": path.relative_to(root).as_posix(), **value}
        (root / file_records.SIDECAR_DIR / "old-1.jsonl").write_text(json.dumps(line) + "\n")


def test_an_old_record_without_its_place_vouches_for_nothing(backend: str, tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"data")
    old_record(backend, tmp_path, tmp_path / "x")
    store = EtagStore(tmp_path)
    try:
        st = (tmp_path / "x").stat()
        # Neither skipped (it is fetched again, and recorded anew) nor deleted.
        assert not skipping.should_skip(store, tmp_path / "x", "etag", 4, '"e"')
        (stale,) = stale_files(store, lambda _: False, lambda _: True, bucket="b", prefix="")
        assert stale.kept_because == "recorded by an older asyncdl, without its place"
        assert store.recorded(tmp_path / "x", st) is None
    finally:
        store.close()


def test_what_a_file_left_alone_says_of_where_asyncdl_wrote_it(tmp_path: Path) -> None:
    (tmp_path / "keep").mkdir()
    moved = tmp_path / "keep/report-2026.csv"
    moved.write_bytes(b"data")
    # Recorded (in its xattr) where it was written, then renamed.
    (tmp_path / "report.csv").write_bytes(b"data")
    EtagStore(tmp_path).record(tmp_path / "report.csv", '"e"', bucket="m", key="m/report.csv")
    os.rename(tmp_path / "report.csv", moved)
    store = EtagStore(tmp_path)
    try:
        (stale,) = stale_files(store, lambda _: False, lambda _: True, bucket="m", prefix="m/")
        assert stale.kept_because == (
            "written by asyncdl from s3://m/m/report.csv to another place, moved or copied here"
        )
    finally:
        store.close()


def test_a_record_without_its_directory_vouches_for_nothing(backend: str, tmp_path: Path) -> None:
    # As the asyncdl before records named the synced directory wrote it.
    (tmp_path / "x").write_bytes(b"data")
    st = (tmp_path / "x").stat()
    value = {"etag": "e", "size": st.st_size, "mtime_ns": st.st_mtime_ns, "bucket": "b"}
    value.update(key="x", path="x")
    if backend == "xattr":
        os.setxattr(tmp_path / "x", XATTR, json.dumps(value).encode())
    else:
        (tmp_path / file_records.SIDECAR_DIR).mkdir(mode=0o700)
        (tmp_path / file_records.SIDECAR_DIR / "old-1.jsonl").write_text(json.dumps(value) + "\n")
    store = EtagStore(tmp_path)
    try:
        assert store.recorded(tmp_path / "x", st) is None
        (stale,) = stale_files(store, lambda _: False, lambda _: True, bucket="b", prefix="")
        assert stale.kept_because == "recorded by an older asyncdl, without its place"
    finally:
        store.close()
