"""SigV4 for the lean path: what botocore's ``S3SigV4Auth`` computes, with all that is
fixed for one template (host, the captured headers, the query, the payload hash)
prepared once, and the signing key derived once a day.

botocore signs every request from scratch: it builds an ``HTTPHeaders`` (an
``email.message.Message``) of the headers to sign, splits the URL twice and runs
five HMACs, four of them for a key that changes once a day per region. A GET of the
lean path differs from its template only in the key, Range, If-Match, the date and
the session token, so only those are folded in per request. The result is the same,
byte for byte, as ``S3SigV4Auth(...).add_auth`` on the same request at the same
second (tests/test_sigv4.py compares them).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from botocore.auth import SIGNED_HEADERS_BLACKLIST, _host_from_url

_ALGORITHM = "AWS4-HMAC-SHA256"
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
_NOT_SIGNED = frozenset(SIGNED_HEADERS_BLACKLIST)


def _trim(value: str) -> str:
    # SigV4's Trimall: no space around the value, runs of spaces made one.
    return " ".join(value.split())


@lru_cache(maxsize=16)
def signing_key(secret_key: str, date: str, region: str, service: str) -> bytes:
    """The day's key for one region and service: four HMACs, once a day, not per request."""
    key = f"AWS4{secret_key}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


class Signer:
    """Signs the requests of one template: ``url_prefix + encoded key + url_suffix``,
    with ``headers`` (botocore's prepared headers, per-request ones left out)."""

    __slots__ = ("_fixed", "_path_prefix", "_path_suffix", "_payload", "_query", "scope")

    def __init__(
        self,
        *,
        url_prefix: str,
        url_suffix: str,
        headers: tuple[tuple[str, str], ...],
        payload_hash: str,
        scope: tuple[str, str],
    ) -> None:
        #: (region, service) signed for.
        self.scope = scope
        self._payload = payload_hash
        # The key goes between prefix and suffix; neither holds part of the other's
        # section (the key is percent-encoded: no '?' of its own).
        origin = urlsplit(url_prefix)
        self._path_prefix = origin.path
        path_suffix, _, query = url_suffix.partition("?")
        self._path_suffix = path_suffix
        self._query = (
            [tuple(pair.partition("=")[::2]) for pair in query.split("&")] if query else []
        )
        fixed: dict[str, str] = {}
        for name, value in headers:
            lname = name.lower()
            if lname not in _NOT_SIGNED:
                fixed[lname] = _trim(value)
        fixed.setdefault("host", _host_from_url(url_prefix))
        fixed["x-amz-content-sha256"] = payload_hash
        self._fixed = fixed

    @property
    def payload_hash(self) -> str:
        return self._payload

    def sign(
        self,
        method: str,
        encoded_key: str,
        credentials: Any,
        *,
        extra: dict[str, str],
        part_number: int | None = None,
        now: float | None = None,
    ) -> dict[str, str]:
        """The headers signing adds (X-Amz-Date, X-Amz-Security-Token, Authorization)
        for a request carrying the template's headers plus ``extra`` (Range, If-Match)."""
        stamp = time.strftime(_TIMESTAMP, time.gmtime(now))
        added = {"X-Amz-Date": stamp}
        token = credentials.token
        if token:
            added["X-Amz-Security-Token"] = token
        signed = dict(self._fixed)
        for name, value in extra.items():
            signed[name.lower()] = _trim(value)
        signed["x-amz-date"] = stamp
        if token:
            signed["x-amz-security-token"] = _trim(token)
        names = sorted(signed)
        pairs = self._query
        if part_number is not None:
            pairs = [*pairs, ("partNumber", str(part_number))]
        query = "&".join(f"{key}={value}" for key, value in sorted(pairs))
        signed_names = ";".join(names)
        canonical = "\n".join(
            (
                method,
                self._path_prefix + encoded_key + self._path_suffix,
                query,
                "\n".join(f"{name}:{signed[name]}" for name in names) + "\n",
                signed_names,
                self._payload,
            )
        )
        date = stamp[:8]
        region, service = self.scope
        scope = f"{date}/{region}/{service}/aws4_request"
        to_sign = "\n".join(
            (_ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        key = signing_key(credentials.secret_key, date, region, service)
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        added["Authorization"] = (
            f"{_ALGORITHM} Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed_names}, Signature={signature}"
        )
        return added
