"""Checking a stream that reads a whole object against S3's checksum, per the
``validate`` policy, as a download is checked.

Where the checksum comes from: the first answer, when it is the whole object and
carries one (a server that ignores Range); otherwise a HEAD (``ChecksumMode``,
``If-Match`` the first answer's ETag, with retries). ``"when_available"`` sends it
when the first answer shows that more is to come, as the reading starts (a stream
opened for its headers only, a 304 or a HEAD of a web handler, costs no request);
an object that the first ranged answer holds whole stays unverified, and no request
is added for it. ``"required"`` sends it alongside the first GET, as a download does.

No byte waits for the HEAD. Between pieces it is only looked at: once it has
answered, only its algorithm is fed (see ``running_checksum``), and under
``"required"`` a stream that nothing could check fails then, not after the last
byte. It is awaited after the last byte. A range read is never checkable: S3's
checksum covers the whole object.
"""

from __future__ import annotations

import asyncio
import contextlib

from .._wire.checksums import ExpectedChecksum
from .._wire.running_checksum import RunningChecksum
from .._wire.s3_source import ObjectMeta, S3Object
from ..errors import ChecksumError, DownloadError, ObjectChangedError
from .context import Context
from .verify import NO_URL_CHECKSUM, Verification, send_checksum_head, unverifiable

_UNREAD = "the stream was not read to its end"


class StreamVerifier:
    """What one stream knows of S3's checksum, and the checksum of the bytes it yielded."""

    def __init__(self, ctx: Context, obj: S3Object) -> None:
        self._ctx, self._obj = ctx, obj
        self.policy = ctx.config.validate
        #: The checksum HEAD, until its answer is taken.
        self._head: asyncio.Task[ObjectMeta] | None = None
        #: HEADs cancelled and not yet waited for.
        self._dropped: list[asyncio.Task[ObjectMeta]] = []
        self._etag: str | None = None
        #: A HEAD is to go out when the reading starts.
        self._head_wanted = False
        self._expected: ExpectedChecksum | None = None
        self._running: RunningChecksum | None = None
        #: Why the bytes cannot be checked, once that is known.
        self._reason: str | None = None if self.policy != "off" else "validation is off"
        self._finished = False
        #: The outcome; final once the stream has ended.
        self.outcome = Verification(None, False, self._reason or _UNREAD)

    def before_first_get(self, start: int) -> None:
        """``"required"``: send the HEAD alongside the first GET, unless the read cannot
        be of the whole object (it does not start at byte 0)."""
        if self.policy == "required" and start == 0 and self._obj.checksum_heads:
            self._send_head(None)

    def answered(
        self,
        *,
        start: int,
        stop: int,
        size: int | None,
        etag: str | None,
        held: bool,
        checksum: ExpectedChecksum | None,
    ) -> None:
        """The first answer is in: the stream yields bytes ``[start, stop)`` of a
        ``size``-byte object; ``held``: the first answer holds them all; ``checksum``:
        the object's, if the answer carried it."""
        if self.policy == "off":
            return
        if start != 0 or stop != size:
            self._drop_head()
            self._reason = (
                f"a range read (bytes [{start}, {stop})"
                + (f" of {size}" if size is not None else "")
                + ") cannot be checked: S3's checksum covers the whole object"
            )
            self.outcome = Verification(None, False, self._reason)
            return
        self._etag = etag
        if checksum is not None:
            self._drop_head()
            self._adopt(checksum)
        elif self._head is None:
            if not self._obj.checksum_heads:
                self._reason = NO_URL_CHECKSUM
                return
            if held:
                self._reason = (
                    "the object fits in the first ranged answer, which carries no checksum, "
                    "and no request is added to get one (validate='required' sends a HEAD "
                    "for it)"
                )
                return
            self._head_wanted = True
        if self._running is None and self._reason is None:
            self._running = RunningChecksum()

    def reading(self) -> None:
        """The first iteration starts: send the HEAD ``answered`` asked for."""
        if self._head_wanted:
            self._head_wanted = False
            self._send_head(self._etag)

    async def feed(self, piece: bytes) -> None:
        """Hash ``piece``, the next yielded; take the HEAD's answer if it has come."""
        if self._running is None:
            return
        await self._running.idle()
        head = self._head
        if self._expected is None and head is not None and head.done():
            self._head = None
            try:
                self._take(head)
            except DownloadError as exc:
                self._failed(exc)
                raise
        if self._running is not None:
            await self._running.add(piece)

    async def finish(self) -> Verification:
        """After the last byte: wait for the HEAD, then check; raise ``ChecksumError``
        on a mismatch, or when ``"required"`` cannot be met."""
        if self._finished:
            return self.outcome
        self._finished = True
        try:
            outcome = await self._settle()
        except DownloadError as exc:
            self._failed(exc)
            raise
        finally:
            await self.close()
        self.outcome = outcome
        return outcome

    async def close(self) -> None:
        """Cancel the HEAD and wait for it and for any piece still being hashed."""
        self._drop_head()
        dropped, self._dropped = self._dropped, []
        await asyncio.gather(*dropped, return_exceptions=True)
        if self._running is not None:
            await self._running.idle()

    def drop(self) -> None:
        """The stream was collected unclosed, on any thread: cancel the HEAD on its loop."""
        head = self._head
        if head is not None and not head.done():
            with contextlib.suppress(RuntimeError):  # its loop is closed
                head.get_loop().call_soon_threadsafe(head.cancel)

    async def _settle(self) -> Verification:
        running, head = self._running, self._head
        if running is not None:
            await running.idle()
        if head is not None and self._expected is None:
            # Not cancelled if this wait is: close() or drop() does that.
            await asyncio.wait({head})
            self._head = None
            self._take(head)
        expected = self._expected
        if self._reason is not None:
            return Verification(_shown(expected), False, self._reason)
        if expected is None or self._running is None:
            raise unverifiable(self._obj, "internal: no checksum to check the stream against")
        actual = self._running.value(expected.algorithm)
        if actual == expected.value:
            # A multipart checksum of unsaid type that matches is FULL_OBJECT.
            return Verification(
                str(expected.as_full() if expected.composite else expected), True, None
            )
        if expected.composite:
            return self._cannot_check(_composite_reason(expected), expected)
        raise self._obj.error(
            f"{expected.algorithm} mismatch: S3 says {expected.value}, the bytes read say "
            f"{actual}; do not keep the bytes already read",
            ChecksumError,
        )

    def _send_head(self, etag: str | None) -> None:
        self._head = send_checksum_head(self._ctx.config, self._obj, etag)
        # A stream collected unread drops its HEAD without looking at the answer.
        self._head.add_done_callback(_retrieve)

    def _drop_head(self) -> None:
        head, self._head = self._head, None
        if head is not None:
            head.cancel()
            self._dropped.append(head)

    def _take(self, head: asyncio.Task[ObjectMeta]) -> None:
        """Take the HEAD's answer: the checksum, or why there is none to check by."""
        try:
            meta = head.result()
        except DownloadError as exc:
            if self.policy == "required":
                raise
            self._give_up(f"the checksum HEAD failed: {exc.message}")
            return
        if meta.etag is not None and self._etag is not None and meta.etag != self._etag:
            # A server that ignores If-Match: that checksum is another version's.
            message = f"ETag changed from {self._etag} to {meta.etag} during the read"
            if self.policy == "required":
                raise self._obj.error(message, ObjectChangedError)
            self._give_up(f"{message}, so S3's checksum is another version's")
            return
        if meta.checksum is None:
            self._cannot_check(
                "the object has no stored checksum (upload it with a ChecksumAlgorithm)", None
            )
            return
        self._adopt(meta.checksum)

    def _adopt(self, checksum: ExpectedChecksum) -> None:
        self._expected = checksum
        if checksum.composite and not checksum.maybe_full:
            self._cannot_check(_composite_reason(checksum), checksum)
        elif self._running is None:
            self._running = RunningChecksum([checksum.algorithm])
        else:
            self._running.keep(checksum.algorithm)

    def _cannot_check(self, reason: str, expected: ExpectedChecksum | None) -> Verification:
        """Nothing can check the bytes: the error under ``"required"``, else the reason."""
        if self.policy == "required":
            raise unverifiable(self._obj, f"validate='required' cannot verify the stream: {reason}")
        self._give_up(reason)
        return Verification(_shown(expected), False, reason)

    def _failed(self, error: DownloadError) -> None:
        self.outcome = Verification(_shown(self._expected), False, error.message)

    def _give_up(self, reason: str) -> None:
        self._reason = reason
        if self._running is not None:
            self._running.keep(None)
            self._running = None


def _composite_reason(expected: ExpectedChecksum) -> str:
    what = (
        "of this multipart object does not match the bytes read as a FULL_OBJECT checksum, "
        "and may be a COMPOSITE one (the server did not say which)"
        if expected.maybe_full
        else "is a COMPOSITE checksum"
    )
    return (
        f"S3's {expected.algorithm} {what}: a checksum over the upload's parts, which only "
        "PartNumber GETs can check (download() uses them); a stream fetches by byte ranges"
    )


def _shown(expected: ExpectedChecksum | None) -> str | None:
    return str(expected) if expected is not None else None


def _retrieve(task: asyncio.Task[ObjectMeta]) -> None:
    if not task.cancelled():
        task.exception()
