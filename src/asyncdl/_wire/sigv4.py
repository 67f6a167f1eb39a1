"""SigV4 for the lean path: what botocore's ``S3SigV4Auth`` computes, with all that is
fixed for one template (host, the captured headers, the query, the payload hash)
prepared once, and the signing key derived once a day.

botocore signs every request from scratch: it builds an ``HTTPHeaders`` (an
``email.message.Message``) of the headers to sign, splits the URL twice and runs
five HMACs, four of them for a key that changes once a day per region. A GET of the
lean path differs from its template only in the key, Range, If-Match, the date and
the session token, so only those are folded in per request. The result is the same,
byte for byte, as ``S3SigV4Auth(...).add_auth`` on the same request at the same
second (tests/wire/test_sigv4.py compares them).
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


class _DayMac:
    """HMAC-SHA256 (RFC 2104) under one day's signing key, its two padded key blocks
    hashed once: each signature then costs two copies of a hash state, not the setup
    of an HMAC object (a third of what ``hmac.new`` takes)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = key.ljust(_BLOCK, b"\0")  # a day's key is 32 bytes: never hashed first
        self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))

    def hexdigest(self, message: bytes) -> str:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


_BLOCK = hashlib.sha256().block_size


@lru_cache(maxsize=16)
def _day_mac(secret_key: str, date: str, region: str, service: str) -> _DayMac:
    return _DayMac(signing_key(secret_key, date, region, service))


class _Clock:
    """X-Amz-Date of the current second, formatted once per second."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        #: (second, its stamp): one attribute, so a stamp never goes with another second.
        self._last = (-1, "")

    def stamp_of(self, now: float | None) -> str:
        second = int(time.time() if now is None else now)
        last = self._last
        if last[0] == second:
            return last[1]
        stamp = time.strftime(_TIMESTAMP, time.gmtime(second))
        self._last = (second, stamp)
        return stamp


_CLOCK = _Clock()


#: A request shape's signed header lines and SignedHeaders list (``Signer._layout``).
_Layout = tuple[tuple[tuple[str, int], ...], str]
#: Request shapes kept per template: a handful is all the engine sends.
_MAX_LAYOUTS = 32


def _canonical_query(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{key}={value}" for key, value in sorted(pairs))


class Signer:
    """Signs the requests of one template: ``url_prefix + encoded key + url_suffix``,
    with ``headers`` (botocore's prepared headers, per-request ones left out)."""

    __slots__ = (
        "_fixed",
        "_layouts",
        "_path_prefix",
        "_path_suffix",
        "_payload",
        "_query",
        "_query_text",
        "scope",
    )

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
        self._query: list[tuple[str, str]] = []
        for pair in query.split("&") if query else ():
            name, _, value = pair.partition("=")
            self._query.append((name, value))
        fixed: dict[str, str] = {}
        for name, value in headers:
            lname = name.lower()
            if lname not in _NOT_SIGNED:
                fixed[lname] = _trim(value)
        fixed.setdefault("host", _host_from_url(url_prefix))
        fixed["x-amz-content-sha256"] = payload_hash
        self._fixed = fixed
        self._query_text = _canonical_query(self._query)
        self._layouts: dict[tuple[tuple[str, ...], bool], _Layout] = {}

    def _layout(self, extra: tuple[str, ...], token: bool) -> _Layout:
        """The signed headers of a request adding ``extra`` (and a session token or
        not), in order: each line as its text (index -1), or as ``name:`` and the index
        of its value among the request's own (``extra``'s, the date, the token); and
        the SignedHeaders list. The same for every request of that shape."""
        lines: dict[str, tuple[str, int]] = {
            name: (f"{name}:{value}", -1) for name, value in self._fixed.items()
        }
        names = [*extra, "x-amz-date", "x-amz-security-token"] if token else [*extra, "x-amz-date"]
        for index, name in enumerate(names):
            lname = name.lower()
            lines[lname] = (f"{lname}:", index)  # a later one wins, as in a dict
        ordered = sorted(lines)
        return tuple(lines[name] for name in ordered), ";".join(ordered)

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
        stamp = _CLOCK.stamp_of(now)
        added = {"X-Amz-Date": stamp}
        token = credentials.token
        if token:
            added["X-Amz-Security-Token"] = token
        shape = (tuple(extra), bool(token))
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[shape] = self._layout(*shape)
        lines, signed_names = layout
        values = [_trim(value) for value in extra.values()]
        values.append(stamp)
        if token:
            values.append(_trim(token))
        query = self._query_text
        if part_number is not None:
            query = _canonical_query([*self._query, ("partNumber", str(part_number))])
        canonical = "\n".join(
            (
                method,
                self._path_prefix + encoded_key + self._path_suffix,
                query,
                *[text if index < 0 else text + values[index] for text, index in lines],
                "",
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
        mac = _day_mac(credentials.secret_key, date, region, service)
        signature = mac.hexdigest(to_sign.encode())
        added["Authorization"] = (
            f"{_ALGORITHM} Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed_names}, Signature={signature}"
        )
        return added
