"""A record too big for its file's xattr goes to the sidecar: ext4 gives a file about
4 KiB of xattr space (``setxattr`` fails with ENOSPC past it) and Linux refuses a value
over its size limit with E2BIG. A legitimate key reaches that size: JSON escapes each
character past ASCII as ``\\uXXXX``, in the record's key and in its path.
``asyncdl sync`` through the CLI against moto via the proxy; ``EtagStore`` directly."""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdl._files import file_records
from asyncdl._files.file_records import SIDECAR_DIR, XATTR, EtagStore
from asyncdl.testing.tcp_proxy import TcpProxy

from ..cli.test_sync import no_endpoint_in_env, sync  # noqa: F401 - the fixture is autouse

#: 4 segments of 84 CJK characters: 1013 bytes of UTF-8, under S3's 1024-byte limit
#: on a key (and each segment, 252 bytes, under a file name's 255), and over 4 KiB
#: as a record, escaped twice.
SEGMENTS = ["漢" * 84] * 4
KEY = "p/" + "/".join(SEGMENTS)
RELATIVE = "/".join(SEGMENTS)


def gets(proxy: TcpProxy) -> list[str]:
    return [r.path for r in proxy.requests if "list-type=2" not in r.path]


def complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncdl logged about records it could not write (in-process, its warnings
    go to pytest's log capture, not to the CLI's stderr)."""
    return [r.getMessage() for r in caplog.records if "could not record" in r.getMessage()]


def sidecar_records(dest: Path) -> list[dict[str, Any]]:
    sidecar = dest / SIDECAR_DIR
    if not sidecar.exists():
        return []
    return [
        json.loads(line)
        for name in sorted(os.listdir(sidecar))
        for line in (sidecar / name).read_text().splitlines()
    ]


def xattr_of(path: Path) -> bytes | None:
    try:
        return os.getxattr(path, XATTR)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
        return None


def takes_an_xattr_of(directory: Path, size: int) -> bool:
    """Whether the file system under ``directory`` keeps a user xattr of ``size`` bytes
    (ext4 does not: a file has one 4 KiB block for all its xattrs)."""
    probe = directory / "probe"
    probe.touch()
    try:
        os.setxattr(probe, XATTR, b"x" * size)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.E2BIG):
            raise
        return False
    finally:
        probe.unlink()
    return True


def test_a_cjk_key_too_big_for_the_xattr_is_recorded_in_the_sidecar(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncdl")
    assert len(KEY.encode()) <= 1024
    s3.put_object(Bucket=bucket, Key=KEY, Body=b"hello")
    dest = tmp_path / "dest"

    first = sync(proxy, f"s3://{bucket}/p/", str(dest))

    assert first.exit_code == 0, first.stderr
    assert complaints(caplog) == []
    target = dest / RELATIVE
    assert target.read_bytes() == b"hello"
    assert len(gets(proxy)) == 1
    in_sidecar = [r for r in sidecar_records(dest) if r["path"] == RELATIVE]
    raw = xattr_of(target)
    in_xattr = [] if raw is None else [json.loads(raw)]
    assert [r["key"] for r in in_xattr + in_sidecar] == [KEY]
    # In the sidecar where the xattr has no room for it (ext4); where it has (XFS,
    # btrfs), in the xattr. The same fields in either: the same length.
    roomy = takes_an_xattr_of(tmp_path, len(json.dumps((in_xattr + in_sidecar)[0]).encode()))
    assert (len(in_xattr), len(in_sidecar)) == ((1, 0) if roomy else (0, 1))

    proxy.reset_stats()
    again = sync(proxy, f"s3://{bucket}/p/", str(dest))

    assert again.exit_code == 0, again.stderr
    assert again.stdout == ""
    assert complaints(caplog) == []
    assert gets(proxy) == []

    # The record vouches for the file: gone from S3, it is deleted.
    s3.delete_object(Bucket=bucket, Key=KEY)
    removed = sync(proxy, "--delete", f"s3://{bucket}/p/", str(dest))

    assert removed.exit_code == 0, removed.stderr
    assert removed.stdout == f"delete: {target}\n"
    assert not target.exists()


def refusing(code: int, real: Callable[..., None]) -> Callable[..., None]:
    """``os.setxattr`` on a file system that refuses a value over 4 KiB with ``code``."""

    def setxattr(path: Any, attribute: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        if attribute == XATTR and len(value) > 4096:
            raise OSError(code, os.strerror(code))
        real(path, attribute, value, *args, **kwargs)

    return setxattr


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.E2BIG])
def test_a_record_that_does_not_fit_replaces_the_files_xattr_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    monkeypatch.setattr(os, "setxattr", refusing(code, os.setxattr))
    target = tmp_path / "f"
    target.write_bytes(b"hello")
    store = EtagStore(tmp_path)
    store.record(target, '"small"', bucket="bk", key="p/f")
    assert xattr_of(target) is not None
    hostile = "e" * 6000  # an ETag a hostile server sent

    # The file as it is, recorded again at another ETag: that record does not fit.
    store.record(target, hostile, bucket="bk", key="p/f")
    store.close()

    assert xattr_of(target) is None  # the old record cannot contradict the new one
    st = target.stat()
    for reader in (store, EtagStore(tmp_path)):
        assert reader.recorded(target, st) == hostile
        assert [r.etag for r in reader.records(target)] == [hostile]


def test_a_record_over_what_a_reader_takes_from_an_xattr_goes_to_the_sidecar(
    tmp_path: Path,
) -> None:
    # A file system that takes a 64 KiB value (XFS) must not get one no reader takes.
    target = tmp_path / "f"
    target.write_bytes(b"hello")
    hostile = "e" * (file_records.MAX_XATTR + 1)
    store = EtagStore(tmp_path)

    store.record(target, hostile, bucket="bk", key="p/f")
    store.close()

    assert xattr_of(target) is None
    assert EtagStore(tmp_path).recorded(target, target.stat()) == hostile
