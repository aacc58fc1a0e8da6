"""Dynamic MIG in the simulator: a repartition takes the configured time, during which the new
instances are not used; the queued work starts once they are ready; metrics see the new
slices; the baselines keep their layouts static."""

from __future__ import annotations

from typing import Any

from gpucarve.config.workload_spec import build_workload
from gpucarve.sim.run.baselines import static_quota
from gpucarve.sim.run.metrics import summarize
from gpucarve.sim.run.records import SimConfig
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload


def _policy(dynamic: bool) -> Any:
    mig: dict[str, Any] = {"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}
    if dynamic:
        mig["dynamic"] = {"minSecondsBetweenChanges": 0, "granularity": "instance"}
    return policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig", mig=mig)],
        queues=[
            queue(
                "team",
                {
                    "a100-mig-3g.40gb": {"nominal": 1},
                    "a100-mig-2g.20gb": {"nominal": 1},
                    "a100-mig-1g.10gb": {"nominal": 7 if dynamic else 2},
                },
            )
        ],
    )


def _run(dynamic: bool, reconfigure_s: int = 90) -> tuple[Any, Any]:
    p = _policy(dynamic)
    ws = [workload(p, f"s{i}", "team", mig="1g.10gb", submit=0, duration=3600) for i in range(5)]
    sim = Simulator(p, ws, config=SimConfig(mig_reconfigure_s=reconfigure_s))
    return p, sim.run()


def test_a_repartition_takes_its_time_then_the_queue_runs() -> None:
    _, result = _run(True)
    assert [r[:2] for r in result.repartitions] == [(0, "inf-0/gpu0")]
    assert result.first_start["team/s0"] == 0 and result.first_start["team/s1"] == 0
    # the three that waited start when the new 1g.10gb instances are ready, not before
    assert sorted(result.first_start[f"team/s{i}"] for i in (2, 3, 4)) == [90, 90, 90]
    assert len(result.completed) == 5
    held = {sid for iv in result.intervals for pod in iv.pods for sid in pod.slice_ids}
    assert len(held) == 5 and all("/1g.10gb@" in sid for sid in held)
    summary = summarize(result)
    assert summary["completed"] == 5


def test_the_reconfiguration_time_is_configurable() -> None:
    _, result = _run(True, reconfigure_s=30)
    assert max(result.first_start.values()) == 30


def test_static_layouts_wait_for_instances_to_free() -> None:
    _, result = _run(False)
    assert result.repartitions == []
    assert sorted(result.first_start.values()) == [0, 0, 3600, 3600, 7200]


def test_static_quota_baseline_drops_dynamic_mig() -> None:
    p = _policy(True)
    assert static_quota(p).pools[0].mig_dynamic is None


def test_work_for_a_profile_missing_from_the_layout_waits_out_the_minimum_interval() -> None:
    """The GPU starts as one 7g.80gb; `dynamic.profiles` lets it be carved into 1g.10gb. A
    1g job reshapes it at 0; a 7g job arriving later needs it whole again, but the GPU may not
    change before 600 s: with nothing else running or arriving the run must go on until then
    (it used to stop, and the 7g job was reported as never fitting the 1g layout)."""
    p = policy(
        pools=[
            pool(
                "inf", "A100-80GB", 1, 1, "mig",
                mig={"layout": {"7g.80gb": 1},
                     "dynamic": {"minSecondsBetweenChanges": 600, "profiles": ["1g.10gb"]}},
            )
        ],
        queues=[queue("team", {"a100-mig-7g.80gb": {"nominal": 1},
                               "a100-mig-1g.10gb": {"nominal": 7}})],
    )  # fmt: skip
    ws = [
        workload(p, "small", "team", mig="1g.10gb", submit=0, duration=100),
        workload(p, "whole", "team", mig="7g.80gb", submit=50, duration=100),
    ]
    result = Simulator(p, ws, config=SimConfig(mig_reconfigure_s=60)).run()
    assert result.first_start["team/small"] == 60
    assert [r[:2] for r in result.repartitions] == [(0, "inf-0/gpu0"), (600, "inf-0/gpu0")]
    assert result.first_start["team/whole"] == 660
    assert sorted(result.completed) == ["team/small", "team/whole"]


def test_on_a_dra_pool_the_new_partitions_serve_at_once() -> None:
    """The DRA driver creates a partition when its claim is prepared: the work that waited for
    a repartition starts in the cycle after it, not after the MIG manager's time."""
    mig = {"layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, "dynamic": {}}
    p = policy(
        pools=[pool("inf", "A100-80GB", 1, 1, "mig", mig=mig, devices="dra")],
        queues=[queue("team", {"a100-dra-mig-3g.40gb": {"nominal": 1},
                               "a100-dra-mig-2g.20gb": {"nominal": 1},
                               "a100-dra-mig-1g.10gb": {"nominal": 7}})],
    )  # fmt: skip
    one_g = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    ws = []
    for i in range(5):
        doc = {"name": f"s{i}", "namespace": "team", "submitTime": 0, "duration": 3600,
               "podSets": [{"name": "main", "count": 1, "deviceClaims": [
                   {"deviceClassName": "mig.nvidia.com", "selectors": [one_g]}]}]}  # fmt: skip
        w, problems = build_workload(doc, p)
        assert w is not None, problems
        ws.append(w)
    result = Simulator(p, ws, config=SimConfig(mig_reconfigure_s=90)).run()
    assert [r[:2] for r in result.repartitions] == [(0, "inf-0/gpu0")]
    assert max(result.first_start.values()) < 90, result.first_start
    assert len(result.completed) == 5
