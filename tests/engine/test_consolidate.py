"""Consolidation: running work is moved so that a gang that quota admits, but that no node
holds, fits now, when each mover fits again elsewhere and the gang gains more GPU time than
the movers lose. The API server's side of the same scenario is
tests/integration/test_consolidation.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucarve.core.policy import Policy
from gpucarve.core.snapshot import Snapshot
from gpucarve.core.workload import Workload
from gpucarve.engine import run_cycle
from gpucarve.engine.apply import apply, finish
from gpucarve.engine.decisions import Cause, CycleResult, Plugin, Stage
from gpucarve.engine.invariants import step_violations
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

MOVE = {"consolidateMaxMoves": 2, "minRuntimeSeconds": 0}


def two_nodes(**scheduling: Any) -> Policy:
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8, cpusPerNode=64)],
        priorityClasses=[
            {"name": "lo", "value": 0, "preemptible": True, "default": True},
            {"name": "hi", "value": 9, "preemptible": True},
        ],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling=scheduling,
    )


def split(p: Policy, a: Workload | None = None, c: Workload | None = None) -> Snapshot:
    """r/a (4 GPUs) from t=0 on one node, r/c (4 GPUs) from t=100 on the other: 8 GPUs free,
    4 on each node."""
    a = a or workload(p, "a", "r", gpus=4)
    x = workload(p, "x", "r", gpus=4)
    _, s = cycle(snapshot(p, [a, x]))
    c = c or workload(p, "c", "r", gpus=4, submit=100)
    _, s = cycle(submit(s, c), 100)
    s = finish(s, "r/x")
    nodes = {rw.workload.id: {pd.node for pd in rw.pods} for rw in s.running}
    assert nodes["r/a"] != nodes["r/c"], nodes  # the cluster is split as the scenario needs
    return s


def checked(s: Snapshot, now: int) -> tuple[CycleResult, Snapshot]:
    result = run_cycle(s, now)
    after = apply(s, result)
    assert step_violations(s, result, after) == []
    return result, after


def test_the_cheapest_work_is_moved_and_the_gang_starts_now() -> None:
    p = two_nodes(**MOVE)
    s = submit(split(p), workload(p, "big", "r", gpus=8, submit=200))
    result, s = checked(s, 1000)
    # c ran 900 s to a's 1000 s: it is the cheaper one to move, and it is moved alone
    assert [(e.workload, e.cause, e.by) for e in result.evictions] == [
        ("r/c", Cause.CONSOLIDATE, "r/big")
    ]
    assert "moved for r/big" in result.evictions[0].message
    (adm,) = result.admissions
    assert adm.workload == "r/big" and adm.after_evictions == ("r/c",)
    assert adm.stage is Stage.PREEMPTION
    # the mover is back in its queue and placed again next cycle, beside a
    assert [w.id for w in s.pending] == ["r/c"]
    result, s = checked(s, 1060)
    assert [a.workload for a in result.admissions] == ["r/c"]
    where = {rw.workload.id: {pd.node for pd in rw.pods} for rw in s.running}
    assert where["r/c"] == where["r/a"] != where["r/big"]


def test_without_the_option_nothing_moves_and_the_gang_says_why_it_waits() -> None:
    p = two_nodes(minRuntimeSeconds=0)
    s = submit(split(p), workload(p, "big", "r", gpus=8, submit=200))
    result, _ = cycle(s, 1000)
    assert not result.evictions and not result.admissions
    (pending,) = result.pending
    assert pending.reason.stage is Stage.PLACEMENT and pending.reason.plugin is Plugin.GPU_SLICES


def test_nothing_moves_when_a_mover_would_not_fit_again() -> None:
    # a and c each take 40 of a node's 64 CPUs: neither fits beside the other
    p = two_nodes(**MOVE)
    a, c = (workload(p, n, "r", gpus=4, cpu="40", submit=t) for n, t in (("a", 0), ("c", 100)))
    s = submit(split(p, a=a, c=c), workload(p, "big", "r", gpus=8, submit=200))
    result, _ = checked(s, 1000)
    assert not result.evictions and not result.admissions
    # the same with room for CPUs: c moves
    p = two_nodes(**MOVE)
    s = submit(split(p), workload(p, "big", "r", gpus=8, submit=200))
    result, _ = checked(s, 1000)
    assert [e.workload for e in result.evictions] == ["r/c"]


def test_nothing_moves_when_the_gang_would_soon_fit_anyway() -> None:
    # a ends by its deadline 60 s from now: the gang gains 8 × 60 GPU-seconds by starting
    # now, less than the 4 × 900 that moving c throws away
    p = two_nodes(**MOVE)
    a = dataclasses.replace(workload(p, "a", "r", gpus=4), runtime_limit_s=1060)
    s = submit(split(p, a=a), workload(p, "big", "r", gpus=8, submit=200))
    result, _ = checked(s, 1000)
    assert not result.evictions and not result.admissions


def test_bare_pods_younger_work_and_higher_priorities_are_never_moved() -> None:
    p = two_nodes(consolidateMaxMoves=2, minRuntimeSeconds=950)
    big = workload(p, "big", "r", gpus=8, submit=200)
    # c is too young to move (900 s of a 950 s minimum), and a is not restartable
    bare = dataclasses.replace(workload(p, "a", "r", gpus=4), restartable=False)
    result, _ = checked(submit(split(p, a=bare), big), 1000)
    assert not result.evictions
    # once old enough, c moves
    result, _ = checked(submit(split(p, a=bare), big), 1100)
    assert [e.workload for e in result.evictions] == ["r/c"]
    # work of a higher priority than the gang's stays where it is
    p = two_nodes(**MOVE)
    hi = [workload(p, n, "r", gpus=4, priority="hi", submit=t) for n, t in (("a", 0), ("c", 100))]
    s = submit(split(p, a=hi[0], c=hi[1]), big)
    result, _ = checked(s, 1000)
    assert not result.evictions


def test_work_as_large_as_the_gang_is_not_moved_for_it() -> None:
    # a and c take 30 CPUs each: a 4-GPU job asking 40 CPUs fits on neither node, and would
    # fit if c moved beside a; but c is as large as it, and moving it gains nothing per GPU
    p = two_nodes(**MOVE)
    a, c = (workload(p, n, "r", gpus=4, cpu="30", submit=t) for n, t in (("a", 0), ("c", 100)))
    s = split(p, a=a, c=c)
    result, _ = checked(submit(s, workload(p, "cpu", "r", gpus=4, cpu="40", submit=200)), 1000)
    assert not result.evictions
    (pending,) = result.pending
    assert pending.reason.stage is Stage.PLACEMENT
    # an 8-GPU job asking as many CPUs is larger than c: c moves for it
    big = workload(p, "big", "r", gpus=8, cpu="40", submit=200)
    result, _ = checked(submit(s, big), 1000)
    assert [e.workload for e in result.evictions] == ["r/c"]


def test_a_gang_on_loan_has_work_moved_only_when_reclaim_would_spare_it() -> None:
    # r's nominal 8 is used by a and c: the 8-GPU gang would run on o's unused quota, which o's
    # next job reclaims at once, unless reclaim spares gangs many times a reclaimer's size
    def moved(**scheduling: Any) -> list[str]:
        p = policy(
            pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
            cohorts=[{"name": "lab"}],
            queues=[
                queue("r", {"h100-full": {"nominal": 8, "borrowingLimit": 8}}, cohort="lab"),
                queue("o", {"h100-full": {"nominal": 8}}, cohort="lab"),
            ],
            scheduling={**MOVE, **scheduling},
        )
        s = submit(split(p), workload(p, "big", "r", gpus=8, submit=200))
        result, _ = checked(s, 1000)
        return [e.workload for e in result.evictions]

    assert moved(reclaimLargeVictimRatio=None) == []
    assert moved() == ["r/c"]  # the default spares gangs four times the reclaimer's size
    assert moved(reclaimLargeVictimRatio=8) == []  # 8 GPUs are not more than 8 times one
