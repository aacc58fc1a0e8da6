"""Dynamic MIG in the cycle: queued MIG work that no free instance holds makes the cycle
repartition free instances of a dynamic pool, never those in use, not within the pool's
minimum interval, not in static pools, and only into profiles the pool has flavors for."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from gpucarve.core.mig import Instance
from gpucarve.core.snapshot import Snapshot
from gpucarve.engine import run_cycle
from gpucarve.engine.mig_plan import PoolGpu
from gpucarve.engine.mig_pool import plan_pool
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def _policy(dynamic: dict[str, Any] | None) -> Any:
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
    )


def _two_small_running(p: Any) -> Snapshot:
    s = snapshot(p, [workload(p, f"s{i}", "team", mig="1g.10gb") for i in range(2)])
    result, s = cycle(s)
    assert len(result.admissions) == 2 and not result.repartitions
    return s


def test_queued_small_instances_reshape_free_ones_and_keep_those_in_use() -> None:
    p = _policy({"minSecondsBetweenChanges": 600})
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
    p = _policy({})
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
