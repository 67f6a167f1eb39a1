"""Checking a download against the checksum S3 stores, per the ``validate`` policy.

- ``"when_available"``: check whatever S3 vouches for. An object the first answer
  holds whole is checked when that answer carries the checksum, and nothing is sent
  for one; a larger one gets a HEAD alongside its fan-out (ranged GETs carry no
  checksum), answered long before the parts are. A HEAD that fails leaves the object
  unverified, with the reason.
- ``"required"``: fail unless the whole object was checked against S3's checksum;
  GET-first then sends a HEAD alongside its first GET (same round trip).
- ``"off"``: check nothing.

The HEAD's checksum is taken as soon as it answers, so parts that start after it
compute their CRCs as they stream; only the parts already under way then are read
back from the file.

A FULL_OBJECT CRC is checked by combining the parts' CRCs; SHA1/SHA256 by hashing
the finished file. A COMPOSITE checksum (``-N``) is checked when the bytes came
along the upload's parts (PartNumber GETs): every part against its own checksum,
then the composite over them.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._files.writer import TempFile
from .._wire.checksums import (
    CRC_ALGORITHMS,
    SPECULATED,
    CrcCombiner,
    ExpectedChecksum,
    SpeculatedCrcs,
    composite_of,
    crc_function,
    every_crc,
    raw_crc,
)
from .._wire.retry import with_retries
from .._wire.s3_source import ObjectMeta, S3Object
from ..config import TransferConfig
from ..errors import ChecksumError, DownloadError, ObjectChangedError

POLICIES = ("when_available", "required", "off")
#: Why a URL's bytes go unchecked when its first answer brought no checksum.
NO_URL_CHECKSUM = (
    "the URL's answers carried no checksum (only a whole-object answer can: a URL "
    "presigned with ChecksumMode), and a URL cannot be asked for it with a HEAD"
)


@dataclass(slots=True)  # not frozen: one per download (see jobs.Job)
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
        #: The CRC function parts feed while streaming, or ``None``: the algorithm's, or
        #: ``every_crc`` while a HEAD is still to tell which one (``Part.crc_fn``).
        self.crc: Callable[[bytes, Any], Any] | None = None
        #: Parts that ran every CRC before the algorithm was known: (start, end, CRCs).
        self._speculated: list[tuple[int, int, SpeculatedCrcs]] = []
        #: A HEAD in flight that brings the checksum; awaited only after the bytes.
        self.pending: asyncio.Task[ObjectMeta] | None = None
        #: Parts written before a CRC algorithm was known; hashed from the file later.
        self._unhashed: list[tuple[int, int]] = []
        #: Fetched along upload parts (PartNumber GETs): number -> (start, end, the
        #: part's checksum as the server sent it, if it did).
        self._numbered: dict[int, tuple[int, int, ExpectedChecksum | None]] | None = None
        #: The CRC of each numbered part, by its start offset.
        self._part_crcs: dict[int, int] = {}
        #: Why a COMPOSITE checksum could not be checked along upload parts.
        self.parts_reason: str | None = None
        #: Why no checksum is known, when none is: the download path says which
        #: requests could have brought one; a failed HEAD says why it failed.
        self.missing_reason = "the object has no stored checksum"
        if expected is not None:
            self.adopt(expected)

    @property
    def active(self) -> bool:
        return self.policy != "off"

    @property
    def wants_parts(self) -> bool:
        """A COMPOSITE checksum is known: only PartNumber GETs can check it."""
        return self.active and self.expected is not None and self.expected.composite

    def adopt(self, checksum: ExpectedChecksum | None) -> None:
        """Take the first checksum seen; parts then compute CRCs if it is one."""
        if not self.active or checksum is None or self.expected is not None:
            return
        self.expected = checksum
        self.crc = None
        if checksum.algorithm in CRC_ALGORITHMS:
            self.crc = crc_function(checksum.algorithm)
            if not checksum.composite or checksum.maybe_full:
                self.combiner = CrcCombiner(checksum.algorithm)
        speculated, self._speculated = self._speculated, []
        for start, end, crcs in speculated:
            self._add_speculated(start, end, crcs)

    def start_parts(self) -> None:
        """The bytes are fetched again along upload parts: forget what came before."""
        self._numbered = {}
        self._part_crcs.clear()
        self._unhashed.clear()
        self._speculated.clear()
        if self.combiner is not None:
            self.combiner = CrcCombiner(self.combiner.algorithm)

    def note_part(
        self, number: int, start: int, end: int, checksum: ExpectedChecksum | None
    ) -> None:
        if self._numbered is not None:
            self._numbered[number] = (start, end, checksum)

    def add_part(self, start: int, end: int, crc: int | SpeculatedCrcs | None) -> None:
        if crc is None:
            self._unhashed.append((start, end))
            return
        if isinstance(crc, tuple):
            if self.expected is None:
                self._speculated.append((start, end, crc))  # until the HEAD answers
            else:
                self._add_speculated(start, end, crc)
            return
        if self.combiner is not None:
            self.combiner.add(start, end, crc)
        if self._numbered is not None:
            self._part_crcs[start] = crc

    def _add_speculated(self, start: int, end: int, crcs: SpeculatedCrcs) -> None:
        algorithm = self.expected.algorithm if self.expected is not None else None
        if algorithm in SPECULATED:
            self.add_part(start, end, crcs[SPECULATED.index(algorithm)])
        # Otherwise (SHA1/SHA256) the file is hashed whole: the CRCs served nothing.

    def refuse_if_uncheckable(self, obj: S3Object) -> None:
        """``"required"`` with a COMPOSITE checksum and no upload parts to check it by:
        raise now, before any more bytes are fetched in vain."""
        expected = self.expected
        if self.policy == "required" and expected is not None and not expected.maybe_full:
            raise unverifiable(obj, f"cannot verify: {self.parts_reason}")

    async def abandon(self) -> None:
        """The download failed: stop the checksum HEAD, if one is in flight."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)

    def expect(self, head: asyncio.Task[ObjectMeta], etag: str | None) -> None:
        """A HEAD in flight brings the checksum: taken the moment it answers (if it is
        of this ``etag``), so that parts starting later compute their CRCs as they go.
        Parts that start before it answers run the three CRCs S3 may name (all cheap),
        so none has to be read back from the file for its CRC."""
        self.pending = head
        if self.active and self.expected is None:
            self.crc = every_crc

        def early(task: asyncio.Task[ObjectMeta]) -> None:
            if task.cancelled() or task.exception() is not None:
                self.crc = None if self.expected is None else self.crc
                return  # settle() says what went wrong
            meta = task.result()
            if meta.etag is None or etag is None or meta.etag == etag:
                self.adopt(meta.checksum)
            if self.expected is None:
                self.crc = None  # no checksum to compute CRCs for

        head.add_done_callback(early)

    async def settle(self, obj: S3Object, etag: str | None) -> None:
        """Wait for the checksum HEAD, if one is in flight, and take its checksum.

        Under ``"when_available"`` a HEAD that failed, or that saw the object changed
        since its bytes were pinned, only leaves the object unverified: the bytes are
        one version, whatever happened to the object afterwards."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        try:
            meta = await pending
        except DownloadError as exc:
            if self.policy == "required":
                raise
            self.missing_reason = f"the checksum HEAD failed: {exc.message}"
            return
        if meta.etag is not None and etag is not None and meta.etag != etag:
            if self.policy == "required":
                raise obj.error(
                    f"ETag changed from {etag} to {meta.etag} during the download",
                    ObjectChangedError,
                )
            self.missing_reason = (
                f"the object changed to ETag {meta.etag} before its checksum was read"
            )
            return
        self.adopt(meta.checksum)

    async def finish(self, temp: TempFile, obj: S3Object, etag: str | None) -> Verification:
        """Check the written bytes before they are published; raise on a mismatch."""
        await self.settle(obj, etag)
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
                raise unverifiable(
                    obj,
                    "the object has no stored checksum, so validate='required' cannot "
                    "verify it (upload it with a ChecksumAlgorithm, or relax the policy)",
                )
            return Verification(None, False, self.missing_reason)
        if expected.composite:
            return await self._finish_composite(temp, obj, expected)
        if self.combiner is not None:
            actual = self._combined(temp, obj)
        else:
            actual = await temp.digest(expected.algorithm)
        if actual != expected.value:
            raise obj.error(
                f"{expected.algorithm} mismatch: S3 says {expected.value}, the bytes say "
                f"{actual}; the file was not written",
                ChecksumError,
            )
        return Verification(str(expected), True, None)

    def _combined(self, temp: TempFile, obj: S3Object) -> str:
        assert self.combiner is not None
        actual = self.combiner.value(temp.size)
        if actual is None:  # a part fed no CRC: a bug, never a pass
            raise unverifiable(obj, "internal: not every byte was checksummed")
        return actual

    async def _finish_composite(
        self, temp: TempFile, obj: S3Object, expected: ExpectedChecksum
    ) -> Verification:
        # The type went unsaid: a FULL_OBJECT reading that matches settles it.
        if (
            expected.maybe_full
            and self.combiner is not None
            and self._combined(temp, obj) == expected.value
        ):
            return Verification(str(expected.as_full()), True, None)
        if self._numbered is None:
            reason = self.parts_reason or (
                f"{expected.algorithm} is a COMPOSITE checksum of the upload's parts; "
                "the object was fetched without PartNumber GETs, so it cannot be checked"
            )
            if self.policy == "required":
                raise unverifiable(obj, f"cannot verify: {reason}")
            return Verification(str(expected), False, reason)
        algorithm = expected.algorithm
        raw: list[bytes] = []
        position = 0
        for number in sorted(self._numbered):
            start, end, theirs = self._numbered[number]
            if number != len(raw) + 1 or start != position:
                raise unverifiable(obj, f"internal: upload part {number} does not follow on")
            position = end
            if algorithm in CRC_ALGORITHMS:
                crc = self._part_crcs.get(start)
                if crc is None:
                    crc = await temp.crc(algorithm, start, end)
                ours = raw_crc(algorithm, crc)
            else:
                ours = base64.b64decode(await temp.digest(algorithm, start, end))
            if (
                theirs is not None
                and theirs.algorithm == algorithm
                and base64.b64decode(theirs.value) != ours
            ):
                raise obj.error(
                    f"{algorithm} mismatch in upload part {number} (bytes [{start}, {end})): "
                    f"S3 says {theirs.value}, the bytes say {base64.b64encode(ours).decode()}; "
                    "the file was not written",
                    ChecksumError,
                )
            raw.append(ours)
        if position != temp.size:
            raise unverifiable(obj, "internal: the upload parts do not cover the object")
        actual = composite_of(algorithm, raw)
        if actual != expected.value:
            raise obj.error(
                f"{algorithm} COMPOSITE mismatch over {len(raw)} upload parts: S3 says "
                f"{expected.value}, the bytes say {actual}; the file was not written",
                ChecksumError,
            )
        return Verification(str(ExpectedChecksum(algorithm, expected.value, len(raw))), True, None)


def send_checksum_head(
    config: TransferConfig, obj: S3Object, etag: str | None
) -> asyncio.Task[ObjectMeta]:
    """The HEAD that brings S3's checksum (``ChecksumMode``; ``If-Match`` ``etag``, the
    version the bytes are), retried like any request, sent now and not waited for."""
    return asyncio.create_task(
        with_retries(
            config,
            lambda: obj.head(if_match=etag),
            bucket=obj.bucket,
            key=obj.key,
            what="the checksum HEAD",
            counters=obj.counts,
        )
    )


def unverifiable(obj: S3Object, message: str) -> ChecksumError:
    """Not a mismatch: the bytes could not be checked (no fresh attempt would help)."""
    return ChecksumError(message, bucket=obj.bucket, key=obj.key, mismatch=False)
