"""QuickIO's judgement of the file system: slow calls move file calls off the loop, a
garbage collection or one delayed call does not, and the loop is tried again."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from asyncdl._files import quick_io
from asyncdl._files.quick_io import QuickIO, QuickWrites


def sleeping(seconds: float) -> None:
    """A file call that blocks, as one on NFS or a stalled disk does."""
    time.sleep(seconds)


@pytest.fixture
def slow_collections() -> Iterator[None]:
    """Every garbage collection takes 5 ms more, long enough to be slow on any machine:
    a callback of the collector's own, appended after quick_io's (which times what runs
    between its start and its stop)."""

    def linger(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            time.sleep(0.005)

    gc.callbacks.append(linger)
    try:
        yield
    finally:
        gc.callbacks.remove(linger)


@pytest.mark.usefixtures("slow_collections")
def test_a_collection_during_a_call_is_not_a_slow_file_system() -> None:
    policy = QuickIO()
    for _ in range(5):
        policy.timed(gc.collect)
        assert policy.allowed()


@pytest.mark.usefixtures("slow_collections")
def test_a_stall_is_one_though_another_thread_collected_meanwhile() -> None:
    # A collection in another thread while the loop's call blocks in the kernel took
    # none of that call's time: the stall still counts, less the collection's time at
    # most. (The loop of a FastAPI service shares its process with worker threads;
    # the suite's with moto's server.)
    policy = QuickWrites()
    collector = threading.Thread(target=gc.collect)

    def stalled_write() -> None:
        collector.start()
        collector.join()
        time.sleep(policy.STALL * 2)

    policy.timed(stalled_write)
    assert not policy.allowed()


class HeldCollection:
    """A collection in a thread of its own that stops, once begun, until released: as
    one whose finalizer blocks (it gives up the GIL, and other threads run meanwhile)."""

    def __init__(self, *, wait_for: threading.Event | None = None) -> None:
        self.began, self.release, self.ended = (threading.Event() for _ in range(3))
        self._wait_for = wait_for
        self.thread = threading.Thread(target=self._collect)

    def _collect(self) -> None:
        if self._wait_for is not None:
            self._wait_for.wait(5)
        gc.collect()

    def _hold(self, phase: str, info: dict[str, Any]) -> None:
        if threading.current_thread() is not self.thread:
            return
        if phase == "start":
            self.began.set()
            self.release.wait(5)
        else:  # after quick_io's own callback: the collection is over for it too
            self.ended.set()

    def __enter__(self) -> HeldCollection:
        gc.callbacks.append(self._hold)
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self.thread.join()
        gc.callbacks.remove(self._hold)


def test_a_collection_under_way_as_a_call_begins_takes_off_only_their_overlap() -> None:
    policy = QuickWrites()
    with HeldCollection() as held:
        assert held.began.wait(5)
        time.sleep(0.2)  # collecting well before the call

        def stalled_write() -> None:
            held.release.set()  # the collection ends as the write begins
            assert held.ended.wait(5)  # (its work, however long the heap makes it)
            time.sleep(policy.STALL * 3)

        policy.timed(stalled_write)
    assert not policy.allowed()


def test_a_collection_still_under_way_as_a_call_ends_takes_off_their_overlap() -> None:
    policy = QuickWrites()
    go = threading.Event()
    with HeldCollection(wait_for=go) as held:

        def write_waiting_for_the_collection() -> None:
            go.set()
            assert held.began.wait(5)
            time.sleep(policy.STALL * 2)  # the time the collection took from the call

        policy.timed(write_waiting_for_the_collection)
    assert policy.allowed()


@pytest.mark.usefixtures("slow_collections")
def test_a_call_is_slow_by_its_own_time_less_a_collection_in_it() -> None:
    policy = QuickIO()

    def collecting_then_blocking() -> None:
        gc.collect()
        time.sleep(policy.LIMIT * 2)

    policy.timed(collecting_then_blocking)
    policy.timed(collecting_then_blocking)
    assert not policy.allowed()


@pytest.mark.usefixtures("slow_collections")
def test_collections_are_timed() -> None:
    before = quick_io._collected_until(time.perf_counter())
    gc.collect()
    assert quick_io._collected_until(time.perf_counter()) > before


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
