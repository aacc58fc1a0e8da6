"""The scheduler loop's pacing (`loop.rest_s`): at once after a quiet spell, a rest as long as
the shorter of the last two cycles under a stream of changes, never more than the cap."""

from __future__ import annotations

import pytest

from gpucarve.kube.scheduler.loop import rest_s


def test_a_change_after_a_quiet_spell_gets_its_cycle_at_once() -> None:
    # the last cycle took 20 ms and ended a second ago
    assert rest_s(0.05, ended=10.0, took=(0.02, 0.02), now=11.0) == 0.0


def test_right_after_a_cycle_the_loop_rests_as_long_as_it_took() -> None:
    assert rest_s(0.05, ended=10.0, took=(0.02, 0.02), now=10.0) == pytest.approx(0.02)
    # what is left of it, 5 ms on
    assert rest_s(0.05, ended=10.0, took=(0.02, 0.02), now=10.005) == pytest.approx(0.015)


def test_one_slow_cycle_does_not_double_its_delay() -> None:
    # the last cycle took 40 ms (the machine was busy), the one before 10 ms: rest 10 ms
    assert rest_s(0.05, ended=10.0, took=(0.01, 0.04), now=10.0) == pytest.approx(0.01)
    assert rest_s(0.05, ended=10.0, took=(0.04, 0.01), now=10.0) == pytest.approx(0.01)


def test_the_rest_is_capped() -> None:
    assert rest_s(0.05, ended=10.0, took=(0.9, 1.2), now=10.0) == pytest.approx(0.05)
    assert rest_s(0.0, ended=10.0, took=(0.9, 1.2), now=10.0) == 0.0
