"""``cp -r`` and ``sync`` given listing entries no S3 sends (a Size of 10**30, none, a
Key missing): the object whose entry names it fails alone, saying what the listing
gave; an entry that names no key fails the listing, and ``sync --delete`` deletes
nothing after it. Against moto via the proxy, whose rule answers the listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncdl.testing.tcp_proxy import TcpProxy

from ..bulk.test_listing_entries_hostile import BODY, answering_listings, entry
from .test_listing_hostile import no_endpoint_in_env, run  # noqa: F401 - the fixture is autouse


@pytest.mark.parametrize("command", [["cp", "-r"], ["sync"], ["sync", "--dry-run"]])
def test_entries_no_object_can_be_made_of_fail_alone(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, command: list[str]
) -> None:
    for key in ("p/a", "p/b", "p/c"):
        s3.put_object(Bucket=bucket, Key=key, Body=BODY)
    proxy.rule = answering_listings(
        bucket, entry("p/a", "1" + "0" * 30), entry("p/b", None), entry("p/c", "5")
    )
    dest = tmp_path / "d"
    result = run(proxy, *command, f"s3://{bucket}/p/", str(dest))
    assert result.exit_code == 1, result.output
    assert f"s3://{bucket}/p/a: the listing gave it a Size of 1{'0' * 30}" in result.stderr
    assert f"s3://{bucket}/p/b: the listing gave it no Size" in result.stderr
    assert "unexpected" not in result.stderr
    if "--dry-run" in command:
        assert "(dryrun) download:" in result.stdout
        assert not dest.exists()
    else:
        assert sorted(path.name for path in dest.iterdir()) == ["c"]
        assert (dest / "c").read_bytes() == BODY


def test_sync_delete_after_an_entry_without_a_key_deletes_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for key in ("p/a", "p/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=BODY)
    dest = tmp_path / "d"
    first = run(proxy, "sync", "--delete", f"s3://{bucket}/p/", str(dest))
    assert first.exit_code == 0, first.output
    # p/b's entry has lost its Key: the listing cannot say b is gone.
    proxy.rule = answering_listings(bucket, entry("p/a", "5"), entry(None, "5"))
    result = run(proxy, "sync", "--delete", f"s3://{bucket}/p/", str(dest))
    assert result.exit_code == 1, result.output
    assert "the listing has an entry without a Key" in result.stderr
    assert "delete:" not in result.stdout
    assert sorted(path.name for path in dest.iterdir()) == ["a", "b"]


@pytest.mark.parametrize("json_lines", [False, True], ids=["lines", "json"])
def test_ls_of_an_entry_no_object_can_be_made_of_fails_saying_so(
    bucket: str, proxy: TcpProxy, json_lines: bool
) -> None:
    # ls shows what the listing gives: an entry it cannot show truthfully (no Size, one
    # no file can have) fails the listing with what it gave, not a KeyError.
    proxy.rule = answering_listings(bucket, entry("p/a", "5"), entry("p/b", None))
    flags = ["--json"] if json_lines else []
    result = run(proxy, "ls", "-r", *flags, f"s3://{bucket}/p/")
    assert result.exit_code == 1, result.output
    assert "p/b: the listing gave it no Size" in result.stderr
    assert "unexpected" not in result.stderr
