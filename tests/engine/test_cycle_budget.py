"""A cycle that has placed `scheduling.maxPodsPerCycle` pods leaves what it has not tried for
the next cycle (the reason `queueing/cycle-budget`, `CycleStats.deferred`), in the order it
would have tried it; the simulator runs that next cycle at the same instant, so a backlog is
placed in bounded cycles without waiting longer for it."""

from __future__ import annotations

from gpucarve.core.policy import DEFAULT_MAX_PODS_PER_CYCLE, Policy
from gpucarve.engine import Engine, run_whole_cycle
from gpucarve.engine.apply import apply
from gpucarve.engine.decisions import IdleCause, Plugin, Stage
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, snapshot, workload


def budget_policy(budget: int | None) -> Policy:
    return policy(
        pools=[pool("h", "H100-SXM5-80GB", 4, 8)],
        queues=[queue("a", {"h100-full": {"nominal": 32}})],
        scheduling={"maxPodsPerCycle": budget},
    )


def test_the_default_bounds_a_cycle() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("a", {"h100-full": {"nominal": 8}})],
    )
    assert p.scheduling.max_pods_per_cycle == DEFAULT_MAX_PODS_PER_CYCLE


def test_a_cycle_stops_at_its_budget_and_the_next_goes_on_where_it_stopped() -> None:
    p = budget_policy(3)
    ws = [workload(p, f"w{i}", "a", gpus=1, submit=i) for i in range(7)]
    s = snapshot(p, ws)
    engine = Engine()
    order: list[str] = []
    for expect_admitted, expect_deferred in ((3, 4), (3, 1), (1, 0)):
        result = engine.run_cycle(s, 10)
        assert [a.workload for a in result.admissions] == [
            w.id for w in ws[len(order) : len(order) + expect_admitted]
        ]
        order += [a.workload for a in result.admissions]
        assert result.stats.deferred == expect_deferred
        untried = [p for p in result.pending if p.reason.plugin is Plugin.CYCLE_BUDGET]
        assert len(untried) == expect_deferred
        for pend in untried:
            assert pend.reason.stage is Stage.QUEUEING
            assert "scheduling.maxPodsPerCycle 3" in pend.reason.message
        s = apply(s, result)
    assert order == [w.id for w in ws]  # submit order, as one unbounded cycle takes them


def test_a_gang_larger_than_the_budget_is_placed_whole() -> None:
    p = budget_policy(2)
    gang = workload(p, "gang", "a", gpus=1, pods=5)
    after = workload(p, "after", "a", gpus=1, submit=1)
    result = Engine().run_cycle(snapshot(p, [gang, after]), 0)
    assert [a.workload for a in result.admissions] == [gang.id]
    assert len(result.admissions[0].pods) == 5
    assert result.stats.deferred == 1


def test_free_gpus_left_by_the_budget_are_idle_for_it() -> None:
    p = budget_policy(1)
    ws = [workload(p, f"w{i}", "a", gpus=1, submit=i) for i in range(3)]
    result = Engine().run_cycle(snapshot(p, ws), 0)
    causes = {i.cause for i in result.idle}
    assert causes == {IdleCause.CYCLE_BUDGET}


def test_no_budget_places_the_backlog_in_one_cycle() -> None:
    p = budget_policy(None)
    ws = [workload(p, f"w{i}", "a", gpus=1, submit=i) for i in range(7)]
    result = Engine().run_cycle(snapshot(p, ws), 0)
    assert len(result.admissions) == 7 and result.stats.deferred == 0


def test_the_simulator_runs_the_next_cycle_at_the_same_instant() -> None:
    bounded, unbounded = budget_policy(2), budget_policy(None)
    runs = {}
    for name, p in (("bounded", bounded), ("unbounded", unbounded)):
        ws = [workload(p, f"w{i}", "a", gpus=2, duration=600, submit=0) for i in range(9)]
        runs[name] = Simulator(p, ws).run()
    # 32 GPUs: all nine start at once either way, in 5 cycles of at most 2 pods or in one
    assert runs["bounded"].first_start == runs["unbounded"].first_start
    assert set(runs["bounded"].first_start.values()) == {0}
    assert runs["bounded"].cycles > runs["unbounded"].cycles


def test_a_whole_cycle_tries_everything_for_plan_and_explain() -> None:
    p = budget_policy(2)
    ws = [workload(p, f"w{i}", "a", gpus=1, submit=i) for i in range(5)]
    result = run_whole_cycle(snapshot(p, ws), 0)
    assert len(result.admissions) == 5 and result.stats.deferred == 0
