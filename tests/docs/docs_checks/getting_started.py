"""docs/getting-started.md: every example wrote its object, whole, where it said."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

from tests.docs.docs_runner import ROOT
from tests.docs.docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    written = {
        "local.bin": "path/to/key",
        "other.bin": "other/key",
        "reports_a.csv": "reports/a.csv",
        "reports_b.csv": "reports/b.csv",
        "small.json": "small.json",
        "app.json": "config/app.json",
        "data.bin": "checked/data.bin",
    }
    for name, key in written.items():
        assert Path(name).read_bytes() == OBJECTS[key], name
    # No temp file is left beside the targets.
    assert sorted(p.name for p in Path().iterdir()) == sorted(written)

    result = namespace["result"]  # the last example's: checked/data.bin, default config
    body = OBJECTS["checked/data.bin"]
    assert result.size == len(body)
    assert result.etag == f'"{hashlib.md5(body).hexdigest()}"'
    assert (result.strategy, result.requests, result.verified) == ("get-first", 1, False)
    assert "fit in the first, ranged answer" in result.unverified_reason

    # The wheel the page installs is the one `nox -s build` makes of this checkout.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert f"dist/asyncdl-{version}-py3-none-any.whl[cli]" in page
