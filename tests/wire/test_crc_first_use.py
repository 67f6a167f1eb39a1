"""The CRC functions (awscrt's, ISA-L's CRC32) loaded when first asked for: the same
values, from any thread first, and a URL whose answer brings a CRC still verified."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from awscrt import checksums as crt

from ..cli.test_startup import imported_by
from .test_url_raw_http import RawServer, Seen, reply
from .test_url_session import aws_settings  # noqa: F401 - autouse: no proxy of the machine's

BODY = os.urandom(5000)
ETAG = '"v1"'


FIRST_USE = """
import sys, threading
if {hide_isal}:
    sys.modules["isal"] = sys.modules["isal.isal_zlib"] = None
from asyncdl._files import journal
from asyncdl._wire import checksums
assert "awscrt" not in sys.modules
data = bytes(range(256)) * 256
expected = {expected}
barrier = threading.Barrier(16)
found, failed = [], []

def first_use(i):
    try:
        barrier.wait()
        if i % 3 == 0:
            speculated = journal.crcs_of(checksums.every_crc, checksums.every_crc(data, 0))
            found.append(speculated == dict(zip(checksums.SPECULATED, expected)))
        elif i % 3 == 1:
            crc = checksums.crc_function("CRC32C")
            found.append(journal.crcs_of(crc, crc(data, 0)) == {{"CRC32C": expected[1]}})
        else:
            combine = checksums.combine_function("CRC64NVME")
            found.append(combine(expected[2], 0, 0) == expected[2])
    except BaseException as exc:
        failed.append(repr(exc))

threads = [threading.Thread(target=first_use, args=(i,)) for i in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert not failed, failed
assert found == [True] * 16, found
for name in checksums.CRC_ALGORITHMS:
    assert journal.crcs_of(checksums.crc_function(name), 7) == {{name: 7}}, name
print("isal" if sys.modules.get("isal") else "awscrt")
"""


@pytest.mark.parametrize("hide_isal", [False, True], ids=["isal", "no isal"])
def test_crcs_first_used_from_many_threads_at_once(hide_isal: bool, tmp_path: Path) -> None:
    """A fresh interpreter whose first CRCs are asked for by 16 threads at once (the
    executor's): every thread gets the right values, and the journal still knows each
    CRC function by name; without ISA-L, awscrt's CRC32 stands in."""
    data = bytes(range(256)) * 256
    expected = (zlib.crc32(data), crt.crc32c(data), crt.crc64nvme(data))
    code = FIRST_USE.format(hide_isal=hide_isal, expected=expected)
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ("awscrt" if hide_isal else "isal")


def test_crc_values_are_awscrts() -> None:
    from asyncdl._wire import checksums  # noqa: PLC0415 - what is checked: its functions now

    reference = {
        "CRC32": (zlib.crc32, crt.combine_crc32),
        "CRC32C": (crt.crc32c, crt.combine_crc32c),
        "CRC64NVME": (crt.crc64nvme, crt.combine_crc64nvme),
    }
    first, second = BODY[:1234], BODY[1234:]
    for name, (crc, combine) in reference.items():
        assert checksums.crc_function(name)(BODY, 0) == crc(BODY, 0), name
        assert checksums.crc_function(name)(second, crc(first, 0)) == crc(BODY, 0), name
        combined = checksums.combine_function(name)(crc(first, 0), crc(second, 0), len(second))
        assert combined == combine(crc(first, 0), crc(second, 0), len(second)) == crc(BODY, 0)


def _with_checksum(algorithm: str, value: str, body: bytes) -> bytes:
    headers = {"ETag": ETAG, "Content-Length": str(len(body))}
    headers[f"x-amz-checksum-{algorithm.lower()}"] = value
    return reply(200, headers, body)


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
@pytest.mark.parametrize("corrupt", [False, True], ids=["whole", "corrupted"])
async def test_a_urls_checksum_loads_the_crcs_and_is_verified(
    algorithm: str, corrupt: bool, tmp_path: Path
) -> None:
    """A presigned URL's answer carries the object's CRC: the command loads the CRC
    library for it, and a body that does not match it fails the copy."""
    crc = {"CRC32": zlib.crc32, "CRC32C": crt.crc32c, "CRC64NVME": crt.crc64nvme}[algorithm]
    width = 8 if algorithm == "CRC64NVME" else 4
    value = base64.b64encode(crc(BODY).to_bytes(width, "big")).decode()
    sent = BODY[:100] + bytes([BODY[100] ^ 1]) + BODY[101:] if corrupt else BODY

    def answer(request: Seen) -> bytes:
        return _with_checksum(algorithm, value, sent)

    async with RawServer(answer) as server:
        argv = ["-m", "asyncdl.cli", "cp", server.url("/obj?X-Amz-Signature=abc"), "out"]
        code, names = await asyncio.to_thread(imported_by, argv, tmp_path, modules=True)
    assert "awscrt" in names
    if corrupt:
        assert code == 1
        assert not (tmp_path / "out").exists()
    else:
        assert code == 0
        assert (tmp_path / "out").read_bytes() == BODY
