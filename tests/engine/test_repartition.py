"""Dynamic MIG in the cycle: queued MIG work that no free instance holds makes the cycle
repartition free instances of a dynamic pool, never those in use, not within the pool's
minimum interval, not in static pools, and only into profiles the pool has flavors for."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from gpucarve.core.cluster import Allocation
from gpucarve.core.mig import Instance
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import run_cycle
from gpucarve.engine.mig.gpu_plan import PoolGpu
from gpucarve.engine.mig.pool_plan import plan_pool
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _policy(dynamic: dict[str, Any] | None, **extra: Any) -> Any:
    mig: dict[str, Any] = {"layout": LAYOUT}
    if dynamic is not None:
        mig["dynamic"] = dynamic
    return policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig", mig=mig)],
        queues=[
            queue(
                "team",
                {
                    "a100-mig-3g.40gb": {"nominal": 2 if dynamic is not None else 1},
                    "a100-mig-2g.20gb": {"nominal": 3 if dynamic is not None else 1},
                    "a100-mig-1g.10gb": {"nominal": 7 if dynamic is not None else 2},
                },
            )
        ],
        **extra,
    )


def _two_small_running(p: Any) -> Snapshot:
    s = snapshot(p, [workload(p, f"s{i}", "team", mig="1g.10gb") for i in range(2)])
    result, s = cycle(s)
    assert len(result.admissions) == 2 and not result.repartitions
    return s


def test_queued_small_instances_reshape_free_ones_and_keep_those_in_use() -> None:
    p = _policy({"minSecondsBetweenChanges": 600, "granularity": "instance"})
    s = _two_small_running(p)
    held = {sid for rw in s.running for pod in rw.pods for sid in pod.slice_ids}
    s = submit(s, *(workload(p, f"more{i}", "team", mig="1g.10gb") for i in range(3)))
    result = run_cycle(s, 100)
    assert not result.admissions
    (rep,) = result.repartitions
    assert rep.gpu_id == "inf-0/gpu0"
    kept = {f"inf-0/gpu0/{i.profile}@{i.start}" for i in rep.layout}
    assert held <= kept, "an instance in use was destroyed"
    assert sum(1 for i in rep.layout if i.profile == "1g.10gb") >= 5
    assert {i.profile for i in rep.destroyed} <= {"3g.40gb", "2g.20gb"}
    assert "1g.10gb" in rep.reason
    assert result.mig_unserved == ()

    # changed at 100: not again within 600 s, so the demand stays unserved
    later = Snapshot(p, s.cluster, s.running, s.pending, mig_changed_at=MappingProxyType(
        {"inf-0/gpu0": 100}))  # fmt: skip
    result = run_cycle(later, 400)
    assert not result.repartitions and result.mig_unserved == (("1g.10gb", 3),)
    assert run_cycle(later, 700).repartitions


def test_static_pools_are_never_repartitioned() -> None:
    p = _policy(None)
    s = _two_small_running(p)
    s = submit(s, workload(p, "more", "team", mig="1g.10gb"))
    result = run_cycle(s, 100)
    assert not result.repartitions and not result.admissions and result.pending


def test_only_profiles_with_flavors_are_created() -> None:
    p = _policy({"granularity": "instance"})
    s = _two_small_running(p)
    s = submit(
        s, workload(p, "big", "team", mig="3g.40gb"), workload(p, "mid", "team", mig="2g.20gb")
    )
    # both fit as the GPU is: nothing to change
    result = run_cycle(s, 100)
    assert len(result.admissions) == 2 and not result.repartitions
    # the planner creates a profile only when the pool may (has a flavor for it)
    pool_ = p.pools[0]
    assert pool_.model.mig is not None
    free_3g = PoolGpu("g", pool_.model.mig, (Instance(0, "3g.40gb"),), ())
    plans, left = plan_pool([free_3g], {"1g.10gb": 3}, allowed=frozenset({"3g.40gb"}))
    assert plans == [] and left == {"1g.10gb": 3}
    plans, left = plan_pool([free_3g], {"1g.10gb": 3}, allowed=frozenset({"3g.40gb", "1g.10gb"}))
    (plan,) = plans
    assert {i.profile for i in plan.layout} <= {"3g.40gb", "1g.10gb"} and left == {}


CLASSES = [
    {"name": "high", "value": 100, "preemptible": True},
    {"name": "low", "value": 0, "preemptible": True, "default": True},
]


def _preemption_policy(dynamic: dict[str, Any] | None) -> Any:
    return _policy(dynamic, priorityClasses=CLASSES, scheduling={"minRuntimeSeconds": 0})


def _high_wants_two_small(p: Any, *, fill_free: bool) -> Any:
    s = _two_small_running(p)  # both 1g.10gb instances taken by low-priority work
    if fill_free:
        s = submit(
            s,
            workload(p, "low-3g", "team", mig="3g.40gb", submit=1),
            workload(p, "low-2g", "team", mig="2g.20gb", submit=1),
        )
        _, s = cycle(s, 10)
        assert len(s.running) == 4
    return submit(
        s, *(workload(p, f"urgent{i}", "team", mig="1g.10gb", priority="high", submit=20)
             for i in range(2))
    )  # fmt: skip


def test_a_repartition_comes_before_preemption() -> None:
    """High-priority work for two 1g.10gb instances, both held by low-priority work: a static
    pool evicts; a dynamic one reshapes the free 3g/2g instead and nobody is evicted."""
    static = _high_wants_two_small(_policy_static := _preemption_policy(None), fill_free=False)
    result = run_cycle(static, 100)
    assert len(result.evictions) == 2 and not result.repartitions
    assert _policy_static.pools[0].mig_dynamic is None

    p = _preemption_policy({"minSecondsBetweenChanges": 0, "granularity": "instance"})
    result = run_cycle(_high_wants_two_small(p, fill_free=False), 100)
    assert result.evictions == () and not result.admissions
    (rep,) = result.repartitions
    assert sum(1 for i in rep.created if i.profile == "1g.10gb") >= 2
    reasons = {x.workload: x.reason for x in result.pending}
    for i in range(2):
        reason = reasons[f"team/urgent{i}"]
        assert reason.plugin == "mig-repartition" and "instead of preempting" in reason.message


def test_preemption_goes_ahead_when_no_repartition_can_serve() -> None:
    """Every instance of the GPU is in use: nothing to reshape, so the low work is evicted."""
    p = _preemption_policy({"minSecondsBetweenChanges": 0, "granularity": "instance"})
    result = run_cycle(_high_wants_two_small(p, fill_free=True), 100)
    assert sorted(e.workload for e in result.evictions) == ["team/s0", "team/s1"]
    assert not result.repartitions


def test_a_profile_the_layout_lacks_is_no_ceiling_in_a_dynamic_pool() -> None:
    """`dynamic.profiles` offers 1g.10gb on GPUs carved as one 7g.80gb: work for it waits at
    placement (so the repartition sees it) instead of being refused as never fitting."""
    mig = {"layout": {"7g.80gb": 1}, "dynamic": {"minSecondsBetweenChanges": 0,
                                                 "profiles": ["1g.10gb"]}}  # fmt: skip
    p = policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig", mig=mig)],
        queues=[queue("team", {"a100-mig-1g.10gb": {"nominal": 7}})],
    )
    result = run_cycle(snapshot(p, [workload(p, "small", "team", mig="1g.10gb")]), 0)
    (pending,) = result.pending
    assert pending.reason.stage.value == "placement"
    (rep,) = result.repartitions
    assert any(i.profile == "1g.10gb" for i in rep.created)


def test_a_starving_head_reserves_its_flavor_on_a_node_not_the_whole_node() -> None:
    """A 1g.10gb head that waited past maxHeadWaitSeconds reserves the node for 1g.10gb; newer
    work for the node's free 4g.40gb instance still runs (it used to be refused 'by
    reservation', which on a one-node MIG pool stopped every other profile)."""
    p = policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig",
                    mig={"layout": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}})],
        queues=[queue("team", {"a100-mig-4g.40gb": {"nominal": 1},
                               "a100-mig-2g.20gb": {"nominal": 1},
                               "a100-mig-1g.10gb": {"nominal": 1}})],
        scheduling={"maxHeadWaitSeconds": 0},
    )  # fmt: skip
    s = snapshot(p)
    # the only 1g.10gb instance is held by a pod gpucarve does not manage (no quota charged)
    sid = next(sid for sid in s.cluster.slices if "/1g.10gb@" in sid)
    held = Allocation(sid, "foreign/pod", 0, 0)
    s = dataclasses.replace(s, cluster=s.cluster.with_allocations({sid: held}))
    s = submit(
        s,
        workload(p, "head", "team", mig="1g.10gb", submit=10),
        workload(p, "newer", "team", mig="4g.40gb", submit=20),
    )
    result = run_cycle(s, 100)
    assert result.admitted_ids() == ["team/newer"]
    (pending,) = result.pending
    assert pending.workload == "team/head" and pending.reason.stage.value == "placement"


def test_whole_gpu_granularity_changes_only_gpus_with_nothing_in_use() -> None:
    """By default (what the GPU Operator's MIG manager can do: mig-parted recreates every
    instance of a GPU it changes) the GPU whose two 1g.10gb instances are in use keeps its
    layout although a reshape of its free 3g/2g would serve the queue, which granularity
    `instance` does."""
    p = _policy({"minSecondsBetweenChanges": 0})
    s = _two_small_running(p)
    s = submit(s, *(workload(p, f"more{i}", "team", mig="1g.10gb") for i in range(3)))
    result = run_cycle(s, 100)
    assert not result.repartitions and result.mig_unserved == (("1g.10gb", 3),)
    p = _policy({"minSecondsBetweenChanges": 0, "granularity": "instance"})
    s = _two_small_running(p)
    s = submit(s, *(workload(p, f"more{i}", "team", mig="1g.10gb") for i in range(3)))
    assert run_cycle(s, 100).repartitions
