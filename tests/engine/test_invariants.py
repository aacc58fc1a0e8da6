"""The run-time invariant check finds each kind of broken rule (decisions are tampered with
here, since the engine does not break them), and drivers stop at the first one."""

from __future__ import annotations

import dataclasses

import pytest

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import Cause, CycleResult, Engine, run_cycle
from gpucarve.engine.apply import apply
from gpucarve.engine.decisions import Eviction
from gpucarve.engine.invariants import InvariantViolation, check_step, step_violations
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

CLASSES = [
    {"name": "low", "value": 0, "preemptible": True, "default": True},
    {"name": "high", "value": 10, "preemptible": False},
]


def three_queue_policy(nominal: int = 4):  # type: ignore[no-untyped-def]
    return policy(
        pools=[pool("h100", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "c"}],
        queues=[
            queue("a", {"h100-full": {"nominal": nominal, "borrowingLimit": 4}}, cohort="c"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
            queue("solo", {"h100-full": {"nominal": 4}}),
        ],
        priorityClasses=CLASSES,
        scheduling={"minRuntimeSeconds": 300},
    )


def test_a_legal_cycle_breaks_nothing() -> None:
    p = three_queue_policy()
    s = snapshot(p, [workload(p, "w", "a", gpus=2, pods=3)])
    result, after = cycle(s)
    assert result.admitted_ids() == ["a/w"]
    assert step_violations(s, result, after) == []


def test_a_gang_admitted_short_of_its_minimum() -> None:
    p = three_queue_policy()
    s = snapshot(p, [workload(p, "w", "a", gpus=1, pods=4)])
    result, _ = cycle(s)
    adm = result.admissions[0]
    short = dataclasses.replace(adm, pods=adm.pods[:3])
    tampered = dataclasses.replace(result, admissions=(short,))
    broken = step_violations(s, tampered, apply(s, tampered))
    assert any("admitted with 3 pods of main, needs 4..4" in b for b in broken), broken


def test_a_queue_beyond_its_quota() -> None:
    p = three_queue_policy(nominal=4)
    s = snapshot(p, [workload(p, "w", "a", gpus=8)])  # nominal 4 + borrowing 4
    result, after = cycle(s)
    assert result.admitted_ids() == ["a/w"] and step_violations(s, result, after) == []
    tighter = three_queue_policy(nominal=2)  # 2 + 4 < 8: the same decision breaks it
    broken = step_violations(dataclasses.replace(s, policy=tighter), result, after)
    assert broken == ["queue a uses 8 h100-full, beyond nominal 2 + borrowing limit 4"]


def _running(p, name: str, queue_name: str, priority: str, now: int) -> tuple[Snapshot, int]:  # type: ignore[no-untyped-def]
    s = snapshot(p, [workload(p, name, queue_name, gpus=2, priority=priority)])
    _, after = cycle(s, now)
    return after, now


def test_evictions_of_work_the_rules_protect() -> None:
    p = three_queue_policy()
    s, started = _running(p, "guarded", "a", "high", 0)
    s = submit(s, workload(p, "rival", "a", gpus=2, priority="low"))
    ev = Eviction("a/guarded", "a", Cause.PREEMPT, "a/rival", "tampered")
    tampered = CycleResult(now=started + 60, evictions=(ev,))
    broken = step_violations(s, tampered, apply(s, tampered))
    assert "a/guarded evicted but it is not preemptible" in broken
    assert "a/guarded evicted after 60 s, too young" in broken
    assert "a/guarded preempted by a/rival, not a higher priority of its queue" in broken


def test_a_reclaim_from_a_queue_that_did_not_borrow() -> None:
    p = three_queue_policy()
    s, _ = _running(p, "inside", "a", "low", 0)  # 2 of a's nominal 4: no borrowing
    s = submit(s, workload(p, "taker", "b", gpus=2))
    ev = Eviction("a/inside", "a", Cause.RECLAIM, "b/taker", "tampered")
    tampered = CycleResult(now=1000, evictions=(ev,))
    broken = step_violations(s, tampered, apply(s, tampered))
    assert broken == ["a/inside reclaimed by b/taker although a did not borrow"]
    with pytest.raises(InvariantViolation, match=r"cycle at t=1000: a/inside reclaimed"):
        check_step(s, tampered, apply(s, tampered))


def test_a_move_that_places_nothing_or_of_work_that_would_not_come_back() -> None:
    p = three_queue_policy()
    s, _ = _running(p, "kept", "a", "low", 0)
    s = submit(s, workload(p, "gang", "a", gpus=2))
    ev = Eviction("a/kept", "a", Cause.CONSOLIDATE, "a/gang", "tampered")
    placed = run_cycle(s, 1000)  # the gang fits beside it: admitted, nothing moved
    assert placed.admitted_ids() == ["a/gang"]
    moved = dataclasses.replace(placed, evictions=(ev,))
    assert step_violations(s, moved, apply(s, moved)) == []  # a legal move, as far as it goes
    alone = CycleResult(now=1000, evictions=(ev,))  # the gang it was moved for not placed
    broken = step_violations(s, alone, apply(s, alone))
    assert broken == ["a/kept moved for a/gang, which it may not be or was not placed"]
    rw = s.running[0]
    bare = dataclasses.replace(rw, workload=dataclasses.replace(rw.workload, restartable=False))
    s = dataclasses.replace(s, running=(bare,))
    broken = step_violations(s, moved, apply(s, moved))
    assert broken == ["a/kept moved for a/gang, which it may not be or was not placed"]


def test_a_slice_allocated_twice_is_refused_when_applied() -> None:
    p = three_queue_policy()
    s = snapshot(p, [workload(p, "w", "a", gpus=2)])
    result, after = cycle(s)
    again = dataclasses.replace(after, pending=s.pending)  # the same decision applied twice
    with pytest.raises(InvariantViolation, match="allocated twice"):
        apply(again, result)


def test_the_simulator_stops_at_the_first_broken_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    p = three_queue_policy()
    ws = [workload(p, f"w{i}", "a", gpus=2, submit=i * 100, duration=5000) for i in range(3)]
    assert Simulator(p, ws, config=SimConfig(check_invariants=True)).run().completed

    real = Engine.run_cycle

    def evict_the_young(self: Engine, s: Snapshot, now: int) -> CycleResult:
        result = real(self, s, now)
        victims = tuple(
            Eviction(rw.workload.id, "a", Cause.PREEMPT, rw.workload.id, "tampered")
            for rw in s.running[:1]
        )
        return dataclasses.replace(result, evictions=victims)

    monkeypatch.setattr(Engine, "run_cycle", evict_the_young)
    with pytest.raises(InvariantViolation, match="too young"):
        Simulator(p, ws, config=SimConfig(check_invariants=True)).run()
