"""QuickIO's judgement of the file system: slow calls move file calls off the loop, a
garbage collection or one delayed call does not, and the loop is tried again."""

from __future__ import annotations

import gc
import time

import pytest

from asyncdl import quick_io
from asyncdl.quick_io import QuickIO


def sleeping(seconds: float) -> None:
    """A file call that blocks, as one on NFS or a stalled disk does."""
    time.sleep(seconds)


def collecting() -> None:
    """A quick call during which a garbage collection runs, and takes long."""
    gc.collect()
    time.sleep(0.005)  # the collection's time, made long enough for any machine


def test_a_collection_during_a_call_is_not_a_slow_file_system() -> None:
    policy = QuickIO()
    for _ in range(5):
        policy.timed(collecting)
        assert policy.allowed()


def test_collections_are_counted() -> None:
    before = quick_io.collections()
    gc.collect()
    assert quick_io.collections() > before


def test_blocking_calls_move_the_next_ones_off_the_loop() -> None:
    policy = QuickIO()
    policy.timed(lambda: sleeping(0.005))
    assert policy.allowed()  # one: maybe the scheduler
    policy.timed(lambda: sleeping(0.005))
    assert not policy.allowed()


def test_slow_calls_between_quick_ones_still_trip() -> None:
    # On NFS a stat answered from the attribute cache is quick, a create is not: one
    # object's quick check between two slow publishes must not hide the publishes.
    policy = QuickIO()
    for _ in range(3):
        policy.took(0.0001)
        assert policy.allowed()
        policy.took(0.05)
    assert not policy.allowed()


def test_an_occasional_slow_call_never_trips() -> None:
    # A busy machine delays a call now and then: one in five, for as long as it lasts.
    policy = QuickIO()
    for _ in range(200):
        policy.took(0.05)
        for _ in range(4):
            policy.took(0.0001)
        assert policy.allowed()


def test_off_the_loop_for_a_time_not_a_number_of_calls() -> None:
    # The loop stalls for two slow calls each time it is tried again: how often that
    # may happen is a matter of time, whatever the rate of calls.
    policy = QuickIO()
    policy.OFF_LOOP = 0.2
    policy.took(0.05)
    policy.took(0.05)
    assert not any(policy.allowed() for _ in range(10_000))
    time.sleep(0.25)
    assert policy.allowed()


def off_for(policy: QuickIO) -> float:
    """Trip ``policy`` with two slow calls; the seconds it then stays off the loop, and
    its time made up (as if that long had passed)."""
    policy.took(0.05)
    policy.took(0.05)
    assert not policy.allowed()
    seconds = policy._off - time.monotonic()
    policy._off = time.monotonic() - 0.001
    assert policy.allowed()
    return seconds


def test_a_file_system_still_slow_stays_off_the_loop_longer() -> None:
    policy = QuickIO()
    policy.OFF_LOOP = 0.1
    windows = [off_for(policy) for _ in range(3)]
    assert windows == pytest.approx([0.1, 0.2, 0.4], abs=0.01)
    # Quick again: the next trip starts from the shortest time.
    policy.took(0.0001)
    assert off_for(policy) == pytest.approx(0.1, abs=0.01)


def test_the_longest_time_off_the_loop_is_bounded() -> None:
    policy = QuickIO()
    windows = [off_for(policy) for _ in range(12)]
    assert max(windows) <= QuickIO.MAX_OFF_LOOP
    assert windows[-1] == pytest.approx(QuickIO.MAX_OFF_LOOP, abs=0.01)
