"""GPUs held but idle (`queues[].idleness`): work idle past the warning window is warned and
goes first among reclaim's victims; past the reclaim window, work waiting for its GPUs takes
them, whatever its queue, while the idle work's queue borrows what it holds; work within its
queue's nominal quota, non-preemptible work and a rule without a reclaim window only warn."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpucarve.core.held_idle import IdleStage
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import run_cycle
from gpucarve.engine.decisions import Cause
from gpucarve.engine.explain import explain
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

RULE = {"activityBelow": 5, "warnAfterSeconds": 600, "reclaimAfterSeconds": 1800}


def _policy(rule: dict[str, Any] | None = RULE, preemptible: bool = True) -> Any:
    extra = {} if rule is None else {"idleness": rule}
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("notebooks", {"h100-full": {"nominal": 2, "borrowingLimit": 8}}, "lab", **extra),
            queue("owner", {"h100-full": {"nominal": 6}}, cohort="lab"),
            queue("train", {"h100-full": {"nominal": 0, "borrowingLimit": 8}}, cohort="lab"),
        ],
        priorityClasses=[
            {"name": "work", "value": 1, "preemptible": preemptible, "default": True},
        ],
        scheduling={"minRuntimeSeconds": 0},
    )


def _running(p: Any, notebooks: int) -> Snapshot:
    """`notebooks` 2-GPU notebooks running from 0 s (the first within nominal quota)."""
    ws = [workload(p, f"nb-{i}", "notebooks", gpus=2, submit=i) for i in range(notebooks)]
    _, s = cycle(snapshot(p, ws))
    return s


def _idle(s: Snapshot, **since: int) -> Snapshot:
    return dataclasses.replace(s, idle_since={f"notebooks/{k}": v for k, v in since.items()})


def test_idle_borrowed_work_is_reclaimed_for_work_that_would_borrow_itself() -> None:
    # train borrows too, so plain reclaim (a queue within its nominal quota) takes nothing
    p = _policy()
    s = _idle(submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10)), **{"nb-3": 0})
    result, _ = cycle(s, 2000)
    assert [(e.workload, e.cause) for e in result.evictions] == [("notebooks/nb-3", Cause.IDLE)]
    msg = result.evictions[0].message
    assert "below 5% activity for 2000s" in msg and "reclaimAfterSeconds (1800s)" in msg
    assert "queue notebooks was borrowing h100-full" in msg
    assert "train/job" in [a.workload for a in result.admissions]


def test_without_the_rule_nothing_is_reclaimed() -> None:
    p = _policy(None)
    s = _idle(submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10)), **{"nb-3": 0})
    result, _ = cycle(s, 2000)
    assert result.evictions == () and result.held_idle == ()


def test_before_the_reclaim_window_it_is_warned_only() -> None:
    p = _policy()
    s = _idle(submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10)), **{"nb-3": 0})
    result, _ = cycle(s, 1000)
    assert result.evictions == ()
    (h,) = result.held_idle
    assert (h.workload, h.stage, h.reclaim_at) == ("notebooks/nb-3", IdleStage.WARNED, 1800)
    assert "may reclaim it in 800s" in h.message


def test_within_the_warning_window_it_is_not_judged() -> None:
    p = _policy()
    s = _idle(submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10)), **{"nb-3": 0})
    result, _ = cycle(s, 599)
    assert result.held_idle == () and result.evictions == ()


def test_nobody_waiting_nothing_is_reclaimed() -> None:
    p = _policy()
    result, _ = cycle(_idle(_running(p, 4), **{"nb-3": 0}), 5000)
    assert result.evictions == ()
    assert [h.stage for h in result.held_idle] == [IdleStage.RECLAIMABLE]


def _within_quota(rule: dict[str, Any], preemptible: bool = True) -> tuple[Any, Snapshot]:
    """One idle notebook within its queue's nominal quota; owner's work fills the other six
    GPUs; train waits for two."""
    p = _policy(rule, preemptible)
    nb = workload(p, "nb-0", "notebooks", gpus=2)
    own = [workload(p, f"own-{i}", "owner", gpus=2, submit=i) for i in range(3)]
    _, s = cycle(snapshot(p, [nb, *own]))
    s = _idle(submit(s, workload(p, "job", "train", gpus=2, submit=10)), **{"nb-0": 0})
    return p, s


@pytest.mark.parametrize(("rule", "preemptible", "reclaimed", "why"), [
    (RULE, True, False, "within its queue's nominal quota"),
    ({**RULE, "withinQuota": "reclaim"}, True, True, "idleness.withinQuota: reclaim"),
    ({**RULE, "withinQuota": "reclaim"}, False, False, "not preemptible"),
    ({**RULE, "reclaimAfterSeconds": None, "withinQuota": "reclaim"}, True, False,
     "only warns"),
])  # fmt: skip
def test_within_quota_non_preemptible_and_warn_only_rules(
    rule: dict[str, Any], preemptible: bool, reclaimed: bool, why: str
) -> None:
    _, s = _within_quota(rule, preemptible)
    result, _ = cycle(s, 5000)
    if reclaimed:
        assert [(e.workload, e.cause) for e in result.evictions] == [("notebooks/nb-0", Cause.IDLE)]
        assert why in result.evictions[0].message
    else:
        assert result.evictions == ()
        (h,) = result.held_idle
        assert h.stage is IdleStage.WARNED and h.reclaim_at is None and why in h.message


def test_warned_work_goes_first_among_reclaim_victims() -> None:
    p = _policy({**RULE, "reclaimAfterSeconds": None})
    s = submit(_running(p, 4), workload(p, "mine", "owner", gpus=2, submit=10))
    plain, _ = cycle(s, 1000)
    assert [(e.workload, e.cause) for e in plain.evictions] == [("notebooks/nb-3", Cause.RECLAIM)]
    warned, _ = cycle(_idle(s, **{"nb-1": 0}), 1000)
    assert [(e.workload, e.cause) for e in warned.evictions] == [("notebooks/nb-1", Cause.RECLAIM)]


def test_only_as_much_idle_work_goes_as_the_waiting_work_needs() -> None:
    p = _policy()
    s = submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10))
    result, _ = cycle(_idle(s, **{"nb-1": 0, "nb-2": 0, "nb-3": 0}), 2000)
    assert len(result.evictions) == 1 and result.evictions[0].cause is Cause.IDLE


def test_idle_work_within_quota_stays_though_waiting_work_needs_it() -> None:
    # two idle notebooks, one borrowed and one within nominal; train needs both of them
    p = _policy()
    nbs = [workload(p, f"nb-{i}", "notebooks", gpus=2, submit=i) for i in range(2)]
    own = [workload(p, f"own-{i}", "owner", gpus=2, submit=i) for i in range(2)]
    _, s = cycle(snapshot(p, [*nbs, *own]))
    s = _idle(submit(s, workload(p, "job", "train", gpus=4, submit=10)), **{"nb-0": 0, "nb-1": 0})
    result, _ = cycle(s, 2000)
    assert result.evictions == ()
    # the earlier of the two holds the queue's nominal quota: only warned
    assert {h.workload: h.stage for h in result.held_idle} == {
        "notebooks/nb-0": IdleStage.WARNED,
        "notebooks/nb-1": IdleStage.RECLAIMABLE,
    }


def test_explain_shows_the_idle_standing_of_running_work_and_to_work_that_waits() -> None:
    p = _policy()
    s = _idle(submit(_running(p, 4), workload(p, "job", "train", gpus=2, submit=10)), **{"nb-3": 0})
    result = run_cycle(s, 1000)
    nb = explain(s, result, "notebooks/nb-3")
    assert nb is not None and nb.hints[0] == "running"
    assert "may reclaim it in 800s" in nb.hints[1]
    busy = explain(s, result, "notebooks/nb-2")
    assert busy is not None and busy.hints == ("running",)
    job = explain(s, result, "train/job")
    assert job is not None and job.state == "pending"
    (line,) = [h for h in job.hints if "holds GPUs it needs" in h]
    assert line.startswith("notebooks/nb-3 holds GPUs it needs: idle") and "in 800s" in line


def test_the_queues_earliest_work_holds_its_nominal_quota() -> None:
    # nb-0 started first (within nominal 2); nb-1 and nb-2, started later, are borrowed
    p = _policy()
    first = [workload(p, "nb-0", "notebooks", gpus=2), workload(p, "own", "owner", gpus=2)]
    _, s = cycle(snapshot(p, first))
    later = [workload(p, f"nb-{i}", "notebooks", gpus=2, submit=i) for i in (1, 2)]
    _, s = cycle(submit(s, *later), 50)
    s = _idle(submit(s, workload(p, "job", "train", gpus=2, submit=60)), **{"nb-0": 0, "nb-2": 0})
    result, _ = cycle(s, 5000)
    assert [(e.workload, e.cause) for e in result.evictions] == [("notebooks/nb-2", Cause.IDLE)]
    (h,) = [h for h in result.held_idle if h.workload == "notebooks/nb-0"]
    assert h.stage is IdleStage.WARNED and "earliest work holds it" in h.message
