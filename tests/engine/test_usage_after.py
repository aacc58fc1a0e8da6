"""What a cycle's decisions leave held, per queue and flavor (`engine.usage`): asked twice of
the same cycle (the scheduler's metrics and queue statuses do), the second answer is the first
one's, and neither caller can change the other's."""

from __future__ import annotations

import pytest

from gpucarve.engine import usage
from gpucarve.engine.usage import usage_after
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload


def test_the_same_cycle_asked_twice_and_another_cycle_after_it() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    s0 = snapshot(p, [workload(p, "a", "r", gpus=2)])
    first, s = cycle(s0)
    s2 = submit(s, workload(p, "b", "r", gpus=4))
    result, _ = cycle(s2, 10)
    got = usage_after(s2.running, result)
    assert got == {("r", "h100-full"): 6}
    got[("r", "h100-full")] = 99  # a caller's own copy
    again = usage_after(s2.running, result)
    assert again == {("r", "h100-full"): 6}
    again[("r", "h100-full")] = 99  # the remembered answer's copy, too
    assert usage_after(s2.running, result) == {("r", "h100-full"): 6}
    # another cycle's decisions are worked out anew, not taken from the last answer
    assert usage_after(s0.running, first) == {("r", "h100-full"): 2}
    assert usage_after(s2.running, result) == {("r", "h100-full"): 6}


def test_the_running_pods_are_passed_over_once_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    result, s = cycle(snapshot(p, [workload(p, "a", "r", gpus=2)]))
    calls = []
    real = usage._usage_after
    monkeypatch.setattr(usage, "_usage_after", lambda *a: calls.append(a) or real(*a))
    for _ in range(3):
        usage_after(s.running, result)
    assert len(calls) == 1
