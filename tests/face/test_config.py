"""TransferConfig validation and the public surface."""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any

import pytest

import asyncdl
from asyncdl.config import GiB, KiB, MiB


def test_defaults() -> None:
    config = asyncdl.TransferConfig()
    assert config.chunk_size == 8 * MiB
    assert config.max_concurrency >= 1
    assert config.max_attempts >= 1


def test_frozen() -> None:
    config = asyncdl.TransferConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.chunk_size = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chunk_size", 64 * KiB - 1),
        ("chunk_size", 5 * GiB + 1),
        ("chunk_size", 0),
        ("chunk_size", 8.0 * MiB),
        ("chunk_size", True),
        ("max_concurrency", 0),
        ("max_concurrency", -3),
        ("max_attempts", 0),
        ("read_timeout", 0),
        ("read_timeout", math.inf),
        ("read_timeout", math.nan),
        ("connect_timeout", -1),
        ("write_size", 10),
        ("backoff_base", -0.5),
        ("fsync", "yes"),
    ],
)
def test_invalid_values_raise(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        asyncdl.TransferConfig(**{field: value})


def test_bounds_are_inclusive() -> None:
    asyncdl.TransferConfig(chunk_size=64 * KiB, max_concurrency=1, max_attempts=1)
    asyncdl.TransferConfig(chunk_size=5 * GiB)


def test_all_matches_public_names() -> None:
    public = {
        name
        for name in dir(asyncdl)  # vars() holds only the names used so far (they are lazy)
        if not name.startswith("_") and not isinstance(getattr(asyncdl, name), types.ModuleType)
    }
    assert sorted(asyncdl.__all__) == asyncdl.__all__
    assert set(asyncdl.__all__) == public


def test_error_tree() -> None:
    for cls in (
        asyncdl.ObjectNotFoundError,
        asyncdl.AccessDeniedError,
        asyncdl.ObjectChangedError,
        asyncdl.InvalidRequestError,
    ):
        assert issubclass(cls, asyncdl.DownloadError)
    assert issubclass(asyncdl.InvalidRequestError, ValueError)
    error = asyncdl.ObjectNotFoundError("no such object", bucket="b", key="k")
    assert (error.bucket, error.key) == ("b", "k")
    assert str(error) == "s3://b/k: no such object"
