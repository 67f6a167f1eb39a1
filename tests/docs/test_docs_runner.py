"""The docs runner's comparison of what an example printed with the output its page
shows (``tests/docs/docs_runner.py``): each test holds a case the comparison must refuse,
so that none passes with the comparison gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from .docs_runner import _check_output, _run_blocks, _shell, blocks, on_screen


def _refused(printed: str, shown: str, *, unordered: bool = False) -> bool:
    try:
        _check_output(printed, shown, "page.md:1", unordered=unordered)
    except SystemExit as failed:
        message = str(failed)
    else:
        return False
    assert message.startswith("page.md:1: "), message
    return True


def test_the_same_lines_pass_and_a_changed_one_fails() -> None:
    assert not _refused("3 objects\n2 bytes\n", "3 objects\n2 bytes\n")
    assert _refused("3 objects\n2 bytes\n", "3 objects\n5 bytes\n")
    assert _refused("3 objects\n", "3 objects\n2 bytes\n")
    assert _refused("3 objects\n2 bytes\n", "3 objects\n")
    assert _refused("2 bytes\n3 objects\n", "3 objects\n2 bytes\n")


def test_a_line_of_dots_stands_for_any_lines() -> None:
    assert not _refused("first\nsecond\nthird\nlast\n", "first\n...\nlast\n")
    assert not _refused("first\nlast\n", "first\n...\nlast\n")
    assert not _refused("first\nlast\n", "...\nlast\n")
    assert _refused("first\nsecond\nlast\n", "first\n...\nfirst\n")
    assert _refused("first\nsecond\n", "first\n...\nlast\n")
    assert _refused("zeroth\nfirst\nlast\n", "first\n...\n")


def test_dots_inside_a_line_stand_for_any_text_of_that_line() -> None:
    shown = "copy.bin (resumed: ... MiB were already here)\n"
    assert not _refused("copy.bin (resumed: 5.8 MiB were already here)\n", shown)
    assert _refused("copy.bin\n", shown)
    assert _refused("copy.bin (resumed: 5.8 MiB were already here)\nmore\n", shown)
    assert _refused("big.bin (resumed: 5.8 MiB were already here)\n", shown)


def test_an_unordered_block_takes_the_same_lines_in_any_order() -> None:
    shown = "b.csv\na.csv\nc.csv\n"
    assert not _refused("a.csv\nb.csv\nc.csv\n", shown, unordered=True)
    assert not _refused("c.csv\nb.csv\na.csv\n", shown, unordered=True)
    assert _refused("a.csv\nb.csv\n", shown, unordered=True)  # one missing
    assert _refused("a.csv\nb.csv\nc.csv\nd.csv\n", shown, unordered=True)  # one more
    assert _refused("a.csv\nb.csv\nb.csv\n", shown, unordered=True)  # one twice
    assert _refused("a.csv\nb.csv\nC.csv\n", shown, unordered=True)  # one changed
    assert _refused("a.csv\nb.csv\nc.csv\n", "a.csv\n...\n", unordered=True)


def test_an_unordered_block_may_have_any_text_inside_a_line() -> None:
    shown = "a.csv\n2 done in ... s\nb.csv\n"
    assert not _refused("2 done in 0.1 s\nb.csv\na.csv\n", shown, unordered=True)
    assert _refused("2 done in 0.1 s\nb.csv\n", shown, unordered=True)  # one missing
    assert _refused("3 done in 0.1 s\nb.csv\na.csv\n", shown, unordered=True)  # not it
    assert _refused("2 done in 1 s\n2 done in 1 s\na.csv\nb.csv\n", shown, unordered=True)


def test_a_terminal_shows_a_carriage_return_as_a_line_started_over() -> None:
    printed = "\r128000/300000 bytes\r300000/300000 bytes\n"
    assert on_screen(printed) == ["300000/300000 bytes"]
    assert on_screen("downloading...\rdone\n") == ["doneloading..."]
    assert not _refused(printed, "300000/300000 bytes\n")
    assert _refused(printed, "128000/300000 bytes\n300000/300000 bytes\n")


def test_the_test_endpoint_is_shown_as_on_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:34895")
    printed = "http://127.0.0.1:34895/my-bucket/datasets/big.bin 20971523 3\n"
    assert on_screen(printed) == ["https://my-bucket.s3.amazonaws.com/datasets/big.bin 20971523 3"]
    assert not _refused(printed, "https://my-bucket.s3.amazonaws.com/datasets/big.bin 20971523 3")
    assert _refused(printed, "https://other.s3.amazonaws.com/datasets/big.bin 20971523 3")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


def _run(page: str, loop: asyncio.AbstractEventLoop) -> str | None:
    """What the runner refused the page for, if it did."""
    try:
        _run_blocks(blocks(page), "page.md", {"__name__": "__main__"}, loop)
    except SystemExit as failed:
        return str(failed)
    return None


PYTHON = "```python\nprint('printed')\n```\n"
SH = "```sh\necho out; echo err >&2\n```\n"


def test_a_text_block_right_after_a_block_that_ran_is_its_output(
    loop: asyncio.AbstractEventLoop,
) -> None:
    assert _run(PYTHON + "\n\n```text\nprinted\n```\n", loop) is None
    refused = _run(PYTHON + "\n```text\nshown\n```\n", loop)
    assert refused is not None
    assert refused.startswith("page.md:5: the page shows\nshown\nbut it printed\nprinted")
    # An sh block's output is stdout and stderr, as a terminal shows them.
    assert _run(SH + "\n```text\nout\nerr\n```\n", loop) is None
    assert _run(SH + "\n```text\nout\n```\n", loop) is not None


def test_a_text_block_after_prose_or_another_block_is_not_compared(
    loop: asyncio.AbstractEventLoop,
) -> None:
    assert _run(PYTHON + "\nA formula:\n\n```text\nspeed = bytes / s\n```\n", loop) is None
    assert _run(PYTHON + "\n```toml\n[a]\n```\n\n```text\nx\n```\n", loop) is None
    assert _run(PYTHON + "\n```console\n$ curl -I URL\n```\n", loop) is None
    assert _run(PYTHON + "\n```text\nspeed = bytes / s\n```\n", loop) is not None


def test_the_unordered_class_is_read_from_the_fence(loop: asyncio.AbstractEventLoop) -> None:
    code = "```python\nprint('b')\nprint('a')\n```\n\n"
    (_, shown) = blocks(code + "```text {.unordered}\na\nb\n```\n")
    assert (shown.lang, shown.classes, shown.follows) == ("text", ("unordered",), True)
    assert _run(code + "```text {.unordered}\na\nb\n```\n", loop) is None
    assert _run(code + "```text\na\nb\n```\n", loop) is not None
    assert _run(code + "```text {.unordered}\na\nc\n```\n", loop) is not None


def _shell_refusal(code: str) -> str | None:
    try:
        _shell(code, "page.md:1")
    except SystemExit as refused:
        return str(refused)
    return None


def test_the_extras_of_an_install_from_a_checkout_or_a_wheel_are_checked() -> None:
    # The forms a reader uses before asyncdl is on PyPI: each names extras that must exist.
    for line in [
        "pip install -e '.[cli,no-such-extra]'",
        "pip install '.nox/build/tmp/dist/asyncdl-0.1.0-py3-none-any.whl[no-such-extra]'",
        "pip install 'asyncdl[no-such-extra]'",
    ]:
        refusal = _shell_refusal(line)
        assert refusal is not None, line
        assert "no-such-extra" in refusal, line
    for line in [
        "pip install -e '.[cli,demo]'",
        "pip install '.nox/build/tmp/dist/asyncdl-0.1.0-py3-none-any.whl[cli]'",
        "pip install asyncdl",
    ]:
        assert _shell_refusal(line) is None, line
        assert _shell(line, "page.md:1") == ":\n"


def test_making_and_entering_a_virtual_environment_is_shown_not_run() -> None:
    # The suite already runs in one; making another would cost seconds per page and
    # entering it would hide the command under test.
    script = "python3 -m venv .venv\n. .venv/bin/activate\nsource .venv/bin/activate\nls\n"
    assert _shell(script, "page.md:1") == ":\n:\n:\nls\n"
