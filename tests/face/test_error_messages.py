"""What ``errors.translate`` puts in a message: bounded, whatever a failure of the
transport carries (aiohttp quotes what it could not parse, object bytes included)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.http_exceptions import BadHttpMessage, TransferEncodingError
from botocore.exceptions import ClientError

from asyncdl.errors import RetryableError, is_retryable, scrubbed, translate


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


_SECRET = "GIVENSECRET"


@pytest.mark.parametrize(
    "text",
    [
        f"400, message:\n  GET /obj?X-Amz-Signature={_SECRET}&X-Amz-Date=1 HTTP/1.1\r",
        f"Cannot connect to https://user:{_SECRET}@host:8443/p?X-Amz-Credential={_SECRET}",
        f"400, message:\n  X-Amz-Security-Token: {_SECRET}\r",
        f"Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, Signature={_SECRET}",
        f"bad line 'Signature={_SECRET}' and 'x-amz-security-token={_SECRET}'",
        f"Cookie: session={_SECRET}; other=1",
    ],
)
def test_a_message_built_from_an_exception_shows_no_credential(text: str) -> None:
    """What a peer quotes back (a request line, a header, a URL) loses its secrets."""
    shown = scrubbed(text)
    assert _SECRET not in shown, shown
    assert "\n" not in shown
    assert "\r" not in shown
    for exc in (aiohttp.ClientPayloadError(text), TransferEncodingError(text), OSError(text)):
        assert _SECRET not in str(translate(exc, bucket="b", key="k"))
    answer = {"Error": {"Code": "X", "Message": text}, "ResponseMetadata": {"HTTPStatusCode": 500}}
    assert _SECRET not in str(translate(ClientError(answer, "GetObject"), bucket="b", key="k"))


def test_scrubbing_keeps_what_holds_no_credential() -> None:
    assert scrubbed("no such file: 'what?.txt'") == "no such file: 'what?.txt'"
    assert scrubbed("http://host:80/a/b?x=1#f") == "http://host:80/a/b"
    assert scrubbed("x" * 1000).endswith("...")
    assert len(scrubbed("x" * 1000)) == 300


def test_a_broken_framing_is_retried_as_a_cut_connection() -> None:
    """aiohttp's pure-Python parser raises these from a body as they are."""
    assert is_retryable(TransferEncodingError("zz"))
    assert is_retryable(BadHttpMessage("zz"))
    error = translate(TransferEncodingError("zz"), bucket="b", key="k")
    assert error.message.startswith("transfer failed: ")


def test_a_credential_header_broken_without_its_colon_is_hidden() -> None:
    # aiohttp's pure-Python parser quotes a malformed header line as it came: an echoed
    # request's "X-Amz-Security-Token TOKEN" (a space where the colon was).
    shown = scrubbed("Invalid HTTP header: b'X-Amz-Security-Token TOKSECRET\\x01'")
    assert "TOKSECRET" not in shown
    assert "Authorization" in scrubbed("b'Authorization AWS4-HMAC-SHA256 SECRET'")
    assert "SECRET" not in scrubbed("b'Authorization AWS4-HMAC-SHA256 SECRET'")
    # Prose that names such a header keeps its words.
    said = "The authorization header is malformed"
    assert scrubbed(said) == said
