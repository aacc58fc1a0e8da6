"""The baselines are configurations of the same engine; without gangs, part-placed workloads
hold their GPUs."""

from __future__ import annotations

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import SharingMode
from gpucarve.core.workload import GpuKind
from gpucarve.engine import Stage
from gpucarve.sim.run.baselines import kube_default, static_quota, whole_gpus
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload
from tests.paths import BUILTIN

THREE = load_policy(BUILTIN / "three-teams.yaml").policy


def test_kube_default_is_whole_gpus_without_quota_or_gangs() -> None:
    kd = kube_default(THREE)
    assert all(p.sharing is SharingMode.EXCLUSIVE for p in kd.pools)
    assert kd.capacity == {"a100-full": 16, "h100-full": 32, "l40s-full": 6}
    assert all(q.cohort is None for q in kd.queues)
    assert all(q.quota("h100-full").nominal == 32 for q in kd.queues)  # type: ignore[union-attr]
    s = kd.scheduling
    assert (s.gang, s.preemption, s.scoring["binpack"], s.scoring["fragmentation"]) == (
        False,
        False,
        0,
        0,
    )


def test_static_quota_keeps_sharing_and_nominal_but_not_borrowing() -> None:
    sq = static_quota(THREE)
    assert sq.capacity == THREE.capacity
    assert all(q.cohort is None for q in sq.queues)
    assert sq.queue("research").quota("h100-full").nominal == 16  # type: ignore[union-attr]
    assert sq.scheduling.gang is False


def test_whole_gpus_translates_every_request_kind() -> None:
    p = THREE
    ws = [
        workload(p, "m", "production", mig="2x3g.40gb"),
        workload(p, "n", "data-science", shared=1),
        workload(p, "f", "data-science", fraction=300),
    ]
    kinds = [(w.pod_sets[0].gpu.kind, w.pod_sets[0].gpu.count) for w in whole_gpus(ws)]
    assert kinds == [(GpuKind.WHOLE, 2), (GpuKind.WHOLE, 1), (GpuKind.WHOLE, 1)]


def test_without_gangs_pods_hold_gpus_while_the_rest_waits() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"gang": False, "preemption": False},
    )
    _, s = cycle(snapshot(p, [workload(p, "small", "r", gpus=4)]))
    # 2 pods x 6 GPUs: quota allows 4 + 12 = 16, but after the first pod no node has 6 free
    result, s = cycle(submit(s, workload(p, "gang", "r", gpus=6, pods=2, submit=1)), 10)
    # one pod fits and is placed; the other waits, holding nothing yet
    (adm,) = result.admissions
    assert adm.workload == "r/gang" and len(adm.pods) == 1
    reason = result.pending_reason("r/gang")
    assert reason is not None and reason.stage is Stage.PLACEMENT
    assert reason.message.startswith("1/2 pods placed, the rest wait holding theirs")
    # next cycle: still part-placed; when the small job leaves, the second pod follows
    from gpucarve.engine.apply import finish

    result, s = cycle(s, 20)
    assert result.admissions == ()
    result, s = cycle(finish(s, "r/small"), 30)
    assert [a.workload for a in result.admissions] == ["r/gang"]
    gang = next(rw for rw in s.running if rw.workload.id == "r/gang")
    assert len(gang.pods) == 2 and gang.start_time == 10


def test_simulated_part_placed_gang_counts_held_gpu_hours() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 2, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 16}})],
        scheduling={"gang": False, "preemption": False},
    )
    ws = [
        workload(p, "small", "r", gpus=8, duration=3600),
        workload(p, "gang", "r", gpus=8, pods=2, duration=3600, submit=1),
    ]
    result = Simulator(p, ws).run()
    assert result.first_start["r/gang"] == 3600
    assert result.completed["r/gang"] == 7200
    assert result.held_incomplete == {"r/gang"}
    s = summarize(result, window=(0, 7200))
    assert abs(s["gpu_hours_held_by_incomplete_gangs"] - 8 * 3599 / 3600) < 0.01
    assert s["gang_first_try_success"] == 0.0


def test_a_part_placed_gang_that_can_never_finish_ends_the_run() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 2, 8)],
        queues=[
            queue("r", {"h100-full": {"nominal": 8}}),
            queue("o", {"h100-full": {"nominal": 8}}),
        ],
        scheduling={"gang": False, "preemption": False},
    )
    # the queue's quota holds one of the two pods: the other waits for quota that never comes
    result = Simulator(p, [workload(p, "g", "r", gpus=8, pods=2, duration=100)]).run()
    assert result.completed == {}
    assert result.held_incomplete == {"r/g"}
    assert result.cycles < 10
