"""Checking a download against the checksum S3 stores, per the ``validate`` policy.

- ``"when_available"``: check every checksum the responses carry (HEAD, and GETs
  of the whole object), and send nothing only to get one.
- ``"required"``: fail unless the whole object was checked against S3's checksum;
  GET-first then sends a HEAD alongside its first GET (same round trip).
- ``"off"``: check nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from .checksums import CRC_ALGORITHMS, CrcCombiner, ExpectedChecksum, crc_function
from .errors import ChecksumError, ObjectChangedError
from .s3_source import ObjectMeta, S3Object
from .writer import TempFile

POLICIES = ("when_available", "required", "off")


@dataclass(frozen=True, slots=True)
class Verification:
    #: ``"ALGORITHM:base64"`` (``-N`` for COMPOSITE) of S3's checksum, if one was seen.
    checksum: str | None
    verified: bool
    #: Why the object was not verified; ``None`` when it was.
    reason: str | None


class Verifier:
    """What one download knows of its checksum, and the CRC of its bytes so far."""

    def __init__(self, policy: str, expected: ExpectedChecksum | None) -> None:
        self.policy = policy
        self.expected: ExpectedChecksum | None = None
        self.combiner: CrcCombiner | None = None
        #: The CRC function parts feed while streaming, or ``None``.
        self.crc: Callable[[bytes, int], int] | None = None
        #: A HEAD in flight that brings the checksum; awaited only in :meth:`finish`.
        self.pending: asyncio.Task[ObjectMeta] | None = None
        #: Parts written before a CRC algorithm was known; hashed from the file later.
        self._unhashed: list[tuple[int, int]] = []
        if expected is not None:
            self.adopt(expected)

    @property
    def active(self) -> bool:
        return self.policy != "off"

    def adopt(self, checksum: ExpectedChecksum | None) -> None:
        """Take the first checksum seen; parts then compute CRCs if it is a full one."""
        if not self.active or checksum is None or self.expected is not None:
            return
        self.expected = checksum
        if checksum.algorithm in CRC_ALGORITHMS and not checksum.composite:
            self.combiner = CrcCombiner(checksum.algorithm)
            self.crc = crc_function(checksum.algorithm)

    def add_part(self, start: int, end: int, crc: int | None) -> None:
        if crc is None:
            self._unhashed.append((start, end))
        elif self.combiner is not None:
            self.combiner.add(start, end, crc)

    async def abandon(self) -> None:
        """The download failed: stop the checksum HEAD, if one is in flight."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)

    async def finish(self, temp: TempFile, obj: S3Object, etag: str | None) -> Verification:
        """Check the written bytes before they are published; raise on a mismatch."""
        bucket, key = obj.bucket, obj.key
        pending, self.pending = self.pending, None
        if pending is not None:
            meta = await pending
            if meta.etag is not None and etag is not None and meta.etag != etag:
                raise ObjectChangedError(
                    f"ETag changed from {etag} to {meta.etag} during the download",
                    bucket=bucket,
                    key=key,
                )
            self.adopt(meta.checksum)
        if self.combiner is not None:
            for start, end in self._unhashed:
                crc = await temp.crc(self.combiner.algorithm, start, end)
                self.combiner.add(start, end, crc)
            self._unhashed.clear()
        expected = self.expected
        if not self.active:
            return Verification(None, False, "validation is off")
        if expected is None:
            if self.policy == "required":
                raise ChecksumError(
                    "the object has no stored checksum, so validate='required' cannot "
                    "verify it (upload it with a ChecksumAlgorithm, or relax the policy)",
                    bucket=bucket,
                    key=key,
                )
            return Verification(
                None,
                False,
                "no checksum in the responses: ranged GETs carry none (use head-first, "
                "validate='required', or listing metadata), or the object has none",
            )
        if expected.composite:
            reason = (
                f"{expected.algorithm} is a COMPOSITE checksum of the upload's parts, "
                "which needs the part boundaries (PartNumber GETs) to check"
            )
            if self.policy == "required":
                raise ChecksumError(f"cannot verify: {reason}", bucket=bucket, key=key)
            return Verification(str(expected), False, reason)
        if self.combiner is not None:
            actual = self.combiner.value(temp.size)
            if actual is None:  # a part fed no CRC: a bug, never a pass
                raise ChecksumError(
                    "internal: not every byte was checksummed", bucket=bucket, key=key
                )
        else:
            actual = await temp.digest(expected.algorithm)
        if actual != expected.value:
            raise ChecksumError(
                f"{expected.algorithm} mismatch: S3 says {expected.value}, the bytes say "
                f"{actual}; the file was not written",
                bucket=bucket,
                key=key,
            )
        return Verification(str(expected), True, None)
