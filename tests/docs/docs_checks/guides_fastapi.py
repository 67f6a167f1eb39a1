"""docs/guides/fastapi.md: the app it builds answered as the page says (its own
in-process test ran), and the lifespan that freezes start-up opens the engine."""

from __future__ import annotations

import gc
import json
import re
from typing import Any

import httpx

from ..docs_runner import ROOT, blocks, source
from ..docs_world import OBJECTS

#: What uvicorn adds to every answer, before the app's headers.
UVICORN = [("date", ""), ("server", "uvicorn")]
#: Headers whose values are times: they vary.
TIMES = ("date", "last-modified")
_CURL = re.compile(r"^\$ curl (?P<options>.*?)\s*http://127\.0\.0\.1:8000(?P<path>/\S+)$")


def _sessions() -> list[tuple[str, dict[str, str], list[str], list[tuple[str, str]]]]:
    """Each console session of the page: the curl request it sends (method, headers)
    and the answer it shows: status line and headers (``curl -D -`` or ``-I``)."""
    found: list[tuple[str, dict[str, str], list[str], list[tuple[str, str]]]] = []
    for block in blocks(source(ROOT / "docs/guides/fastapi.md")):
        if block.lang != "console":
            continue
        # A command continued on the next line (`\` at the end) is one line.
        lines = re.sub(r"\\\n\s*", " ", block.code).splitlines()
        (curl,) = [m for m in map(_CURL.match, lines) if m is not None]
        options = curl["options"].split()
        method = "HEAD" if "-I" in options else "GET"
        headers: dict[str, str] = {}
        if "-r" in options:
            headers["Range"] = "bytes=" + options[options.index("-r") + 1]
        answer = [line for line in lines if not line.startswith("$ ")]
        pairs = [line.split(": ", 1) for line in answer[1:]]
        shown = [(name, "" if name in TIMES else value) for name, value in pairs]
        found.append((method, headers, [curl["path"], answer[0]], shown))
    return found


async def check(namespace: dict[str, Any]) -> None:
    video = OBJECTS["video.mp4"]
    whole = namespace["whole"]
    assert whole.status_code == 200
    assert whole.content == video
    assert whole.headers["content-type"] == "video/mp4"
    assert whole.headers["x-content-type-options"] == "nosniff"
    assert whole.headers["accept-ranges"] == "bytes"
    part = namespace["part"]
    assert (part.status_code, part.content) == (206, video[100:200])
    again = namespace["again"]
    assert (again.status_code, again.content) == (304, b"")
    assert again.headers["etag"] == whole.headers["etag"]
    missing = namespace["missing"]
    assert missing.status_code == 404
    assert "my-bucket" not in missing.text
    assert "no/such" not in missing.text
    saved = namespace["saved"]
    assert saved.status_code == 200
    assert saved.content == b""
    assert saved.headers["content-disposition"] == 'attachment; filename="cat.jpg"'
    assert saved.headers["content-length"] == str(len(OBJECTS["photos/2026/cat.jpg"]))
    assert namespace["settings"] == json.loads(OBJECTS["config/app.json"])

    # The last app: its own lifespan runs inside asyncdl's, with the engine open.
    app = namespace["app"]
    frozen = gc.get_freeze_count()
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > frozen
        assert app.state.asyncdl_engine.stats().gets.ok == 0
        # The page's routes, mounted on this app too, work with its engine.
        app.add_api_route("/objects/{key:path}", namespace["get_object"], methods=["GET", "HEAD"])
        app.add_api_route("/download/{key:path}", namespace["download"], methods=["GET", "HEAD"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            notes = await http.get("/objects/photos/2026/notes.txt")
            html = await http.head("/objects/public/index.html")
            # What each console session sends: its answer, as the page shows it.
            answers = [
                (await http.request(method, path, headers=headers), status, shown)
                for method, headers, (path, status), shown in _sessions()
            ]
    gc.unfreeze()
    # Stored without a type: a passive type is guessed from the name.
    assert notes.content == OBJECTS["photos/2026/notes.txt"]
    assert notes.headers["content-type"] == "text/plain"
    # Stored with one: sent as stored; a HEAD has the GET's headers and no body.
    assert html.headers["content-type"] == "text/html"
    assert html.headers["content-length"] == str(len(OBJECTS["public/index.html"]))
    assert html.content == b""
    # The console sessions show the app's answers, header for header, after uvicorn's
    # own (the times are the only values that vary).
    assert len(answers) == 2
    for answer, status, shown in answers:
        assert status == f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}"
        app_headers = [(n, "" if n in TIMES else v) for n, v in answer.headers.items()]
        assert shown == UVICORN + app_headers, (shown, app_headers)
