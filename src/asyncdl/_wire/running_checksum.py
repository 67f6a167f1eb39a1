"""The checksum of a stream's bytes, computed as they pass, in order, for every
algorithm S3 may name until it is known which one the object has.

One running value over the whole stream: a CRC needs no combine, a SHA no second
pass. Fed all five algorithms (the checksum HEAD has not answered yet), a MiB costs
about 1.6 ms of CPU here; fed one, 0.04 ms (CRC32C, CRC64NVME) to 0.6 ms (SHA256).

The event loop must not stall: a piece whose hashing is small runs on the loop (a
thread hop would cost more than the work), a larger one in a worker thread (hashlib
and awscrt release the GIL) while the reader already has the piece. The next piece
waits for it, so the order holds and at most one piece is held.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterable
from typing import Any

from .checksums import ALGORITHMS, CRC_ALGORITHMS, crc_function, encode_crc, sha_of

#: Bytes times algorithms hashed on the loop in one step, at most: about 2.5 ms of
#: SHA256 here, far below the 50 ms that counts as blocking the loop, on a slower
#: machine too. With the default 1 MiB writes, pieces go to a thread only while
#: every algorithm is fed.
ON_LOOP_WORK = 4 * 1024 * 1024


class RunningChecksum:
    """The checksums of the bytes fed so far, for each algorithm still wanted."""

    def __init__(self, algorithms: Iterable[str] = ALGORITHMS) -> None:
        self._crc_functions: dict[str, Callable[[bytes, int], int]] = {}
        self._crcs: dict[str, int] = {}
        self._shas: dict[str, Any] = {}
        for algorithm in algorithms:
            if algorithm in CRC_ALGORITHMS:
                self._crc_functions[algorithm] = crc_function(algorithm)
                self._crcs[algorithm] = 0
            else:
                self._shas[algorithm] = sha_of(algorithm)
        #: The piece being hashed in a worker thread, if one is.
        self._job: asyncio.Future[None] | None = None

    def update(self, data: bytes) -> None:
        """Feed ``data`` (on whatever thread calls it: one piece at a time)."""
        for algorithm, function in self._crc_functions.items():
            self._crcs[algorithm] = function(data, self._crcs[algorithm])
        for sha in self._shas.values():
            sha.update(data)

    async def add(self, data: bytes) -> None:
        """Feed ``data`` after the piece before it; a large piece is hashed in a thread
        and not waited for here."""
        await self.idle()
        if len(data) * (len(self._crcs) + len(self._shas)) <= ON_LOOP_WORK:
            self.update(data)
        else:
            self._job = asyncio.get_running_loop().run_in_executor(None, self.update, data)

    async def idle(self) -> None:
        """Wait until every piece fed is hashed."""
        if self._job is not None:
            # Shielded: a cancelled waiter must not let a later piece be hashed while
            # the thread still works on this one.
            await asyncio.shield(self._job)
            self._job = None

    def keep(self, algorithm: str | None) -> None:
        """Hash only ``algorithm`` from now on (``None``: nothing); call when idle."""
        assert self._job is None, "keep() while a piece is being hashed"
        self._crc_functions = {a: f for a, f in self._crc_functions.items() if a == algorithm}
        self._crcs = {a: crc for a, crc in self._crcs.items() if a == algorithm}
        self._shas = {a: sha for a, sha in self._shas.items() if a == algorithm}

    def value(self, algorithm: str) -> str | None:
        """``algorithm``'s checksum of the bytes so far, base64 as S3 sends it, or
        ``None`` if it is not computed; call when idle."""
        if algorithm in self._crcs:
            return encode_crc(algorithm, self._crcs[algorithm])
        if algorithm in self._shas:
            return base64.b64encode(self._shas[algorithm].digest()).decode("ascii")
        return None
