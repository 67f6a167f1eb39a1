"""The records of written files, and the walk and removals of ``sync --delete``, in a
destination others can write to: directories swapped for links mid-walk, sidecar
records asyncdl never wrote, links and FIFOs where its own files go, records and
journal lines of deeply nested JSON. Real files and links on a real file system."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdl._files import file_records, journal
from asyncdl._files.file_records import SIDECAR_DIR, XATTR, EtagStore
from asyncdl._files.stale import Stale, remove_stale, stale_files
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK

#: Another user's id: the tests run as root, which may give a file away.
OTHER_UID = 1001


@pytest.fixture(params=["xattr", "sidecar"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    file_records._force_sidecar = request.param == "sidecar"
    try:
        yield request.param
    finally:
        file_records._force_sidecar = False


def everything(store: EtagStore, bucket: str = "b", prefix: str = "") -> Iterator[Stale]:
    return stale_files(store, lambda _: False, lambda _: True, bucket=bucket, prefix=prefix)


def written(store: EtagStore, path: Path, data: bytes, key: str) -> None:
    """``path`` as asyncdl writes and records it (key ``key`` of bucket ``b``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    store.record(path, '"e"', bucket="b", key=key)


def give_away(path: Path) -> None:
    """Make ``path`` not this user's alone: another user's (as root), else writable by
    others (a user cannot give a file away; either way it is not ours)."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
    else:
        path.chmod(0o777 if path.is_dir() else 0o666)


# -- 1: a directory swapped for a link while sync --delete works -----------------------


def test_a_directory_swapped_for_a_link_mid_walk_takes_nothing_outside(
    backend: str, tmp_path: Path
) -> None:
    root, home = tmp_path / "shared", tmp_path / "home"
    home.mkdir()
    store = EtagStore(root)
    # A file asyncdl wrote at att/sub/thesis.pdf, then moved out of the synced
    # directory (its xattr, or its sidecar line, still names att/sub/thesis.pdf).
    written(store, root / "att/sub/thesis.pdf", b"three years of work", "att/sub/thesis.pdf")
    os.rename(root / "att/sub/thesis.pdf", home / "thesis.pdf")
    (root / "att/sub/a0").write_bytes(b"first, in the walk's order")
    (root / "att/sub/thesis.pdf").write_bytes(b"decoy")
    store.close()

    store = EtagStore(root)
    removed: list[str] = []
    try:
        for stale in everything(store):
            if stale.path == root / "att/sub/a0":
                # The walk listed att/sub; now it becomes a link to the user's home.
                os.rename(root / "att/sub", root / "att/subreal")
                (root / "att/sub").symlink_to(home, target_is_directory=True)
            if stale.kept_because is None:
                try:
                    remove_stale(store, stale)
                except OSError:
                    continue
                removed.append(str(stale.path))
    finally:
        store.close()

    assert (home / "thesis.pdf").read_bytes() == b"three years of work", removed
    assert removed == []


def test_a_directory_swapped_for_a_link_after_the_walk_stops_the_removal(
    backend: str, tmp_path: Path
) -> None:
    root, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    store = EtagStore(root)
    written(store, root / "sub/x.bin", b"vouched for", "sub/x.bin")
    store.close()
    store = EtagStore(root)
    try:
        (stale,) = everything(store)
        assert stale.kept_because is None
        # The same file, its directory moved out of the synced one and linked back.
        os.rename(root / "sub", elsewhere)
        (root / "sub").symlink_to(elsewhere, target_is_directory=True)
        with pytest.raises(OSError, match="changed since it was checked"):
            remove_stale(store, stale)
    finally:
        store.close()
    assert (elsewhere / "x.bin").read_bytes() == b"vouched for"


# -- 2: sidecar records asyncdl never wrote --------------------------------------------


def forged_line(root: Path, name: str) -> str:
    """A sidecar line as asyncdl writes it, for the file ``name`` under ``root`` as it
    is (its size and mtime are anyone's to see)."""
    st = (root / name).stat()
    line = {"path": name, "etag": "", "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return json.dumps({**line, "bucket": "b", "key": name, "root": root.stat().st_ino}) + "\n"


@pytest.mark.parametrize("planted", ["directory", "file", "shared directory", "shared file"])
def test_a_sidecar_not_ours_alone_vouches_for_nothing(planted: str, tmp_path: Path) -> None:
    (tmp_path / "report.txt").write_bytes(b"my quarterly report")  # never from S3
    sidecar = tmp_path / SIDECAR_DIR
    sidecar.mkdir(mode=0o700)
    (sidecar / "x.jsonl").write_text(forged_line(tmp_path, "report.txt"))
    (sidecar / "x.jsonl").chmod(0o600)
    # The same line in a sidecar of ours vouches (what is tested is whose it is).
    store = EtagStore(tmp_path)
    assert [s.kept_because for s in everything(store)] == [None]
    store.close()

    if planted == "directory":
        give_away(sidecar)
    elif planted == "file":
        give_away(sidecar / "x.jsonl")
    elif planted == "shared directory":
        sidecar.chmod(0o777)
    else:
        (sidecar / "x.jsonl").chmod(0o622)

    store = EtagStore(tmp_path)
    try:
        assert [s.kept_because for s in everything(store)] == ["not written by asyncdl"]
        assert store.recorded(tmp_path / "report.txt", (tmp_path / "report.txt").stat()) is None
    finally:
        store.close()


# -- 3: links and FIFOs where asyncdl's own files go -----------------------------------


def sidecar_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}.jsonl"


def test_a_record_is_never_appended_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("# my shell startup\n")
    root = tmp_path / "data"
    (root / SIDECAR_DIR).mkdir(parents=True, mode=0o700)
    (root / SIDECAR_DIR / sidecar_name()).symlink_to(victim)
    (root / "a.txt").write_bytes(b"a")
    file_records._force_sidecar = True
    store = EtagStore(root)
    try:
        with pytest.raises(OSError, match="Too many levels of symbolic links"):
            store.record(root / "a.txt", '"e"', bucket="b", key="a.txt")
    finally:
        store.close()
        file_records._force_sidecar = False
    assert victim.read_text() == "# my shell startup\n"


def test_a_sidecar_directory_is_made_private(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a")
    file_records._force_sidecar = True
    store = EtagStore(tmp_path)
    try:
        store.record(tmp_path / "a.txt", '"e"', bucket="b", key="a.txt")
    finally:
        store.close()
        file_records._force_sidecar = False
    assert (tmp_path / SIDECAR_DIR).stat().st_mode & 0o777 == 0o700
    (line,) = (tmp_path / SIDECAR_DIR).iterdir()
    assert line.stat().st_mode & 0o777 == 0o600


def test_records_are_never_read_through_a_link_or_from_a_fifo(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "report.txt").write_bytes(b"mine")
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(forged_line(root, "report.txt"))
    elsewhere.chmod(0o600)
    sidecar = root / SIDECAR_DIR
    sidecar.mkdir(mode=0o700)
    (sidecar / "link.jsonl").symlink_to(elsewhere)
    os.mkfifo(sidecar / "fifo.jsonl", 0o600)
    store = EtagStore(root)
    done = threading.Event()
    found: list[str | None] = []

    def scan() -> None:
        found.extend(s.kept_because for s in everything(store))
        done.set()

    threading.Thread(target=scan, daemon=True).start()
    try:
        assert done.wait(10), "the scan waits on the FIFO"
        assert found == ["not written by asyncdl"]
    finally:
        if not done.is_set():  # a reader stuck in open(): a FIFO waits for a writer
            os.close(os.open(sidecar / "fifo.jsonl", os.O_WRONLY))
            done.wait(10)
        store.close()


def test_what_is_read_of_a_sidecar_is_bounded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(name.encode())
    sidecar = tmp_path / SIDECAR_DIR
    sidecar.mkdir(mode=0o700)
    long_line = b'{"path": "' + b"x" * (100 * 1024) + b'"}\n'
    body = forged_line(tmp_path, "a").encode() + long_line + forged_line(tmp_path, "b").encode()
    (sidecar / "x.jsonl").write_bytes(body)
    (sidecar / "x.jsonl").chmod(0o600)
    # Lines past the budget are not read: their files are not vouched for.
    monkeypatch.setattr(file_records, "MAX_SIDECAR_BYTES", len(body) - 10)
    store = EtagStore(tmp_path)
    try:
        kept = {s.path.name: s.kept_because for s in everything(store)}
    finally:
        store.close()
    assert kept == {"a": None, "b": "not written by asyncdl"}


def test_a_dask_run_journal_is_never_appended_through_a_link(tmp_path: Path) -> None:
    sweep = pytest.importorskip("asyncdl.dask._sweep")
    victim = tmp_path / "bashrc"
    victim.write_text("# mine\n")
    dest = tmp_path / "dest"
    (dest / sweep.JOURNAL_DIR).mkdir(parents=True, mode=0o700)
    name = f"0abc.{socket.gethostname()}-{os.getpid()}.dirs"
    (dest / sweep.JOURNAL_DIR / name).symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        sweep.record_dirs(dest, "0abc", [dest / "sub"])
    assert victim.read_text() == "# mine\n"


def test_a_dask_run_journal_directory_not_ours_is_not_written_into(tmp_path: Path) -> None:
    sweep = pytest.importorskip("asyncdl.dask._sweep")
    journals = tmp_path / sweep.JOURNAL_DIR
    journals.mkdir(mode=0o700)
    give_away(journals)
    with pytest.raises(OSError, match="not asyncdl's own"):
        sweep.record_dirs(tmp_path, "0abc", [tmp_path / "sub"])
    assert os.listdir(journals) == []


# -- 4, 5: deeply nested JSON ----------------------------------------------------------

BOMB = b"[" * 100_000


def test_a_sidecar_line_of_nested_json_is_no_record(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    sidecar = tmp_path / SIDECAR_DIR
    sidecar.mkdir(mode=0o700)
    (sidecar / "x.jsonl").write_bytes(BOMB[:60_000] + b"\n" + forged_line(tmp_path, "a").encode())
    (sidecar / "x.jsonl").chmod(0o600)
    store = EtagStore(tmp_path)
    try:
        assert [s.kept_because for s in everything(store)] == [None]
    finally:
        store.close()


def test_an_xattr_of_nested_json_is_no_record(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_bytes(b"user data")
    os.setxattr(tmp_path / "mine.txt", XATTR, b"[" * 3000)
    store = EtagStore(tmp_path)
    try:
        assert store.records(tmp_path / "mine.txt") == []
        assert [s.kept_because for s in everything(store)] == ["not written by asyncdl"]
    finally:
        store.close()


def test_a_journal_line_of_nested_json_is_damage() -> None:
    text = b"[" * 50_000
    found = journal.parse(b"%s\t%08x\n" % (text, zlib.crc32(text)))
    assert found.damaged == "its journal is damaged (a line of the journal is not JSON)"
    assert found.header is None


# -- 7: a record vouches only in the directory it was written in -----------------------


def test_a_file_copied_into_another_synced_directory_is_not_vouched_for(
    backend: str, tmp_path: Path
) -> None:
    data, mirror = tmp_path / "data", tmp_path / "mirror"
    store = EtagStore(data)
    written(store, data / "report.csv", b"q1,q2\n", "report.csv")
    store.close()
    mirror.mkdir()
    shutil.copy2(data / "report.csv", mirror / "report.csv")  # as cp -a: xattrs too
    if backend == "sidecar":  # the records copied along (cp -a data/. mirror)
        shutil.copytree(data / SIDECAR_DIR, mirror / SIDECAR_DIR)
    store = EtagStore(mirror)
    try:
        (stale,) = everything(store)
        assert stale.kept_because is not None
    finally:
        store.close()


def bomb_journal(target: Path) -> None:
    """A journal at ``target``'s partial whose one line passes its CRC and nests too
    deep to parse (a CRC is no signature: anyone can write one)."""
    text = b"[" * 50_000
    (target.parent / f".{target.name}.asyncdl-journal").write_bytes(
        b"%s\t%08x\n" % (text, zlib.crc32(text))
    )
    (target.parent / f".{target.name}.asyncdl-partial").write_bytes(bytes(10))


def test_clean_takes_a_journal_of_nested_json_for_damage_and_goes_on(tmp_path: Path) -> None:
    bomb_journal(tmp_path / "big.bin")
    other = tmp_path / ".aaa.asyncdl-partial"
    other.write_bytes(b"old leftover")
    hour_ago = time.time() - 3600
    for path in tmp_path.iterdir():
        os.utime(path, (hour_ago, hour_ago))

    result = CliRunner().invoke(cli, ["clean", str(tmp_path)])

    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    assert os.listdir(tmp_path) == []


def test_a_download_over_a_journal_of_nested_json_starts_over(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    body = os.urandom(3 * CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="p/big.bin", Body=body)
    bomb_journal(tmp_path / "big.bin")

    result = CliRunner().invoke(
        cli,
        [
            "cp",
            "--endpoint-url",
            proxy.url,
            "--chunk-size",
            str(CHUNK),
            f"s3://{bucket}/p/big.bin",
            str(tmp_path / "big.bin"),
        ],
    )

    assert result.exit_code == 0, result.output
    assert (tmp_path / "big.bin").read_bytes() == body
    assert os.listdir(tmp_path) == ["big.bin"]
