"""``asyncdl sync`` in-process (click's CliRunner) against moto through the recording
proxy, reached only through ``--endpoint-url``: what is fetched, what is removed,
and what is left alone."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from asyncdl._files import file_records
from asyncdl._files.file_records import EtagStore
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload, temp_files
from ..spawn import sigint_ignored
from .test_cli import hang_all_but_the_first_part, spawn_cli, wait_for_a_temp_file, without_summary


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def sync(proxy: TcpProxy, *args: str) -> Result:
    return CliRunner().invoke(cli, ["sync", "--endpoint-url", proxy.url, *args])


def sent(proxy: TcpProxy) -> list[str]:
    """The requests the proxy saw, listing pages apart: ``METHOD /bucket/key``."""
    return sorted(
        f"{r.method} {r.path.split('?')[0]}" for r in proxy.requests if "list-type=2" not in r.path
    )


def listings(proxy: TcpProxy) -> int:
    return sum("list-type=2" in r.path for r in proxy.requests)


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` (asyncdl's sidecar included), with bytes and mtime."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def files_under(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and file_records.SIDECAR_DIR not in p.parts
    )


def edit(path: Path, data: bytes) -> None:
    """Rewrite ``path`` as a user would, its mtime surely new."""
    before = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(before, before + 10**9))


OBJECTS = {f"p/{name}": payload(300 + i, seed=i) for i, name in enumerate("abcdefg")}
OBJECTS["p/sub/deep/h"] = b"h" * 10


@pytest.fixture
def seeded(s3: Any, bucket: str) -> str:
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return bucket


def test_first_run_downloads_all_and_a_rerun_sends_only_the_listing(
    seeded: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"  # created by the sync
    first = sync(proxy, f"s3://{seeded}/p", str(dest))
    assert first.exit_code == 0, first.stderr
    assert files_under(dest) == sorted(key.removeprefix("p/") for key in OBJECTS)
    assert sorted(first.stdout.splitlines()) == sorted(
        f"download: s3://{seeded}/{key} to {dest / key.removeprefix('p/')}" for key in OBJECTS
    )
    proxy.reset_stats()

    again = sync(proxy, f"s3://{seeded}/p", str(dest))

    assert again.exit_code == 0, again.stderr
    assert (again.stdout, without_summary(again.stderr)) == ("", "")
    assert sent(proxy) == []
    assert listings(proxy) == 1


def test_after_changes_on_s3_exactly_those_are_fetched_and_delete_removes_only_ours(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    changed = ["p/a", "p/c", "p/sub/deep/h"]
    for key in changed:  # the same size, new bytes: only the ETag tells
        s3.put_object(Bucket=seeded, Key=key, Body=payload(len(OBJECTS[key]), seed=50))
    for key in ("p/e", "p/g"):
        s3.delete_object(Bucket=seeded, Key=key)
    s3.delete_object(Bucket=seeded, Key="p/b")  # gone too, but the user edited it
    edit(tmp_path / "b", b"mine now")
    (tmp_path / "notes.txt").write_bytes(b"the user's own")
    (tmp_path / "sub/deep/mine").write_bytes(b"the user's own")
    proxy.reset_stats()

    result = sync(proxy, "--delete", f"s3://{seeded}/p/", str(tmp_path))

    assert result.exit_code == 0, result.stderr
    assert sent(proxy) == sorted(f"GET /{seeded}/{key}" for key in changed)
    assert sorted(result.stdout.splitlines()) == sorted(
        [
            *(f"download: s3://{seeded}/{k} to {tmp_path / k.removeprefix('p/')}" for k in changed),
            f"delete: {tmp_path / 'e'}",
            f"delete: {tmp_path / 'g'}",
        ]
    )
    assert sorted(without_summary(result.stderr).splitlines()) == [
        f"left alone: {tmp_path / 'b'} (changed since asyncdl wrote it)",
        f"left alone: {tmp_path / 'notes.txt'} (not written by asyncdl)",
        f"left alone: {tmp_path / 'sub/deep/mine'} (not written by asyncdl)",
    ]
    assert files_under(tmp_path) == [
        "a",
        "b",
        "c",
        "d",
        "f",
        "notes.txt",
        "sub/deep/h",
        "sub/deep/mine",
    ]
    assert (tmp_path / "b").read_bytes() == b"mine now"
    assert (tmp_path / "c").read_bytes() == payload(len(OBJECTS["p/c"]), seed=50)
    proxy.reset_stats()
    again = sync(proxy, "--delete", f"s3://{seeded}/p/", str(tmp_path))
    assert again.exit_code == 0
    assert again.stdout == ""
    assert sent(proxy) == []


def test_delete_removes_directories_it_empties_and_no_others(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    (tmp_path / "empty-before").mkdir()
    s3.delete_object(Bucket=seeded, Key="p/sub/deep/h")
    result = sync(proxy, "--delete", f"s3://{seeded}/p/", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / "sub").exists()
    assert (tmp_path / "empty-before").is_dir()


def test_delete_never_follows_a_symlink_out_of_dir(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    elsewhere, dest = tmp_path / "elsewhere", tmp_path / "dest"
    # asyncdl wrote these, under another destination that the links lead to.
    assert sync(proxy, f"s3://{seeded}/p/", str(elsewhere)).exit_code == 0
    dest.mkdir()
    (dest / "linked-dir").symlink_to(elsewhere, target_is_directory=True)
    (dest / "linked-file").symlink_to(elsewhere / "a")
    s3.delete_object(Bucket=seeded, Key="p/a")
    result = sync(proxy, "--delete", f"s3://{seeded}/p/", str(dest))
    assert result.exit_code == 0, result.stderr
    assert (elsewhere / "a").read_bytes() == OBJECTS["p/a"]
    assert (dest / "linked-file").is_symlink()
    assert f"left alone: {dest / 'linked-file'} (not a regular file)" in result.stderr
    assert "delete:" not in result.stdout


def test_asyncdl_own_files_are_never_deletable(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    file_records._force_sidecar = True
    try:
        assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    finally:
        file_records._force_sidecar = False
    own = [".x.0123abcd.asyncdl-tmp", ".x.asyncdl-partial", ".x.asyncdl-journal"]
    for name in own:
        (tmp_path / name).write_bytes(b"partial")
    for key in OBJECTS:
        s3.delete_object(Bucket=seeded, Key=key)

    dry = sync(proxy, "--delete", "--dry-run", f"s3://{seeded}/p/", str(tmp_path))
    result = sync(proxy, "--delete", f"s3://{seeded}/p/", str(tmp_path))

    for run in (dry, result):
        assert run.exit_code == 0, run.stderr
        assert not any(name in run.output for name in [*own, file_records.SIDECAR_DIR])
    # Every file asyncdl wrote went, through its sidecar record; its own files stayed.
    assert sorted(os.listdir(tmp_path)) == sorted([*own, file_records.SIDECAR_DIR])
    assert len(dry.stdout.splitlines()) == len(OBJECTS)


def test_a_dry_run_with_delete_into_a_directory_not_there_yet(
    seeded: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # Nothing is there, so nothing is stale: the dry run says what it would download.
    new_dir = tmp_path / "new"
    dry = sync(proxy, "--dry-run", "--delete", f"s3://{seeded}/p", str(new_dir))
    assert dry.exit_code == 0, dry.stderr
    assert not new_dir.exists()
    assert len(dry.stdout.splitlines()) == len(OBJECTS)
    assert all(line.startswith("(dryrun) download: ") for line in dry.stdout.splitlines())


def test_dry_run_changes_nothing_and_sends_no_get(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    new_dir = tmp_path / "new"
    first = sync(proxy, "--dry-run", f"s3://{seeded}/p", str(new_dir))
    assert first.exit_code == 0, first.stderr
    assert not new_dir.exists()
    assert len(first.stdout.splitlines()) == len(OBJECTS)
    assert f"(dryrun) download: s3://{seeded}/p/a to {new_dir / 'a'}" in first.stdout

    dest = tmp_path / "dest"
    assert sync(proxy, f"s3://{seeded}/p", str(dest)).exit_code == 0
    s3.put_object(Bucket=seeded, Key="p/a", Body=b"changed")
    s3.delete_object(Bucket=seeded, Key="p/b")
    (dest / "mine").write_bytes(b"mine")
    before = tree(dest)
    proxy.reset_stats()

    result = sync(proxy, "--dry-run", "--delete", "--json", f"s3://{seeded}/p", str(dest))

    assert result.exit_code == 0, result.stderr
    assert sent(proxy) == []
    assert listings(proxy) == 1
    assert tree(dest) == before
    assert sorted(map(json.loads, result.stdout.splitlines()), key=str) == sorted(
        [
            {
                "action": "download",
                "dry_run": True,
                "path": str(dest / "a"),
                "bucket": seeded,
                "key": "p/a",
            },
            {"action": "delete", "dry_run": True, "path": str(dest / "b")},
            {
                "action": "left-alone",
                "path": str(dest / "mine"),
                "reason": "not written by asyncdl",
            },
        ],
        key=str,
    )


def test_a_refused_key_fails_alike_in_a_dry_run_and_a_run(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a//b", Body=b"evil")
    s3.put_object(Bucket=bucket, Key="p/ok", Body=b"ok")
    dry = sync(proxy, "--dry-run", f"s3://{bucket}/p", str(tmp_path))
    run = sync(proxy, f"s3://{bucket}/p", str(tmp_path))
    for result in (dry, run):
        assert result.exit_code == 1
        (error, summary) = without_summary(result.stderr).splitlines()
        assert error.startswith(f"error: s3://{bucket}/p/a//b: refusing key")
        assert summary == "1 of 2 objects failed"
    assert dry.stdout == f"(dryrun) download: s3://{bucket}/p/ok to {tmp_path / 'ok'}\n"
    assert os.listdir(tmp_path) == ["ok"]


FILTER_FILES = {"p/a.txt": b"1", "p/b.png": b"2", "p/logs/c.txt": b"3", "p/.git/config": b"4"}


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        (["--exclude", "*", "--include", "*.txt"], ["a.txt", "logs/c.txt"]),
        (["--include", "*.txt", "--exclude", "*"], []),
        (["--exclude", "*.txt"], [".git/config", "b.png"]),
        (["--exclude", ".git/*"], ["a.txt", "b.png", "logs/c.txt"]),
        (["--exclude=*", "--include=logs/*", "--include", "*.png"], ["b.png", "logs/c.txt"]),
        (["--exclude", "*", "--include", "*.txt", "--exclude", "logs/*"], ["a.txt"]),
    ],
)
def test_exclude_and_include_act_in_command_line_order(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, args: list[str], kept: list[str]
) -> None:
    for key, body in FILTER_FILES.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    dest = tmp_path / "dest"
    result = sync(proxy, *args, f"s3://{bucket}/p", str(dest))
    assert result.exit_code == 0, result.stderr
    assert (files_under(dest) if dest.exists() else []) == kept
    assert sent(proxy) == sorted(f"GET /{bucket}/p/{name}" for name in kept)


def test_filters_keep_excluded_files_from_delete(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    for key in ("p/a", "p/b"):
        s3.delete_object(Bucket=seeded, Key=key)
    result = sync(proxy, "--delete", "--exclude", "a", f"s3://{seeded}/p/", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"delete: {tmp_path / 'b'}\n"
    assert (tmp_path / "a").exists()


def test_size_only_does_not_see_a_new_etag(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    s3.put_object(Bucket=seeded, Key="p/a", Body=payload(len(OBJECTS["p/a"]), seed=77))
    proxy.reset_stats()
    assert sync(proxy, "--size-only", f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    assert sent(proxy) == []
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    assert sent(proxy) == [f"GET /{seeded}/p/a"]


def test_json_lines_one_per_object_and_removal(
    seeded: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    s3.put_object(Bucket=seeded, Key="p/a", Body=b"new")
    s3.delete_object(Bucket=seeded, Key="p/b")
    result = sync(proxy, "--json", "--delete", f"s3://{seeded}/p/", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    objects = {line["key"]: line for line in lines if "action" not in line}
    assert sorted(objects) == sorted(set(OBJECTS) - {"p/b"})
    assert "skipped" not in objects["p/a"]
    assert objects["p/a"]["ok"] is True
    assert objects["p/a"]["requests"] == 1
    assert all(
        objects[k].get("skipped") and objects[k]["requests"] == 0 for k in objects if k != "p/a"
    )
    assert objects["p/c"]["size"] == len(OBJECTS["p/c"])
    assert objects["p/c"]["etag"] is not None
    assert [line for line in lines if "action" in line] == [
        {"action": "delete", "dry_run": False, "path": str(tmp_path / "b")}
    ]


def test_a_failed_object_exits_1_and_the_others_are_synced(
    seeded: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "/p/c" in r.path else None
    )
    result = sync(proxy, f"s3://{seeded}/p/", str(tmp_path))
    assert result.exit_code == 1
    assert without_summary(result.stderr).splitlines() == [
        f"error: s3://{seeded}/p/c: access denied (AccessDenied: injected by the test proxy)",
        f"1 of {len(OBJECTS)} objects failed",
    ]
    assert "c" not in os.listdir(tmp_path)
    assert temp_files(tmp_path) == []
    proxy.rule = None
    proxy.reset_stats()
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    assert sent(proxy) == [f"GET /{seeded}/p/c"]


def test_a_dry_runs_listing_is_counted_in_the_stats(
    seeded: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    result = sync(proxy, "--dry-run", "--debug", f"s3://{seeded}/p", str(tmp_path / "d"))
    assert result.exit_code == 0, result.stderr
    stats = [line for line in result.stderr.splitlines() if line.startswith("stats: ")]
    assert listings(proxy) == 1
    assert stats[0] == "stats: requests: 1"
    assert any(line.startswith("stats:   LIST: 1 (ok 1,") for line in stats), stats


def test_a_failed_listing_removes_nothing(seeded: str, proxy: TcpProxy, tmp_path: Path) -> None:
    assert sync(proxy, f"s3://{seeded}/p/", str(tmp_path)).exit_code == 0
    before = tree(tmp_path)
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "list-type" in r.path else None
    )
    for args in (["--delete"], ["--delete", "--dry-run"]):
        result = sync(proxy, *args, f"s3://{seeded}/p/", str(tmp_path))
        assert result.exit_code == 1
        assert result.stdout == ""
        assert "the listing failed after 0 objects" in result.stderr
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["http://bucket/p", "{tmp}/d"], "is not an s3://bucket/key URL"),
        (["s3://bad bucket/p", "{tmp}/d"], "invalid bucket name"),
        (["s3:///p", "{tmp}/d"], "names no bucket"),
        (["s3://{bucket}/p", "{tmp}/file"], "is not a directory"),
        (["s3://{bucket}/p", "{tmp}/no/such/d"], "does not exist"),
        (["s3://{bucket}/p", "{tmp}/" + "d" * 300], "cannot be used: File name too long"),
        (["--concurrency", "0", "s3://{bucket}/p", "{tmp}/d"], "--concurrency"),
        (["--exclude"], "requires an argument"),
    ],
)
def test_bad_input_is_one_line_nothing_sent_nothing_written(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, args: list[str], message: str
) -> None:
    s3.put_object(Bucket=bucket, Key="p/a", Body=b"data")
    (tmp_path / "file").write_bytes(b"keep")
    argv = [arg.format(bucket=bucket, tmp=tmp_path) for arg in args]
    result = sync(proxy, *argv)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    assert message in line
    assert result.stdout == ""
    assert proxy.requests == []
    assert os.listdir(tmp_path) == ["file"]
    assert (tmp_path / "file").read_bytes() == b"keep"


def test_a_record_vouches_only_for_the_file_as_written(tmp_path: Path) -> None:
    # The premise of --delete's test above: an edited file's record no longer vouches.
    path = tmp_path / "f"
    path.write_bytes(b"x")
    store = EtagStore(tmp_path)
    store.record(path, '"e"', bucket="b", key="f")
    assert store.recorded(path, path.stat()) == "e"
    edit(path, b"y")
    assert store.recorded(path, path.stat()) is None


def test_ctrl_c_cancels_the_sync_as_it_does_cp(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="p/big", Body=payload(8 * CHUNK))
    hang_all_but_the_first_part(proxy, 60)
    # --no-resume: a temp file, not a kept partial, is what Ctrl-C must clean up.
    args = ["--no-resume", "--chunk-size", "64KiB", f"s3://{bucket}/p", str(tmp_path)]
    with (
        sigint_ignored(),
        spawn_cli("sync", "--endpoint-url", proxy.url, *args) as running,
    ):
        wait_for_a_temp_file(running, tmp_path)
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=60)
    assert running.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert os.listdir(tmp_path) == []
