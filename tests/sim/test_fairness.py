"""The fairness figures of a simulated run (`sim/run/fairness.py`): shares received against
shares entitled per cohort and pool, Jain's index per hour, the hours a queue below its share
waited while another ran above its own; and, with `scheduling.usageHalfLifeSeconds`, a queue
that borrowed yields the next loan to one that did not."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.core.policy import Policy
from gpucarve.sim.run.fairness import entitled
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload

HOUR = 3600


def test_entitlement_fills_by_nominal_then_by_weight_up_to_demand() -> None:
    nominal = {"a": 8.0, "b": 8.0, "c": 0.0}
    weight = {"a": 1.0, "b": 1.0, "c": 2.0}
    # b asks nothing: a keeps its 8, and b's 8 go to a and c by weight (1:2)
    got = entitled(16.0, nominal, weight, {"a": 20.0, "c": 20.0})
    assert got == pytest.approx({"a": 8 + 8 / 3, "c": 16 / 3})
    # c wants only 2: the rest of its part goes round to a
    got = entitled(16.0, nominal, weight, {"a": 20.0, "c": 2.0})
    assert got == pytest.approx({"a": 14.0, "c": 2.0})
    # nobody wants more than it owns: each is owed its demand
    assert entitled(16.0, nominal, weight, {"a": 3.0, "b": 5.0}) == {"a": 3.0, "b": 5.0}


def _policy(**scheduling: Any) -> Policy:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="all"),
        ],
        scheduling={"minRuntimeSeconds": 0, **scheduling},
    )


def test_a_queue_kept_from_its_share_is_measured_so() -> None:
    # a holds both nodes for two hours; b asks for one an hour in and, with preemption off,
    # waits for a to end
    p = _policy(preemption=False)
    ws = [
        workload(p, "all", "a", gpus=8, pods=2, duration=2 * HOUR),
        workload(p, "one", "b", gpus=8, submit=HOUR, duration=HOUR),
    ]
    result = Simulator(p, ws).run()
    f = summarize(result, {}, (0, 3 * HOUR))["fairness"]["all"]["train"]
    a, b = f["queues"]["a"], f["queues"]["b"]
    # hour 1: a alone is owed everything and gets it; hour 2: each is owed half, a holds all;
    # hour 3: b alone
    assert f["gpus"] == 16
    assert a["share_received"] == pytest.approx(2 / 3, abs=0.01)
    assert a["share_entitled"] == pytest.approx(1 / 2, abs=0.01)
    assert b["share_entitled"] == pytest.approx(1 / 3, abs=0.01)
    assert b["share_received"] == pytest.approx(1 / 6, abs=0.01)
    assert b["deviation_worst_hour"] == pytest.approx(0.5, abs=0.01)
    assert b["hours_below_share_while_another_above"] == pytest.approx(1.0, abs=0.1)
    assert a["hours_below_share_while_another_above"] == 0
    # Jain per hour: 1 alone, (0 + 2)² / (2 × 4) = 0.5 while b got nothing of its half
    assert f["jain_by_hour"] == [1.0, 0.5, 1.0]
    assert f["jain_worst_hour"] == 0.5


def test_a_queue_given_its_share_deviates_nowhere() -> None:
    p = _policy()
    ws = [
        workload(p, "x", "a", gpus=8, duration=2 * HOUR),
        workload(p, "y", "b", gpus=8, duration=2 * HOUR),
    ]
    result = Simulator(p, ws).run()
    f = summarize(result, {}, (0, 2 * HOUR))["fairness"]["all"]["train"]
    assert f["deviation_worst_hour"] == 0 and f["jain_by_hour"] == [1.0, 1.0]
    assert all(q["hours_below_share_while_another_above"] == 0 for q in f["queues"].values())


def test_baselines_are_judged_by_the_policy_they_stand_in_for() -> None:
    p = _policy(preemption=False)
    ws = [workload(p, "all", "a", gpus=8, pods=2, duration=HOUR)]
    result = Simulator(p, ws).run()
    no_cohorts = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[
            queue("a", {"h100-full": {"nominal": 16}}),
            queue("b", {"h100-full": {"nominal": 0}}),
        ],
    )
    assert summarize(result, {}, (0, HOUR), entitlement=no_cohorts)["fairness"] == {}
    assert summarize(result, {}, (0, HOUR))["fairness"]["all"]["train"]["gpus"] == 16


def _next_loan(half_life: int | None) -> list[str]:
    """a borrows b's node for the first night hours; then both keep asking for more than
    their own: who gets the next loan when the owner's node frees?"""
    extra = {} if half_life is None else {"usageHalfLifeSeconds": half_life}
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 3, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("owner", {"h100-full": {"nominal": 8}}, cohort="all"),
        ],
        scheduling={"minRuntimeSeconds": 0, **extra},
    )
    ws = [workload(p, "night", "a", gpus=8, pods=3, duration=8 * HOUR)]
    # at 09:00 each asks for its own node and one more (a's name breaks the tie: first)
    for i in (1, 2):
        ws.append(workload(p, f"a{i}", "a", gpus=8, submit=9 * HOUR, duration=HOUR))
        ws.append(workload(p, f"b{i}", "b", gpus=8, submit=9 * HOUR, duration=HOUR))
    result = Simulator(p, ws).run()
    started = result.first_start.items()
    return sorted(w for w, t in started if t < 9 * HOUR + 60 and w != "a/night")


def test_with_a_half_life_the_queue_that_borrowed_overnight_yields_the_next_loan() -> None:
    assert _next_loan(None) == ["a/a1", "a/a2", "b/b1"]
    assert _next_loan(6 * HOUR) == ["a/a1", "b/b1", "b/b2"]


def _departments(tree: bool) -> Policy:
    """32 H100s: r (16) and s (8) in department ml when `tree`, b (8) beside it."""
    dept = "ml" if tree else "company"
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[{"name": "company"}, *([{"name": "ml", "parent": "company"}] if tree else [])],
        queues=[
            queue("r", {"h100-full": {"nominal": 16}}, cohort=dept),
            queue("s", {"h100-full": {"nominal": 8}}, cohort=dept),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="company"),
        ],
        scheduling={"minRuntimeSeconds": 0, "preemption": False},
    )


@pytest.mark.parametrize("tree", [False, True])
def test_in_a_tree_a_department_is_owed_its_teams_quota_first(tree: bool) -> None:
    # b holds all 32 for two hours; s asks for all 32 an hour in and waits for b's end, then
    # runs an hour alone. Hour 2: flat, s and b are owed 8 each and r's idle 16 is split by
    # weight (16 each); in the tree, department ml is owed its 24 (r's and s's), all s's
    p = _departments(tree)
    ws = [
        workload(p, "all", "b", gpus=8, pods=4, duration=2 * HOUR),
        workload(p, "all", "s", gpus=8, pods=4, submit=HOUR, duration=HOUR),
    ]
    result = Simulator(p, ws).run()
    f = summarize(result, {}, (0, 3 * HOUR))["fairness"]["company"]["train"]
    s = f["queues"]["s"]
    owed_in_hour_2 = 0.75 if tree else 0.5
    assert s["share_entitled"] == pytest.approx((owed_in_hour_2 + 1) / 3, abs=0.01)
    assert s["share_received"] == pytest.approx(1 / 3, abs=0.01)
    assert s["deviation_worst_hour"] == pytest.approx(owed_in_hour_2, abs=0.01)
    assert ("cohort:ml" in f["queues"]) is tree
    if tree:
        ml = f["queues"]["cohort:ml"]
        assert ml["share_entitled"] == pytest.approx((0.75 + 1) / 3, abs=0.01)
        assert ml["share_received"] == pytest.approx(1 / 3, abs=0.01)
    assert f["gpus"] == 32
