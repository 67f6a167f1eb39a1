"""The lean path's signer signs exactly as botocore's S3SigV4Auth (pure logic: the
clock is fixed, nothing is sent)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from botocore.auth import EMPTY_SHA256_HASH, UNSIGNED_PAYLOAD, S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.utils import percent_encode

from asyncdl._wire.sigv4 import Signer, signing_key

from .test_signed_get import KEYS

NOW = datetime.datetime(2026, 12, 1, 23, 59, 58, 999_000, tzinfo=datetime.UTC)
TEMPLATE_HEADERS = (
    ("User-Agent", "Botocore/1.0 md/x  spaced   value"),
    ("amz-sdk-request", "attempt=1; max=1"),
    ("x-amz-checksum-mode", "ENABLED"),
    ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
    ("x-amz-server-side-encryption-customer-key", "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U="),
    ("X-Amz-Request-Payer", "  requester "),
    ("x-amz-expected-bucket-owner", "111122223333"),
)
PREFIXES = [
    "http://127.0.0.1:9000/bucket/",
    "https://bucket.s3.eu-west-1.amazonaws.com/",
    "https://s3.amazonaws.com:443/bucket/",
    "http://[::1]:8080/bucket/",
]


def botocore_headers(
    url: str,
    headers: dict[str, str],
    credentials: Credentials,
    region: str,
    *,
    unsigned_payload: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: NOW)
    request = AWSRequest(method="GET", url=url, headers=headers)
    if unsigned_payload:
        request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return dict(request.headers.items())


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("token", [None, "session token/with+odd=chars"])
def test_signs_as_botocore(
    prefix: str, key: str, token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    encoded = percent_encode(key, safe="/~")
    extra = {"Range": "bytes=0-8388607", "If-Match": '"0123456789abcdef0123456789abcdef-3"'}
    expected = botocore_headers(
        prefix + encoded,
        {**dict(TEMPLATE_HEADERS), **extra},
        credentials,
        "eu-west-1",
        unsigned_payload=False,
        monkeypatch=monkeypatch,
    )
    signer = Signer(
        url_prefix=prefix,
        url_suffix="",
        headers=TEMPLATE_HEADERS,
        payload_hash=EMPTY_SHA256_HASH,
        scope=("eu-west-1", "s3"),
    )
    added = signer.sign("GET", encoded, credentials, extra=extra, now=NOW.timestamp())
    assert expected["X-Amz-Content-SHA256"] == signer.payload_hash
    assert added == {
        name: expected[name]
        for name in ("X-Amz-Date", "X-Amz-Security-Token", "Authorization")
        if name in expected
    }


@pytest.mark.parametrize(
    ("suffix", "part_number"),
    [
        ("?versionId=3sL4kqtJlcpXroDTDmJ%2Bd-Q6Yb3ZKnHf", None),
        ("", 7),
        ("?versionId=v%2F1&x-id=GetObject", 12),
    ],
)
@pytest.mark.parametrize("unsigned_payload", [False, True])
def test_signs_queries_and_payload_modes_as_botocore(
    suffix: str, part_number: int | None, unsigned_payload: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = Credentials("AKID", "secret", None)
    prefix = "https://bucket.s3.us-east-2.amazonaws.com/"
    url = prefix + "dir/k" + suffix
    if part_number is not None:
        url += f"{'&' if '?' in url else '?'}partNumber={part_number}"
    expected = botocore_headers(
        url,
        {"User-Agent": "ua"},
        credentials,
        "us-east-2",
        unsigned_payload=unsigned_payload,
        monkeypatch=monkeypatch,
    )
    payload = UNSIGNED_PAYLOAD if unsigned_payload else EMPTY_SHA256_HASH
    assert expected["X-Amz-Content-SHA256"] == payload
    signer = Signer(
        url_prefix=prefix,
        url_suffix=suffix,
        headers=(("User-Agent", "ua"),),
        payload_hash=payload,
        scope=("us-east-2", "s3"),
    )
    added = signer.sign(
        "GET", "dir/k", credentials, extra={}, part_number=part_number, now=NOW.timestamp()
    )
    assert added["Authorization"] == expected["Authorization"]
    assert added["X-Amz-Date"] == expected["X-Amz-Date"]


def test_the_signing_key_is_the_day_s_key() -> None:
    # AWS's documented example (SigV4 "deriving the signing key").
    key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_a_refreshed_secret_gets_its_own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    signer = Signer(
        url_prefix="http://h/b/",
        url_suffix="",
        headers=(),
        payload_hash=EMPTY_SHA256_HASH,
        scope=("us-east-1", "s3"),
    )
    seen: list[Any] = []
    for secret in ("first", "second"):
        credentials = Credentials("AKID", secret, None)
        added = signer.sign("GET", "k", credentials, extra={}, now=NOW.timestamp())
        expected = botocore_headers(
            "http://h/b/k",
            {},
            credentials,
            "us-east-1",
            unsigned_payload=False,
            monkeypatch=monkeypatch,
        )
        assert added["Authorization"] == expected["Authorization"]
        seen.append(added["Authorization"])
    assert seen[0] != seen[1]
