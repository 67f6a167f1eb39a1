"""``results.finished``, the quick way a successful download's result is built, makes
the same frozen ``DownloadResult`` as its constructor."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from asyncdl import DownloadResult
from asyncdl.results import finished


def test_finished_is_the_constructors_result() -> None:
    values: dict[str, Any] = {
        "size": 1024,
        "etag": '"abc"',
        "strategy": "get-first",
        "requests": 2,
        "checksum": "CRC32:AAAAAA==",
        "verified": True,
        "unverified_reason": None,
        "reused_bytes": 7,
        "partial_discarded": "the object changed",
    }
    quick = finished("bucket", "key", Path("/tmp/x"), **values)
    built = DownloadResult(bucket="bucket", key="key", path=Path("/tmp/x"), **values)
    assert quick == built
    assert repr(quick) == repr(built)
    assert hash(quick) == hash(built)
    for field in dataclasses.fields(DownloadResult):
        assert getattr(quick, field.name) == getattr(built, field.name), field.name
    assert quick.error is None
    assert quick.skipped is False
    assert quick.ok


def test_finished_result_is_frozen() -> None:
    quick = finished(
        "b",
        "k",
        Path("p"),
        size=0,
        etag=None,
        strategy="head-first",
        requests=1,
        checksum=None,
        verified=False,
        unverified_reason="no checksum",
        reused_bytes=0,
        partial_discarded=None,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.size = 1  # type: ignore[misc]
