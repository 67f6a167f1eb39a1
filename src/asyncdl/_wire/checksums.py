"""S3 checksums: what a response promises, and computing what the bytes say.

S3 keeps one checksum per object, of one of five algorithms. Of a FULL_OBJECT
checksum, the CRCs (CRC32, CRC32C, CRC64NVME) combine: each part's CRC is
computed while it streams and the parts are folded together in object order with
CRC combine math (awscrt, in C), so a parallel download is verified without a
second pass over the file. SHA1 and SHA256 do not combine: the finished file is
hashed once. A COMPOSITE checksum (``...-N``) is a checksum of the upload's part
checksums; it is checked along the upload's part boundaries (PartNumber GETs): each
part's checksum from its bytes, then the algorithm over their concatenation.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Preference order when a response carries more than one.
ALGORITHMS = ("CRC64NVME", "CRC32C", "CRC32", "SHA256", "SHA1")
CRC_ALGORITHMS = frozenset({"CRC64NVME", "CRC32C", "CRC32"})

_Crc = Callable[[bytes, int], int]
_Combine = Callable[[int, int, int], int]
#: Bytes of each CRC's value.
_CRC_BYTES = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8}


@functools.cache
def _crcs() -> dict[str, tuple[_Crc, _Combine]]:
    """Each CRC's function and its combine math. Loaded when first asked: awscrt's C
    extension takes about 30 ms to import, most of what a URL command that meets no
    checksum would add to its start-up (the S3 commands load it with botocore anyway)."""
    from awscrt import checksums as crt  # noqa: PLC0415

    crc32: _Crc
    try:
        # ISA-L's CRC32 (the zlib polynomial, S3's CRC32) runs at tens of GB/s where
        # awscrt's runs at about 3: the difference between a CRC32 check costing a third
        # of a large download's CPU and costing a few percent. Where no wheel installs
        # it, awscrt computes the same values.
        from isal.isal_zlib import crc32  # noqa: PLC0415
    except ImportError:  # pragma: no cover - depends on the platform
        crc32 = crt.crc32
    return {
        "CRC32": (crc32, crt.combine_crc32),
        "CRC32C": (crt.crc32c, crt.combine_crc32c),
        "CRC64NVME": (crt.crc64nvme, crt.combine_crc64nvme),
    }


_SHA = {"SHA1": "sha1", "SHA256": "sha256"}
_COMPOSITE = re.compile(r"(.+)-(\d+)")


@dataclass(frozen=True, slots=True)
class ExpectedChecksum:
    """A checksum S3 (or the caller) says the object has."""

    algorithm: str
    #: Base64, as S3 sends it, without a composite ``-N`` suffix.
    value: str
    #: The number of upload parts of a COMPOSITE checksum; ``None`` for FULL_OBJECT
    #: (0: COMPOSITE, count unsaid).
    parts: int | None = None
    #: The type went unsaid and was guessed COMPOSITE from a multipart ETag: the value
    #: may still be a FULL_OBJECT one, so either reading may confirm the bytes.
    maybe_full: bool = False

    def __str__(self) -> str:
        suffix = f"-{self.parts}" if self.parts else ""
        return f"{self.algorithm}:{self.value}{suffix}"

    def as_full(self) -> ExpectedChecksum:
        """The same value read as a FULL_OBJECT checksum."""
        return ExpectedChecksum(self.algorithm, self.value)

    @property
    def composite(self) -> bool:
        return self.parts is not None


def parse_checksum(text: str) -> ExpectedChecksum:
    """Parse a caller-supplied ``"ALGORITHM:base64"`` (a ``-N`` suffix marks COMPOSITE)."""
    algorithm, sep, value = text.partition(":")
    algorithm = algorithm.strip().upper()
    if not sep or algorithm not in ALGORITHMS:
        raise ValueError(f"checksum must look like 'CRC64NVME:base64', one of {ALGORITHMS}")
    checksum = _make(algorithm, value.strip(), None)
    # A value of the wrong length would only fail later, as a mismatch of good bytes.
    try:
        length = len(base64.b64decode(checksum.value, validate=True))
    except binascii.Error:
        raise ValueError(f"{algorithm} checksum {checksum.value!r} is not base64") from None
    expected = (
        _CRC_BYTES[algorithm]
        if algorithm in _CRC_BYTES
        else hashlib.new(_SHA[algorithm]).digest_size
    )
    if length != expected:
        raise ValueError(
            f"a {algorithm} checksum is {expected} bytes (base64), {checksum.value!r} is {length}"
        )
    return checksum


def from_headers(headers: Mapping[str, str], etag: str | None) -> ExpectedChecksum | None:
    """The checksum of a response's (lower-cased) HTTP headers.

    ``etag=None`` reads it as an upload part's: its own value, whatever the object's type.
    """
    return _first(headers, _HEADER_NAMES, "x-amz-checksum-type", etag)


def from_botocore(response: Mapping[str, Any], etag: str | None) -> ExpectedChecksum | None:
    """The checksum of a parsed botocore HEAD/GET response (``ChecksumCRC32``...);
    ``etag=None`` as in :func:`from_headers`."""
    return _first(response, _BOTOCORE_NAMES, "ChecksumType", etag)


#: Each algorithm, and the name that carries its checksum, in ``ALGORITHMS`` order:
#: made once, not per response (a GET's headers are looked at for every object).
_HEADER_NAMES = tuple((name, f"x-amz-checksum-{name.lower()}") for name in ALGORITHMS)
_BOTOCORE_NAMES = tuple((name, f"Checksum{name}") for name in ALGORITHMS)


def _first(
    found: Mapping[str, Any], names: tuple[tuple[str, str], ...], type_name: str, etag: str | None
) -> ExpectedChecksum | None:
    """The response's checksum, in :data:`ALGORITHMS` order of preference."""
    for algorithm, name in names:
        value = found.get(name)
        if value:
            checksum_type = found.get(type_name) if etag is not None else None
            return _make(algorithm, value, checksum_type, etag)
    return None


def _make(
    algorithm: str, value: str, checksum_type: str | None, etag: str | None = None
) -> ExpectedChecksum:
    match = _COMPOSITE.fullmatch(value)
    if match is not None:
        return ExpectedChecksum(algorithm, match[1], int(match[2]))
    if checksum_type is None and etag is not None and _COMPOSITE.fullmatch(etag.strip('"')):
        # A multipart object whose checksum type went unsaid (moto's HEAD omits it):
        # its checksum may be COMPOSITE, so it must not be checked as FULL_OBJECT.
        parts = int(etag.strip('"').rsplit("-", 1)[1])
        return ExpectedChecksum(algorithm, value, parts, maybe_full=True)
    if checksum_type == "COMPOSITE":
        return ExpectedChecksum(algorithm, value, 0)
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError(f"{algorithm} checksum {value!r} is not base64") from None
    return ExpectedChecksum(algorithm, value)


def raw_crc(algorithm: str, crc: int) -> bytes:
    """A CRC as the big-endian bytes S3 base64-encodes (and concatenates for a COMPOSITE)."""
    return crc.to_bytes(_CRC_BYTES[algorithm], "big")


def composite_of(algorithm: str, part_checksums: list[bytes]) -> str:
    """S3's COMPOSITE checksum: the algorithm over the concatenated raw part checksums."""
    joined = b"".join(part_checksums)
    if algorithm in _CRC_BYTES:
        return encode_crc(algorithm, crc_function(algorithm)(joined, 0))
    return base64.b64encode(sha_of(algorithm, joined).digest()).decode("ascii")


def crc_function(algorithm: str) -> Callable[[bytes, int], int]:
    return _crcs()[algorithm][0]


def combine_function(algorithm: str) -> Callable[[int, int, int], int]:
    """The CRC of two runs of bytes from theirs and the second's length."""
    return _crcs()[algorithm][1]


#: The CRCs :func:`every_crc` runs, in its tuple's order.
SPECULATED = ("CRC32", "CRC32C", "CRC64NVME")
SpeculatedCrcs = tuple[int, int, int]


def every_crc(data: bytes, previous: SpeculatedCrcs | int) -> SpeculatedCrcs:
    """The running CRC32, CRC32C and CRC64NVME of bytes whose checksum's algorithm is
    not known yet (a HEAD will tell): the three together cost about one SHA256 pass
    of a tenth of the bytes, so a part need not be read back from the file later."""
    c32, c32c, c64 = previous if isinstance(previous, tuple) else (0, 0, 0)
    crc32, crc32c, crc64nvme = _speculated()
    return crc32(data, c32), crc32c(data, c32c), crc64nvme(data, c64)


@functools.cache
def _speculated() -> tuple[_Crc, _Crc, _Crc]:
    crcs = _crcs()
    return crcs["CRC32"][0], crcs["CRC32C"][0], crcs["CRC64NVME"][0]


def encode_crc(algorithm: str, crc: int) -> str:
    return base64.b64encode(raw_crc(algorithm, crc)).decode("ascii")


def sha_of(algorithm: str, data: bytes = b"") -> Any:
    return hashlib.new(_SHA[algorithm], data)


class CrcCombiner:
    """Folds part CRCs into the whole object's, in object order, as parts finish.

    Only parts that finish ahead of a gap wait here, so memory stays bounded by the
    number of parts in flight, however many parts the object has.
    """

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._combine = combine_function(algorithm)
        self._crc = 0
        self._next = 0
        self._waiting: dict[int, tuple[int, int]] = {}

    def add(self, start: int, end: int, crc: int) -> None:
        self._waiting[start] = (end, crc)
        while self._next in self._waiting:
            end, crc = self._waiting.pop(self._next)
            self._crc = crc if self._next == 0 else self._combine(self._crc, crc, end - self._next)
            self._next = end

    def value(self, size: int) -> str | None:
        """The whole object's checksum, base64, once every byte up to ``size`` is in."""
        if self._next != size or self._waiting:
            return None
        return encode_crc(self.algorithm, self._crc)
