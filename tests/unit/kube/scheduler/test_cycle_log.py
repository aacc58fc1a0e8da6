"""The cycles' bindings and evictions in the log (`kube/scheduler/cycle_log.py`): the first
cycle that binds or evicts after `every_s` without a line is written at once, the ones after it
are summed into one line written by the first cycle once `every_s` has passed, and cycles that
did nothing write nothing of their own."""

from __future__ import annotations

import logging

import pytest

from gpucarve.kube.scheduler.cycle_log import CycleLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    out = [r.getMessage() for r in caplog.records if r.name == "gpucarve.scheduler"]
    caplog.clear()
    return out


def test_the_first_is_written_at_once_and_the_rest_summed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpucarve.scheduler")
    clock = Clock()
    c = CycleLog(clock, every_s=10.0)
    c.cycle(1, 0, 0, 3)
    assert _lines(caplog) == []  # nothing bound or evicted: nothing to say
    c.cycle(2, 2, 0, 1)
    assert _lines(caplog) == ["cycle 2: 2 pods bound, 0 workloads evicted, 1 pending"]
    clock.now += 1
    c.cycle(3, 1, 0, 4)
    clock.now += 1
    c.cycle(4, 0, 1, 4)
    clock.now += 1
    c.cycle(5, 0, 0, 4)
    assert _lines(caplog) == []  # within every_s of the last line
    clock.now += 7
    c.cycle(6, 0, 0, 2)  # a cycle that did nothing writes what the others did
    assert _lines(caplog) == [
        "cycles 3-4: 1 pods bound, 1 workloads evicted in 2 cycles, 2 pending"
    ]
    clock.now += 30
    c.cycle(7, 0, 0, 2)
    assert _lines(caplog) == []  # nothing since: no line, however long
    c.cycle(8, 5, 0, 0)
    assert _lines(caplog) == ["cycle 8: 5 pods bound, 0 workloads evicted, 0 pending"]
