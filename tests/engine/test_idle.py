"""Why GPUs sit idle while work waits: every flavor's free slices after a cycle, attributed to
the reason that kept waiting work off them, adding up to what is free."""

from __future__ import annotations

from collections import Counter

from gpucarve.core.snapshot import Snapshot
from gpucarve.engine.decisions import CycleResult, IdleCause, PendingReason, Plugin, Stage
from gpucarve.engine.idle import cause_of
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

MIG = {"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}


def shares(result: CycleResult) -> dict[tuple[str, IdleCause], int]:
    return {(i.flavor, i.cause): i.slices for i in result.idle}


def free_after(s: Snapshot) -> Counter[str]:
    """Free slices per flavor of the snapshot's cluster, counted from its allocations."""
    out: Counter[str] = Counter()
    for sid, sl in s.cluster.slices.items():
        if sid not in s.cluster.allocations:
            out[sl.flavor] += 1
    return out


def test_shares_add_up_to_what_is_free_and_name_the_first_waiting_reason() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "c"}],
        queues=[
            queue("r", {"h100-full": {"nominal": 8, "borrowingLimit": 2}}, cohort="c"),
            queue("o", {"h100-full": {"nominal": 8}}, cohort="c"),
        ],
    )
    s = snapshot(p, [workload(p, "run", "r", gpus=6)])
    _, s = cycle(s)
    # r at 6/8 asks 6 more: past nominal plus its borrowing limit of 2
    result, after = cycle(submit(s, workload(p, "more", "r", gpus=6, submit=5)), 10)
    assert result.admitted_ids() == []
    assert shares(result) == {("h100-full", IdleCause.BORROWING_LIMIT): 10}
    assert sum(i.slices for i in result.idle) == free_after(after)["h100-full"]
    assert result.idle[0].workload == "r/more"


def test_free_slices_where_no_placement_fits_are_fragmentation() -> None:
    taint = [{"key": "spare", "value": "x", "effect": "NoSchedule"}]
    p = policy(
        pools=[
            pool("train", "H100-SXM5-80GB", 1, 8),
            pool("spare", "H100-SXM5-80GB", 1, 8, taints=taint),
        ],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
    )
    _, s = cycle(snapshot(p, [workload(p, "run", "r", gpus=6)]))
    # quota allows it and 10 are free in all, but 8 of them on a node it does not tolerate
    result, _ = cycle(submit(s, workload(p, "one", "r", gpus=6, submit=5)), 10)
    assert shares(result) == {("h100-full", IdleCause.FRAGMENTATION): 10}


def test_a_placement_reason_is_a_gang_larger_than_free_when_it_needs_more_than_all() -> None:
    reason = PendingReason(Stage.PLACEMENT, Plugin.GPU_SLICES, "no room")
    assert cause_of(reason, need=12, free=10) is IdleCause.GANG_LARGER
    assert cause_of(reason, need=10, free=10) is IdleCause.FRAGMENTATION
    quota = PendingReason(Stage.QUOTA, Plugin.CAPACITY_QUOTA, "q", limit="cohort")
    assert cause_of(quota, need=1, free=10) is IdleCause.COHORT_LENDING
    behind = PendingReason(Stage.QUEUEING, Plugin.FIFO, "behind")
    assert cause_of(behind, need=1, free=10) is IdleCause.QUEUE_ORDER


def test_free_instances_of_a_profile_nobody_asks_for_are_a_mig_layout_mismatch() -> None:
    p = policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig", mig=MIG)],
        queues=[
            queue(
                "s",
                {"a100-mig-3g.40gb": {"nominal": 1}, "a100-mig-2g.20gb": {"nominal": 1}},
            )
        ],
    )
    two = [workload(p, f"serve{i}", "s", mig="3g.40gb", submit=i) for i in range(2)]
    result, after = cycle(snapshot(p, two), 10)
    assert result.admitted_ids() == ["s/serve0"]
    got = shares(result)
    assert got[("a100-mig-2g.20gb", IdleCause.MIG_LAYOUT)] == 1
    assert got[("a100-mig-1g.10gb", IdleCause.MIG_LAYOUT)] == 2
    free = free_after(after)
    for flavor, n in free.items():
        assert sum(i.slices for i in result.idle if i.flavor == flavor) == n


def test_with_nothing_waiting_everything_free_is_nothing_waiting() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    result, _ = cycle(snapshot(p, [workload(p, "run", "r", gpus=3)]))
    assert shares(result) == {("h100-full", IdleCause.NOTHING_WAITING): 5}
