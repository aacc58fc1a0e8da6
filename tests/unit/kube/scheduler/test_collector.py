"""The scheduler's garbage collection between cycles (`kube/scheduler/collector.py`): off
automatically while the loop runs, the young generation after each cycle, the middle one every
`MIDDLE_EVERY` cycles, the whole heap after the first cycle, after a quiet spell once
`WHOLE_QUIET_S` has passed or at the latest every `WHOLE_LATEST_S` (what the loop starts with,
and what survives each whole collection, frozen out of the others), none while bindings are in
flight (for a while); and put back as it was."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gpucarve.kube.scheduler.collector import (
    DEFER_AT_MOST,
    MIDDLE_EVERY,
    WHOLE_LATEST_S,
    WHOLE_QUIET_S,
    Collector,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gc_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_collection_is_off_while_the_loop_runs_and_put_back_after(gc_on: None) -> None:
    c = Collector(Clock())
    c.begin()
    assert not gc.isenabled()
    c.end()
    assert gc.isenabled()
    gc.disable()  # off before: it stays off
    c.begin()
    c.end()
    assert not gc.isenabled()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_a_cycles_garbage_in_reference_cycles_is_collected_after_it(gc_on: None) -> None:
    c = Collector(Clock())
    c.begin()
    try:
        assert c.after_cycle(quiet=False) == 2  # the first cycle's index, frozen
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # nothing collects it by itself now
        assert c.after_cycle(quiet=False) == 0
        assert gone() is None
    finally:
        c.end()


def test_the_generations_follow_the_cycles_and_the_clock(gc_on: None) -> None:
    clock = Clock()
    c = Collector(clock)
    c.begin()
    try:
        assert c.after_cycle(quiet=False) == 2  # after the first cycle, the whole heap
        got = [c.after_cycle(quiet=False) for _ in range(2 * MIDDLE_EVERY - 1)]
        middle = [i + 2 for i, g in enumerate(got) if g == 1]  # counting the first
        assert middle == [MIDDLE_EVERY, 2 * MIDDLE_EVERY] and 2 not in got
        # a quiet spell before WHOLE_QUIET_S: no whole collection; after it: one
        clock.now += WHOLE_QUIET_S - 1
        assert c.after_cycle(quiet=True) == 0
        clock.now += 1
        assert c.after_cycle(quiet=False) == 0  # not quiet: it waits
        assert c.after_cycle(quiet=True) == 2
        assert c.after_cycle(quiet=True) == 0  # counted from that one
        # never quiet: the whole heap at the latest every WHOLE_LATEST_S
        clock.now += WHOLE_LATEST_S - 1
        assert c.after_cycle(quiet=False) in (0, 1)
        clock.now += 1
        assert c.after_cycle(quiet=False) == 2
    finally:
        c.end()


def test_no_collection_starts_while_bindings_are_in_flight_for_long(gc_on: None) -> None:
    """A collection holds the binder's threads too: a gang stopped half-way would show bound
    in part. It waits for a cycle without bindings in flight, `DEFER_AT_MOST` cycles at most."""
    c = Collector(Clock())
    c.begin()
    try:
        assert c.after_cycle(quiet=False) == 2
        got = [c.after_cycle(quiet=False, binding=True) for _ in range(DEFER_AT_MOST + 1)]
        assert got == [None] * DEFER_AT_MOST + [0]
        assert c.after_cycle(quiet=False, binding=True) is None  # counted afresh
        assert c.after_cycle(quiet=False, binding=False) == 0
    finally:
        c.end()


def test_what_the_loop_starts_with_is_frozen_and_the_whole_collection_reaches_it(
    gc_on: None,
) -> None:
    """The informers' first lists are walked by no young or middle collection (frozen when the
    loop begins); garbage among them is still found by the whole heap's collection, which
    freezes what survives; `end` puts every object back."""
    clock = Clock()
    c = Collector(clock)
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    c.begin()
    try:
        assert gc.get_freeze_count() > 0
        assert c.after_cycle(quiet=False) == 2  # the first cycle's: a, b frozen again
        del a, b  # garbage now, among the frozen
        for _ in range(MIDDLE_EVERY):
            assert c.after_cycle(quiet=False) in (0, 1)
        assert gone() is not None  # no young or middle collection walks the frozen
        clock.now += WHOLE_LATEST_S
        assert c.after_cycle(quiet=False) == 2
        assert gone() is None
        assert gc.get_freeze_count() > 0  # the survivors set aside again
    finally:
        c.end()
    assert gc.get_freeze_count() == 0
