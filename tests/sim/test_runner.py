"""The event loop: progress, slow-down on shared GPUs, evictions, determinism."""

from __future__ import annotations

from gpucarve.sim.run import slowdown
from gpucarve.sim.run.fragmentation import FragmentationProbe
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload


def test_jobs_run_for_their_duration_and_complete() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "a", "r", gpus=8, duration=100),
        workload(p, "b", "r", gpus=8, duration=50, submit=10),
    ]
    result = Simulator(p, ws).run()
    assert result.completed == {"r/a": 100, "r/b": 150}
    assert result.first_start == {"r/a": 0, "r/b": 100}
    assert [i.outcome for i in result.intervals] == ["completed", "completed"]


def test_time_sliced_jobs_slow_each_other_down() -> None:
    p = policy(
        pools=[pool("s", "L40S", 1, 1, "time-slicing", replicas=4)],
        queues=[queue("d", {"l40s-shared": {"nominal": 4}})],
    )
    ws = [
        workload(p, "a", "d", shared=1, duration=1000),
        workload(p, "b", "d", shared=1, duration=1000),
    ]
    util = {"d/a": 70.0, "d/b": 70.0}
    result = Simulator(p, ws, util).run()
    rate = slowdown.speed([70.0, 70.0])
    assert 0.8 < rate < 0.9
    expected = int(1000 / rate) + 1
    assert result.completed["d/a"] == expected and result.completed["d/b"] == expected
    # alone, no slow-down
    alone = Simulator(p, ws[:1], util).run()
    assert alone.completed == {"d/a": 1000}


def test_slowdown_ends_when_the_neighbour_leaves() -> None:
    p = policy(
        pools=[pool("s", "L40S", 1, 1, "time-slicing", replicas=4)],
        queues=[queue("d", {"l40s-shared": {"nominal": 4}})],
    )
    ws = [
        workload(p, "short", "d", shared=1, duration=100),
        workload(p, "long", "d", shared=1, duration=1000),
    ]
    result = Simulator(p, ws, {"d/short": 80.0, "d/long": 80.0}).run()
    rate = slowdown.speed([80.0, 80.0])
    short_end = result.completed["d/short"]
    assert short_end == int(100 / rate) + 1
    done_while_shared = short_end * rate
    assert abs(result.completed["d/long"] - (short_end + (1000 - done_while_shared))) <= 1


def test_mig_instances_do_not_interfere() -> None:
    p = policy(
        pools=[pool("m", "A100-80GB", 1, 1, "mig", mig={"layout": {"1g.10gb": 7}})],
        queues=[queue("p", {"a100-mig-1g.10gb": {"nominal": 7}})],
    )
    ws = [workload(p, f"w{i}", "p", mig="1g.10gb", duration=500) for i in range(7)]
    result = Simulator(p, ws, {w.id: 100.0 for w in ws}).run()
    assert set(result.completed.values()) == {500}


def test_preempted_work_is_requeued_and_restarts() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
        priorityClasses=[
            {"name": "lo", "value": 0, "preemptible": True, "default": True},
            {"name": "hi", "value": 10, "preemptible": False},
        ],
        scheduling={"minRuntimeSeconds": 0},
    )
    ws = [
        workload(p, "low", "r", gpus=8, duration=1000),
        workload(p, "high", "r", gpus=8, duration=100, submit=300, priority="hi"),
    ]
    result = Simulator(p, ws).run()
    assert result.evictions == [(300, "r/low", "r/high", "preempt")]
    assert result.completed == {"r/high": 400, "r/low": 1400}
    assert [(i.workload, i.outcome) for i in result.intervals] == [
        ("r/low", "evicted"),
        ("r/high", "completed"),
        ("r/low", "completed"),
    ]


def test_unplaceable_work_does_not_hang_the_run() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "fits", "r", gpus=8, duration=10),
        workload(p, "never", "r", gpus=4, pods=3, duration=10),
    ]
    result = Simulator(p, ws).run()
    assert result.never_started == ["r/never"]


def test_same_inputs_same_run() -> None:
    p = policy(
        pools=[pool("s", "L40S", 2, 1, "time-slicing", replicas=4)],
        queues=[queue("d", {"l40s-shared": {"nominal": 8}})],
    )
    ws = [
        workload(p, f"w{i}", "d", shared=1, duration=100 + 37 * i, submit=13 * i) for i in range(20)
    ]
    util = {w.id: 20.0 + 5 * (i % 7) for i, w in enumerate(ws)}
    assert repr(Simulator(p, ws, util).run().intervals) == repr(
        Simulator(p, ws, util).run().intervals
    )


def test_fragmentation_probe_follows_every_allocation_change() -> None:
    # The probe keeps free slices per group from the steps the run applies; stopped at a
    # horizon with work running, evicted, requeued and time-shared, it must agree with a
    # probe built afresh from the allocations.
    p = policy(
        pools=[
            pool("h", "H100-SXM5-80GB", 2, 4),
            pool("d", "L40S", 1, 2, "time-slicing", replicas=4),
            pool("m", "A100-80GB", 1, 2, "mig", mig={"layout": {"3g.40gb": 2}}),
        ],
        queues=[
            queue(
                "r",
                {
                    "h100-full": {"nominal": 8},
                    "l40s-shared": {"nominal": 8},
                    "a100-mig-3g.40gb": {"nominal": 4},
                },
            )
        ],
        priorityClasses=[
            {"name": "lo", "value": 0, "preemptible": True, "default": True},
            {"name": "hi", "value": 1, "preemptible": True},
        ],
        scheduling={"minRuntimeSeconds": 0},
    )
    ws = [
        workload(p, f"g{i}", "r", gpus=1 + i % 3, duration=600 + 97 * i, submit=31 * i)
        for i in range(12)
    ]
    ws += [workload(p, f"s{i}", "r", shared=1, duration=900, submit=50 * i) for i in range(10)]
    ws += [workload(p, f"m{i}", "r", mig="3g.40gb", duration=700, submit=40 * i) for i in range(6)]
    ws.append(workload(p, "hi", "r", gpus=4, duration=300, submit=200, priority="hi"))
    sim = Simulator(p, ws, config=SimConfig(horizon_s=1500))
    result = sim.run()
    assert result.evictions and result.completed and sim.snapshot.running
    fresh = FragmentationProbe(p, sim.snapshot.cluster)
    assert sim.probe.free == fresh.free
    assert sum(fresh.free) < len(sim.snapshot.cluster.slices)
