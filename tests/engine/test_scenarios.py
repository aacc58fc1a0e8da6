"""Whole clusters as data, each named after the behaviour it shows."""

from __future__ import annotations

from collections import Counter

from gpucarve.engine import Cause, Stage, run_cycle
from gpucarve.engine.apply import finish
from tests.engine.builders import (
    cycle,
    policy,
    pool,
    queue,
    running_ids,
    slices_held,
    snapshot,
    submit,
    workload,
)

CLASSES = [
    {"name": "critical", "value": 1000, "preemptible": False},
    {"name": "high", "value": 100, "preemptible": True},
    {"name": "low", "value": 0, "preemptible": True, "default": True},
]
NO_MIN_RUNTIME = {"minRuntimeSeconds": 0}


def two_team_policy(**sched: object):  # type: ignore[no-untyped-def]
    return policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("research", {"h100-full": {"nominal": 16}}, cohort="all"),
            queue("production", {"h100-full": {"nominal": 16}}, cohort="all"),
        ],
        priorityClasses=CLASSES,
        scheduling={**NO_MIN_RUNTIME, **sched},
    )


def test_gang_waits_whole_when_it_does_not_fit_and_holds_nothing() -> None:
    p = policy(
        pools=[pool(f"p{i}", "H100-SXM5-80GB", 1, 8) for i in range(4)],
        queues=[queue("research", {"h100-full": {"nominal": 32}})],
    )
    fillers = [
        workload(
            p, f"f{i}", "research", gpus=1, node_selector={"gpucarve.io/pool": f"p{i}"}, submit=i
        )
        for i in range(2)
    ]
    _, s = cycle(snapshot(p, fillers))
    # 3 pods x 8 GPUs need 3 whole nodes; only 2 are; quota (2 + 24 of 32) allows it.
    gang = workload(p, "gang", "research", gpus=8, pods=3, submit=5)
    result, s = cycle(submit(s, gang), now=10)
    assert result.admitted_ids() == []
    reason = result.pending_reason("research/gang")
    assert reason is not None and reason.stage is Stage.PLACEMENT
    assert "gang needs 3 pods × 8 h100-full on one node; 2 placed" in reason.message
    assert sorted(running_ids(s)) == ["research/f0", "research/f1"]
    assert len(s.cluster.allocations) == 2  # the 2 pods that fitted were rolled back


def test_gang_binds_at_once_when_room_appears() -> None:
    p = two_team_policy()
    s = snapshot(p, [workload(p, "filler", "production", gpus=8)])
    _, s = cycle(s)
    s = submit(s, workload(p, "gang", "research", gpus=8, pods=4))
    _, s = cycle(s, 10)
    s = finish(s, "production/filler")
    result, s = cycle(s, 20)
    assert result.admitted_ids() == ["research/gang"]
    (adm,) = result.admissions
    assert len(adm.pods) == 4 and len({pod.node for pod in adm.pods}) == 4


def test_queue_over_quota_waits_and_says_why() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 16}})],
    )
    s = snapshot(p, [workload(p, f"j{i}", "research", gpus=8, submit=i) for i in range(3)])
    result, s = cycle(s)
    assert result.admitted_ids() == ["research/j0", "research/j1"]
    reason = result.pending_reason("research/j2")
    assert reason is not None and reason.stage is Stage.QUOTA
    assert reason.message == (
        "queue research at 16/16 h100-full, needs 8 more and is in no cohort to borrow from"
    )


def test_borrowing_from_an_idle_cohort_member_up_to_its_limit() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("research", {"h100-full": {"nominal": 16, "borrowingLimit": 8}}, cohort="all"),
            queue("production", {"h100-full": {"nominal": 16}}, cohort="all"),
        ],
    )
    s = snapshot(p, [workload(p, f"j{i}", "research", gpus=8, submit=i) for i in range(4)])
    result, s = cycle(s)
    assert result.admitted_ids() == ["research/j0", "research/j1", "research/j2"]
    assert result.admissions[2].borrowed == (("h100-full", 8),)
    reason = result.pending_reason("research/j3")
    assert reason is not None and "borrowing limit 8" in reason.message


def test_lending_limit_caps_what_a_queue_lends() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("research", {"h100-full": {"nominal": 16}}, cohort="all"),
            queue("production", {"h100-full": {"nominal": 16, "lendingLimit": 8}}, cohort="all"),
        ],
    )
    s = snapshot(p, [workload(p, f"j{i}", "research", gpus=8, submit=i) for i in range(4)])
    result, _ = cycle(s)
    assert result.admitted_ids() == ["research/j0", "research/j1", "research/j2"]
    reason = result.pending_reason("research/j3")
    assert reason is not None and "cohort all has 0 to lend" in reason.message


def test_reclaim_evicts_borrowed_work_for_a_queue_below_nominal() -> None:
    p = two_team_policy()
    s = snapshot(p, [workload(p, f"r{i}", "research", gpus=8, submit=i) for i in range(4)])
    _, s = cycle(s)
    assert len(running_ids(s)) == 4  # research borrowed all of production's 16
    prod = workload(p, "serve", "production", gpus=8, submit=100)
    result, s = cycle(submit(s, prod), now=200)
    assert result.admitted_ids() == ["production/serve"]
    (ev,) = result.evictions
    assert ev.cause is Cause.RECLAIM and ev.by == "production/serve"
    assert ev.workload == "research/r3"  # newest borrowed workload of equal priority
    assert result.admissions[0].after_evictions == ("research/r3",)
    assert "research/r3" in [w.id for w in s.pending]  # requeued


def test_reclaim_held_back_by_the_minimum_runtime_says_so() -> None:
    p = two_team_policy(minRuntimeSeconds=600)
    s = snapshot(p, [workload(p, f"r{i}", "research", gpus=8, submit=i) for i in range(4)])
    _, s = cycle(s)
    result, s = cycle(submit(s, workload(p, "serve", "production", gpus=8, submit=100)), 200)
    assert result.evictions == () and result.admitted_ids() == []
    (waiting,) = result.pending
    assert waiting.reason.stage == "quota"
    assert "reclaims from borrowing queues once their work is preemptible and has run 600s" in (
        waiting.reason.message
    )
    result, _ = cycle(s, 700)
    assert result.admitted_ids() == ["production/serve"]


def test_priority_preemption_within_a_queue_and_never_non_preemptible() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 16}})],
        priorityClasses=CLASSES,
        scheduling=NO_MIN_RUNTIME,
    )
    s = snapshot(
        p,
        [
            workload(p, "crit", "research", gpus=8, priority="critical"),
            workload(p, "low", "research", gpus=8, priority="low", submit=1),
        ],
    )
    _, s = cycle(s)
    high = workload(p, "high", "research", gpus=8, priority="high", submit=5)
    result, s = cycle(submit(s, high), now=10)
    assert [e.workload for e in result.evictions] == ["research/low"]
    assert result.evictions[0].cause is Cause.PREEMPT
    assert result.admitted_ids() == ["research/high"]
    # a critical workload may evict "high", never the other critical one
    higher = workload(p, "higher", "research", gpus=8, priority="critical", submit=6)
    result, s = cycle(submit(s, higher), now=20)
    assert [e.workload for e in result.evictions] == ["research/high"]
    third = workload(p, "third", "research", gpus=8, priority="critical", submit=7)
    result, s = cycle(submit(s, third), 30)
    assert result.evictions == ()
    assert result.admitted_ids() == []


def test_minimum_runtime_protects_young_workloads() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 8}})],
        priorityClasses=CLASSES,
        scheduling={"minRuntimeSeconds": 600},
    )
    s = snapshot(p, [workload(p, "low", "research", gpus=8, priority="low")])
    _, s = cycle(s, now=0)
    s = submit(s, workload(p, "high", "research", gpus=8, priority="high", submit=10))
    result, s = cycle(s, now=300)
    assert result.evictions == ()
    result, s = cycle(s, now=600)
    assert [e.workload for e in result.evictions] == ["research/low"]


def test_victims_are_the_smallest_cheapest_set() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("research", {"h100-full": {"nominal": 8}})],
        priorityClasses=CLASSES,
        scheduling=NO_MIN_RUNTIME,
    )
    s = snapshot(
        p,
        [
            workload(p, "small-old", "research", gpus=2, priority="low", submit=0),
            workload(p, "big", "research", gpus=4, priority="low", submit=1),
            workload(p, "small-new", "research", gpus=2, priority="low", submit=2),
        ],
    )
    _, s = cycle(s, now=0)
    s = submit(s, workload(p, "need2", "research", gpus=2, priority="high", submit=10))
    result, _ = cycle(s, now=100)
    # one 2-GPU victim is enough; all ran equally long, so the least GPU-time lost is a 2-GPU one
    assert len(result.evictions) == 1
    assert result.evictions[0].workload in ("research/small-old", "research/small-new")


def test_mig_request_lands_on_an_instance_of_its_profile() -> None:
    p = policy(
        pools=[
            pool(
                "infer",
                "A100-80GB",
                2,
                2,
                "mig",
                mig={"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
            )
        ],
        queues=[
            queue("prod", {"a100-mig-3g.40gb": {"nominal": 4}, "a100-mig-1g.10gb": {"nominal": 8}})
        ],
    )
    s = snapshot(
        p,
        [
            workload(p, "m", "prod", mig="2x3g.40gb"),
            workload(p, "s", "prod", mig="1g.10gb", submit=1),
        ],
    )
    _, s = cycle(s)
    held = slices_held(s, "prod/m")
    assert len(held) == 2 and all(h.endswith("3g.40gb@4") for h in held)
    assert slices_held(s, "prod/s")[0].endswith("1g.10gb@0") or slices_held(s, "prod/s")[
        0
    ].endswith("1g.10gb@1")


def test_repartition_hint_in_placement_reason() -> None:
    p = policy(
        pools=[
            pool("infer", "A100-80GB", 3, 1, "mig", mig={"layout": {"1g.10gb": 7}}),
            pool(
                "big",
                "A100-80GB",
                1,
                1,
                "mig",
                mig={"layout": {"3g.40gb": 2}},
                taints=[{"key": "reserved", "value": "x", "effect": "NoSchedule"}],
            ),
        ],
        queues=[
            queue("prod", {"a100-mig-1g.10gb": {"nominal": 21}, "a100-mig-3g.40gb": {"nominal": 2}})
        ],
    )
    s = snapshot(p, [workload(p, "busy", "prod", mig="1g.10gb")])
    _, s = cycle(s)
    result, _ = cycle(submit(s, workload(p, "want", "prod", mig="3g.40gb", submit=2)))
    reason = result.pending_reason("prod/want")
    assert reason is not None and reason.stage is Stage.PLACEMENT
    assert "1 by taints" in reason.message
    # two idle 7x1g GPUs could be re-carved; the one running a 1g at 0 could still take a 3g
    # at 4; the tainted GPU already has free 3g instances and is not counted
    assert "3 GPUs could make one by repartitioning" in reason.message


def test_time_slice_and_fraction_share_one_gpu_without_oversubscribing_memory() -> None:
    p = policy(
        pools=[pool("dev", "L40S", 1, 1, "time-slicing", replicas=8)],
        queues=[queue("ds", {"l40s-shared": {"nominal": 8}})],
    )
    big = workload(
        p, "big", "ds", gpu_memory=30000
    )  # memory share 30000/45373 -> 662 -> 6 replicas
    small = workload(p, "small", "ds", fraction=250, gpu_memory=20000, submit=1)
    s = snapshot(p, [big, small])
    result, s = cycle(s)
    assert result.admitted_ids() == ["ds/big"]
    assert len(slices_held(s, "ds/big")) == 6
    reason = result.pending_reason("ds/small")
    assert reason is not None
    notebook = workload(p, "nb", "ds", shared=1, submit=2)
    result, s = cycle(submit(s, notebook))
    # two replicas are left but 45373 - 30000 MiB cannot hold the small one's 20000 MiB;
    # a 1-replica notebook declares 45373/8 MiB and fits
    assert result.admitted_ids() == ["ds/nb"]


def test_topology_node_and_nvlink_and_rack() -> None:
    p = policy(
        pools=[
            pool(
                "train",
                "H100-SXM5-80GB",
                6,
                8,
                topology={"nodesPerRack": 2, "nodesPerNvlinkDomain": 1},
            ),
            pool("zextra", "H100-SXM5-80GB", 2, 8),  # no rack or NVLink labels
        ],
        queues=[queue("r", {"h100-full": {"nominal": 64}})],
    )
    s = snapshot(p, [workload(p, "one-node", "r", gpus=2, pods=4, topology="node")])
    result, s = cycle(s)
    assert len({pod.node for pod in result.admissions[0].pods}) == 1
    s = submit(s, workload(p, "rack", "r", gpus=8, pods=2, topology="rack", submit=1))
    result, s = cycle(s)
    nodes = sorted(pod.node for pod in result.admissions[0].pods)
    assert nodes == [
        "train-2",
        "train-3",
    ]  # the rack with train-0 has only 8 GPUs fully free on one node
    s = submit(s, workload(p, "nvl", "r", gpus=8, pods=2, topology="nvlink", submit=2))
    result, s = cycle(s)
    reason = result.pending_reason("r/nvl")
    assert reason is not None and reason.stage is Stage.VALIDATION
    assert reason.message == (
        "can never be admitted: needs 16 h100-full in one NVLink domain; "
        "the largest NVLink domain has 8"
    )
    s = submit(
        s,
        *[
            workload(p, f"rack{i}", "r", gpus=8, pods=2, topology="rack", submit=3 + i)
            for i in range(2)
        ],
    )
    result, _ = cycle(s)
    assert result.admitted_ids() == ["r/rack0"]
    reason = result.pending_reason("r/rack1")
    assert reason is not None and reason.stage is Stage.PLACEMENT
    assert "gang needs 16 h100-full in one rack; the best rack has 8 free" in reason.message


def test_impossible_head_does_not_hold_its_queue() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"queueing": "strict-fifo"},
    )
    s = snapshot(
        p, [workload(p, "huge", "r", gpus=8, pods=3), workload(p, "ok", "r", gpus=8, submit=1)]
    )
    result, _ = cycle(s, now=5000)
    assert result.admitted_ids() == ["r/ok"]
    reason = result.pending_reason("r/huge")
    assert reason is not None and reason.plugin == "ceiling"
    assert "queue r can never hold more than 16" in reason.message


def test_node_selector_and_taints() -> None:
    p = policy(
        pools=[
            pool("a", "H100-SXM5-80GB", 1, 8, nodeLabels={"zone": "a"}),
            pool(
                "b",
                "H100-SXM5-80GB",
                1,
                8,
                nodeLabels={"zone": "b"},
                taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
            ),
        ],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
    )
    s = snapshot(p, [workload(p, "sel", "r", gpus=8, node_selector={"zone": "b"})])
    result, s = cycle(s)
    reason = result.pending_reason("r/sel")
    assert (
        reason is not None
        and "1 by node-selector" in reason.message
        and "1 by taints" in reason.message
    )
    tol = workload(
        p,
        "tol",
        "r",
        gpus=8,
        node_selector={"zone": "b"},
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
        ],
        submit=1,
    )
    result, s = cycle(submit(s, tol))
    assert result.admitted_ids() == ["r/tol"]


def test_fair_share_lets_the_queue_borrowing_less_go_first() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("b", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("idle", {"h100-full": {"nominal": 16}}, cohort="all"),
        ],
    )
    ws = [workload(p, f"a{i}", "a", gpus=8, submit=i) for i in range(3)]
    ws += [workload(p, f"b{i}", "b", gpus=8, submit=10 + i) for i in range(3)]
    result, _ = cycle(snapshot(p, ws))
    # a goes first (earlier), then each borrows in turn; 4 nodes: a0 b0 a1 b1
    assert Counter(w.split("/")[0] for w in result.admitted_ids()) == {"a": 2, "b": 2}


def test_best_effort_fifo_lets_small_work_pass_a_blocked_head_until_it_starves() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"maxHeadWaitSeconds": 1000, **NO_MIN_RUNTIME},
    )
    s = snapshot(p, [workload(p, "running", "r", gpus=4)])
    _, s = cycle(s)
    big = workload(p, "big", "r", gpus=8, pods=2, submit=10)
    s = submit(s, big, workload(p, "small1", "r", gpus=4, submit=20))
    result, s = cycle(s, now=30)
    assert result.admitted_ids() == ["r/small1"]  # passes the blocked head
    s = submit(s, workload(p, "small2", "r", gpus=4, submit=40))
    s = finish(s, "r/running")
    result, s = cycle(s, now=2000)  # big has waited 1990 s: it holds the queue
    assert result.admitted_ids() == []
    reason = result.pending_reason("r/small2")
    assert (
        reason is not None and reason.stage is Stage.QUEUEING and "behind r/big" in reason.message
    )


def test_a_starving_head_beyond_its_nominal_quota_does_not_hold_its_queue() -> None:
    # r's nominal is one node; its gang needs two, so one must be borrowed from o, which uses
    # part of it. Holding r's queue would idle r's own node and gain nothing.
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        cohorts=[{"name": "all"}],
        queues=[
            queue("r", {"h100-full": {"nominal": 8}}, cohort="all"),
            queue("o", {"h100-full": {"nominal": 8}}, cohort="all"),
        ],
        scheduling={"maxHeadWaitSeconds": 100, **NO_MIN_RUNTIME},
    )
    s = snapshot(p, [workload(p, "other", "o", gpus=4)])
    _, s = cycle(s)
    big = workload(p, "big", "r", gpus=8, pods=2, submit=0)
    small = workload(p, "small", "r", gpus=4, submit=10)
    result, s = cycle(submit(s, big, small), now=5000)
    assert result.admitted_ids() == ["r/small"]
    reason = result.pending_reason("r/big")
    assert reason is not None and reason.stage is Stage.QUOTA
    # within nominal, the same wait holds the queue (as before)
    p2 = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"maxHeadWaitSeconds": 100, **NO_MIN_RUNTIME},
    )
    s2 = snapshot(p2, [workload(p2, "running", "r", gpus=4)])
    _, s2 = cycle(s2)
    big2 = workload(p2, "big", "r", gpus=8, pods=2, submit=0)
    result, _ = cycle(submit(s2, big2, workload(p2, "small", "r", gpus=4, submit=10)), now=5000)
    assert result.admitted_ids() == []
    reason = result.pending_reason("r/small")
    assert reason is not None and "behind r/big" in reason.message


def test_strict_fifo_holds_the_queue_at_once() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
        scheduling={"queueing": "strict-fifo"},
    )
    s = snapshot(p, [workload(p, "running", "r", gpus=4)])
    _, s = cycle(s)
    s = submit(
        s, workload(p, "big", "r", gpus=8, submit=1), workload(p, "small", "r", gpus=2, submit=2)
    )
    result, _ = cycle(s, now=5)
    assert result.admitted_ids() == []
    assert result.pending_reason("r/small").stage is Stage.QUEUEING  # type: ignore[union-attr]


def test_partial_admission_down_to_min_count() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    s = snapshot(p, [workload(p, "elastic", "r", gpus=2, pods=6, min_pods=3)])
    result, _ = cycle(s)
    assert len(result.admissions[0].pods) == 4


def test_cpu_only_pods_and_cpu_limits() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8, cpusPerNode=16, memoryGiBPerNode=64)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    s = snapshot(
        p,
        [
            workload(p, "cpu", "r", cpu="12", memory="16Gi"),
            workload(p, "gpu", "r", gpus=1, cpu="8", submit=1),
        ],
    )
    result, _ = cycle(s)
    assert result.admitted_ids() == ["r/cpu"]
    reason = result.pending_reason("r/gpu")
    assert reason is not None and "cpu-memory" in reason.message


def test_same_input_same_result() -> None:
    p = two_team_policy()
    ws = [
        workload(p, f"w{i}", "research" if i % 2 else "production", gpus=1 + i % 4, submit=i % 3)
        for i in range(40)
    ]
    s = snapshot(p, ws)
    assert repr(run_cycle(s, 7)) == repr(run_cycle(s, 7))


def test_fragmentation_aware_placement_keeps_whole_nodes_for_big_shapes() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 3, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 24}})],
        scheduling={"scoring": {"binpack": 0, "spread": 1, "fragmentation": 3}},
    )
    _, s = cycle(snapshot(p, [workload(p, "five", "r", gpus=5)]))
    # 8-GPU jobs are what this cluster mostly sees; a 1-GPU pod should fill the partly used
    # node (3 free) rather than break a whole one, even though `spread` prefers empty nodes.
    big = [workload(p, f"big{i}", "r", gpus=8, submit=5 + i, min_pods=1) for i in range(1)]
    s = submit(s, *big, workload(p, "one", "r", gpus=1, submit=1))
    result, s = cycle(s, 10)
    one = next(a for a in result.admissions if a.workload == "r/one")
    five_node = s.running[[rw.workload.id for rw in s.running].index("r/five")].pods[0].node
    assert one.pods[0].node == five_node


def test_binpack_fills_nodes_with_mig_instances() -> None:
    p = policy(
        pools=[pool("infer", "A100-80GB", 4, 2, "mig", mig={"layout": {"3g.40gb": 2}})],
        queues=[queue("prod", {"a100-mig-3g.40gb": {"nominal": 16}})],
    )
    result, _ = cycle(snapshot(p, [workload(p, "r", "prod", mig="3g.40gb", pods=4)]))
    assert sorted({pod.node for pod in result.admissions[0].pods}) == ["infer-0"]


def test_a_starving_head_holds_only_the_flavors_it_needs() -> None:
    p = policy(
        pools=[
            pool("train", "H100-SXM5-80GB", 2, 8),
            pool("dev", "L40S", 1, 1, "time-slicing", replicas=4),
        ],
        queues=[queue("r", {"h100-full": {"nominal": 16}, "l40s-shared": {"nominal": 4}})],
        scheduling={"queueing": "strict-fifo"},
    )
    s = snapshot(p, [workload(p, "running", "r", gpus=4)])
    _, s = cycle(s)
    s = submit(
        s,
        workload(p, "gang", "r", gpus=8, pods=2, submit=1),
        workload(p, "small", "r", gpus=2, submit=2),
        workload(p, "notebook", "r", shared=1, submit=3),
    )
    result, _ = cycle(s, now=10)
    assert result.admitted_ids() == ["r/notebook"]
    reason = result.pending_reason("r/small")
    assert reason is not None and reason.stage is Stage.QUEUEING
    assert "behind r/gang, which holds queue r for h100-full" in reason.message


def test_a_starving_gang_reserves_its_best_rack_and_others_backfill_the_rest() -> None:
    racks = {"nodesPerRack": 2}
    p = policy(
        pools=[
            pool("a", "H100-SXM5-80GB", 2, 8, topology=racks),
            pool("b", "H100-SXM5-80GB", 2, 8, topology=racks),
        ],
        cohorts=[{"name": "c"}],
        queues=[
            queue("r", {"h100-full": {"nominal": 16}}, cohort="c"),
            queue("o", {"h100-full": {"nominal": 16}}, cohort="c"),
        ],
        scheduling={"maxHeadWaitSeconds": 100, "minRuntimeSeconds": 86400},
    )
    on = lambda pool_name: {"gpucarve.io/pool": pool_name}  # noqa: E731
    s = snapshot(
        p,
        [
            workload(p, "fa", "o", gpus=8, node_selector=on("a")),  # rack a: 8 free (a-1)
            workload(p, "fb", "o", gpus=4, node_selector=on("b"), submit=1),  # rack b: 12 free
        ],
    )
    _, s = cycle(s)
    gang = workload(p, "gang", "r", gpus=8, pods=2, topology="rack", submit=10)
    result, s = cycle(submit(s, gang), now=20)
    assert result.pending_reason("r/gang").stage is Stage.PLACEMENT  # type: ignore[union-attr]
    # The gang has now waited past maxHeadWaitSeconds: it keeps rack b (the most room) for
    # itself; newer work still backfills rack a, but not rack b.
    s = submit(
        s,
        workload(p, "small", "o", gpus=8, submit=300),
        workload(p, "small2", "o", gpus=4, submit=301),
    )
    result, s = cycle(s, now=400)
    assert result.admitted_ids() == ["o/small"]
    assert next(a for a in result.admissions if a.workload == "o/small").pods[0].node == "a-1"
    reason = result.pending_reason("o/small2")
    assert reason is not None and "2 by reservation" in reason.message


def test_work_placed_on_slices_an_eviction_frees_waits_for_the_victim() -> None:
    # Found on the real API server: reclaim evicted a two-pod gang for one GPU, and another
    # pod of the same queue was bound at once to the other GPU the gang still held while it
    # terminated. Every admission onto freed slices must wait for their victim.
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 2)],
        cohorts=[{"name": "lab"}],
        queues=[
            queue("research", {"h100-full": {"nominal": 1, "borrowingLimit": 1}}, cohort="lab"),
            queue("production", {"h100-full": {"nominal": 1}}, cohort="lab"),
        ],
        scheduling=NO_MIN_RUNTIME,
    )
    s = snapshot(p, [workload(p, "pair", "research", gpus=1, pods=2)])
    _, s = cycle(s)
    assert running_ids(s) == ["research/pair"]
    gang_slices = set(slices_held(s, "research/pair"))
    later = [
        workload(p, "one", "research", gpus=1, submit=5),
        workload(p, "serve", "production", gpus=1, submit=10),
    ]
    result, _ = cycle(submit(s, *later), now=100)
    (ev,) = result.evictions
    assert ev.workload == "research/pair"
    admitted = {a.workload: a for a in result.admissions}
    assert "production/serve" in admitted
    for a in admitted.values():
        on_freed = {sid for pod in a.pods for sid in pod.slice_ids} & gang_slices
        if on_freed:
            assert "research/pair" in a.after_evictions, a.workload
    assert len(admitted) == 2, "the freed second GPU is given to research/one"


def test_a_block_gang_stays_under_one_spine() -> None:
    # Racks of one node, blocks of two racks: a 2-node gang may span racks, never blocks.
    p = policy(
        pools=[
            pool("train", "H100-SXM5-80GB", 4, 8, topology={"nodesPerRack": 1, "nodesPerBlock": 2})
        ],
        queues=[queue("r", {"h100-full": {"nominal": 32}})],
    )
    s = snapshot(p, [workload(p, "holder", "r", gpus=4, pods=1)])
    result, s = cycle(s)
    (held,) = {pod.node for pod in result.admissions[0].pods}
    s = submit(s, workload(p, "pair", "r", gpus=8, pods=2, topology="block", submit=1))
    result, s = cycle(s)
    blocks = {0: {"train-0", "train-1"}, 1: {"train-2", "train-3"}}
    nodes = {pod.node for pod in result.admissions[0].pods}
    assert len(nodes) == 2 and any(nodes == b for b in blocks.values())
    assert held not in nodes
    s = submit(s, workload(p, "wide", "r", gpus=8, pods=3, topology="block", submit=2))
    result, _ = cycle(s)
    reason = result.pending_reason("r/wide")
    assert reason is not None and reason.message == (
        "can never be admitted: needs 24 h100-full in one block; the largest block has 16"
    )
