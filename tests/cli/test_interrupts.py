"""asyncdl._interrupts: which signals a command's run takes over, and that it gives them back.

Stopping a real process with them is tested on the command (tests/cli/test_cli.py,
tests/face/test_demo.py); here the run sends no signal, it only looks at dispositions.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from asyncdl import _interrupts as interrupts


def own_handler(signum: int, frame: Any) -> None: ...


Disposition = Callable[[int, Any], Any] | int | signal.Handlers | None


@pytest.fixture
def sigterm() -> Iterator[Callable[[Disposition], None]]:
    """Set this process's SIGTERM disposition for the test; put the old one back."""
    previous = signal.getsignal(signal.SIGTERM)

    def set_to(disposition: Disposition) -> None:
        signal.signal(signal.SIGTERM, disposition)

    yield set_to
    signal.signal(signal.SIGTERM, previous)


async def disposition_while_running() -> Disposition:
    return signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize(
    "before", [signal.SIG_IGN, own_handler], ids=["inherited as ignored", "someone else's"]
)
def test_a_signal_not_at_its_default_is_left_alone(
    sigterm: Callable[[Disposition], None], before: Disposition
) -> None:
    sigterm(before)
    assert interrupts.run(disposition_while_running()) is before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_default_signal_is_taken_while_running_and_given_back(
    sigterm: Callable[[Disposition], None],
) -> None:
    sigterm(signal.SIG_DFL)
    during = interrupts.run(disposition_while_running())
    assert during not in (signal.SIG_DFL, signal.SIG_IGN)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_exit_status_is_128_plus_the_signal() -> None:
    assert interrupts.Stopped(signal.SIGINT).exit_status == 130
    assert interrupts.Stopped(signal.SIGTERM).exit_status == 143
    assert str(interrupts.Stopped(signal.SIGTERM)) == "stopped by SIGTERM"
