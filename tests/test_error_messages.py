"""What ``errors.translate`` puts in a message: bounded, whatever a failure of the
transport carries (aiohttp quotes what it could not parse, object bytes included)."""

from __future__ import annotations

import aiohttp

from asyncdl.errors import RetryableError, translate


def test_a_transport_failure_quoting_kilobytes_gives_a_short_message() -> None:
    body = "\x00binary object bytes " * 500  # 10 KB, as aiohttp's "Bad status line" quotes
    for exc in (aiohttp.ClientPayloadError(body), RetryableError(body)):
        error = translate(exc, bucket="b", key="k", attempts=5)
        assert error.message.startswith("transfer failed after 5 attempts: ")
        assert len(error.message) < 400
        assert error.message.endswith("...")
        assert error.__cause__ is None  # the caller chains the whole exception


def test_a_short_cause_is_shown_whole() -> None:
    error = translate(RetryableError("body ended at byte 5, expected 9"), bucket="b", key="k")
    assert error.message == "transfer failed: body ended at byte 5, expected 9"
