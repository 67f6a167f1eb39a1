"""What docs/guides/integrity.md's examples did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docs import docs_world


async def check(namespace: dict[str, Any]) -> None:
    assert namespace["config"].validate == "required"
    assert Path("q1.csv").read_bytes() == docs_world.OBJECTS["reports/2026/q1.csv"]
    # The default's result for an object that fit its first, ranged answer.
    default = namespace["result"]
    assert default.key == "reports/2026/q1.csv"
    assert not default.verified
    assert default.requests == 1
    assert "first, ranged answer" in default.unverified_reason
    # Listed: one plain GET each, which brings the checksum of the one stored with one.
    listed = {r.key: r for r in namespace["listed"]}
    assert set(listed) == {"reports/2026/q1.csv", "reports/2026/q2.csv"}
    q1, q2 = listed["reports/2026/q1.csv"], listed["reports/2026/q2.csv"]
    assert q1.verified
    assert str(q1.checksum).startswith("CRC32:")
    assert not q2.verified
    assert q2.unverified_reason == "the object has no stored checksum"
    assert all(r.requests == 1 for r in listed.values())
    for key in listed:
        assert (Path("reports") / key.removeprefix("reports/2026/")).read_bytes() == (
            docs_world.OBJECTS[key]
        )
    # Refused or mismatched: nothing was written.
    assert namespace["strict"].validate == "required"
    assert not Path("key.bin").exists()
    assert not Path("data.bin").exists()
    assert not [p for p in Path().iterdir() if p.name.endswith(".asyncdl-tmp")]
