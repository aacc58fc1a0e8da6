"""A gang running short of its minimum releases what it holds once it has been short for its
timeout; within it, or without a timeout, it keeps its pods; the released GPUs serve others
only after the gang's pods have exited."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import PartialGang
from gpucarve.engine import Cause, Stage, run_cycle
from gpucarve.engine.apply import apply
from gpucarve.engine.gang_timeout import default_timeout_s
from gpucarve.engine.invariants import check_step
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 3, 8)],
    queues=[queue("r", {"h100-full": {"nominal": 24}})],
    priorityClasses=[
        {"name": "batch", "value": 10, "preemptible": True, "default": True},
        {"name": "critical", "value": 100, "preemptible": False},
    ],
)


def _broken(timeout: int | None = None, priority: str | None = None) -> Snapshot:
    """A 3-pod gang of which one pod runs (two failed and came back pending) since t=100,
    and a small job waiting for room."""
    part = workload(P, "g", "r", gpus=8, pods=1, priority=priority)
    if timeout is not None:
        part = dataclasses.replace(part, timeout_s=timeout)
    _, s = cycle(snapshot(P, [part]))
    filler = workload(P, "fill", "r", gpus=8, pods=2, submit=1)
    _, s = cycle(submit(s, filler))
    rest = dataclasses.replace(
        workload(P, "g-rest", "r", gpus=8, pods=2, submit=100, priority=priority),
        id="r/g+rest",
        timeout_s=timeout,
    )
    small = workload(P, "small", "r", gpus=8, pods=1, submit=150)
    gang = PartialGang(missing=2, since=100, gpus=24, rest=rest.id)
    return dataclasses.replace(submit(s, rest, small), partial=MappingProxyType({part.id: gang}))


def test_default_timeouts_follow_the_gang_size() -> None:
    assert [default_timeout_s(g) for g in (1, 8, 16, 31, 32, 256)] == [
        600, 600, 900, 900, 1800, 1800,
    ]  # fmt: skip


def test_a_short_gang_keeps_its_pods_within_its_timeout() -> None:
    s = _broken()
    result = run_cycle(s, 100 + 899)  # 24 GPUs: 900 s
    assert result.evictions == ()
    assert "r/g+rest" in {p.workload for p in result.pending}


def test_a_short_gang_past_its_timeout_is_released_and_says_why() -> None:
    s = _broken()
    result = run_cycle(s, 100 + 900)
    check_step(s, result, apply(s, result))
    (ev,) = result.evictions
    assert (ev.workload, ev.cause) == ("r/g", Cause.TIMEOUT)
    assert "1 pods, 2 short of its minimum, for 900 s (timeout 900 s" in ev.message
    reason = result.pending_reason("r/g+rest")
    assert reason is not None and reason.stage is Stage.QUEUEING
    assert reason.plugin == "gang-timeout" and reason.message == ev.message
    # the small job gets the released GPUs, once the gang's pod has gone
    (admission,) = result.admissions
    assert admission.workload == "r/small" and admission.after_evictions == ("r/g",)


def test_an_explicit_timeout_wins_and_applies_to_non_preemptible_gangs() -> None:
    s = _broken(timeout=60, priority="critical")
    result = run_cycle(s, 160)
    assert [e.workload for e in result.evictions] == ["r/g"]
    assert "scheduleTimeoutSeconds" in result.evictions[0].message


def test_a_non_preemptible_gang_without_a_timeout_keeps_its_pods() -> None:
    s = _broken(priority="critical")
    # (its remainder may still preempt lower priorities to become whole)
    assert not [e for e in run_cycle(s, 100_000).evictions if e.cause is Cause.TIMEOUT]


def test_a_release_is_checked_against_the_snapshot() -> None:
    s = _broken()
    early = run_cycle(dataclasses.replace(s, partial=MappingProxyType({})), 2000)
    assert early.evictions == ()
    late = run_cycle(s, 2000)
    tampered = dataclasses.replace(late, now=200)  # as if released before its timeout
    with pytest.raises(Exception, match="timeout it has not reached"):
        check_step(s, tampered, apply(s, tampered))
