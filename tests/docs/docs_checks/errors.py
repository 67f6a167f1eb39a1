"""docs/errors.md: the examples met the errors the page shows, and wrote nothing for
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docs.docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    # fetch() returned the found object's result and None for the missing one.
    found, missing = namespace["found"], namespace["missing"]
    assert missing is None
    assert found.key == "reports/a.csv"
    assert Path(found.path).read_bytes() == OBJECTS["reports/a.csv"]
    # A failed download leaves no file and no temp file: only the one found is here.
    assert sorted(p.name for p in Path().iterdir()) == ["reports_a.csv"]
    # validate="required" refused the object without a checksum.
    assert namespace["config"].validate == "required"
