"""The running checksum of a stream: every algorithm S3 may name until one is known."""

from __future__ import annotations

import base64
import random
import threading

import pytest

from asyncdl._wire.running_checksum import RunningChecksum

from ..conftest import payload
from ..transfer.test_composite import part_checksum

ALL = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]


def reference(algorithm: str, data: bytes) -> str:
    return base64.b64encode(part_checksum(algorithm, data)).decode()


@pytest.mark.parametrize("seed", range(5))
async def test_the_running_checksum_equals_one_over_the_whole(seed: int) -> None:
    rng = random.Random(seed)
    # Small pieces are hashed on the loop, large ones in a thread: both, in any mix.
    sizes = [rng.choice([0, 1, 100, 70_000, 3 * 2**20]) for _ in range(8)]
    pieces = [payload(size, seed=i) for i, size in enumerate(sizes)]
    running = RunningChecksum()
    for piece in pieces:
        await running.add(piece)
    await running.idle()
    whole = b"".join(pieces)
    assert {a: running.value(a) for a in ALL} == {a: reference(a, whole) for a in ALL}


async def test_the_running_checksum_keeps_only_the_algorithm_named() -> None:
    running = RunningChecksum()
    await running.add(b"abc")
    await running.idle()
    running.keep("SHA1")
    await running.add(b"def")
    await running.idle()
    assert running.value("SHA1") == reference("SHA1", b"abcdef")
    assert running.value("CRC32") is None
    running.keep(None)
    assert running.value("SHA1") is None


class Recording(RunningChecksum):
    """Notes the thread each piece is hashed on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def update(self, data: bytes) -> None:
        self.threads.append(threading.get_ident())
        super().update(data)


async def test_large_pieces_are_hashed_off_the_loop() -> None:
    # A large piece of SHA256 (and all four others) on the loop would stall it for
    # tens of ms; a small one costs less than the hop to a thread.
    running = Recording()
    await running.add(b"x" * 1000)
    await running.add(b"x" * 4 * 2**20)
    await running.idle()
    running.keep("CRC64NVME")
    await running.add(b"x" * 2**20)  # one cheap algorithm: on the loop again
    loop_thread = threading.get_ident()
    assert [thread == loop_thread for thread in running.threads] == [True, False, True]
