"""Metrics on runs small enough to check by hand."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.sim.run.metrics import percentile, summarize
from gpucarve.sim.run.runner import Simulator
from tests.engine.builders import policy, pool, queue, workload


def test_two_back_to_back_jobs_on_one_node() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 8, pricePerGpuHour=2.0)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "a", "r", gpus=8, duration=3600),
        workload(p, "b", "r", gpus=8, duration=3600, submit=0),
    ]
    s = summarize(Simulator(p, ws).run(), {"r/a": 50.0, "r/b": 100.0})
    assert s["window_s"] == 7200
    assert s["allocation"] == 1.0
    assert s["sm_utilisation"] == 0.75  # half the window at 50 %, half at 100 %
    assert (s["wait_p50_s"], s["wait_max_s"]) == (0.0, 3600)
    team = s["teams"]["r"]
    assert team["gpu_hours"] == 16.0
    assert team["cost_usd"] == 32.0
    assert team["quota_use"] == {"h100-full": 1.0}
    assert s["gang_first_try_success"] == 1.0 and s["gangs"] == 0


def test_mig_slices_count_with_their_charge() -> None:
    p = policy(
        pools=[
            pool("m", "A100-80GB", 1, 1, "mig", mig={"layout": {"3g.40gb": 2}}, pricePerGpuHour=1.0)
        ],
        queues=[queue("q", {"a100-mig-3g.40gb": {"nominal": 2}})],
    )
    s = summarize(Simulator(p, [workload(p, "x", "q", mig="3g.40gb", duration=3600)]).run())
    # one 3g.40gb is 0.496 of the GPU; the pool's two instances are 0.992 GPU-equivalents
    assert s["pools"]["m"]["gpus"] == 0.992
    assert s["allocation"] == pytest.approx(0.5, abs=0.001)
    assert s["teams"]["q"]["gpu_hours"] == 0.5  # rounded to 2 places from 0.496
    assert s["teams"]["q"]["cost_usd"] == 0.5


def test_preemption_counts_lost_gpu_hours() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 4)],
        queues=[queue("r", {"h100-full": {"nominal": 4}})],
        priorityClasses=[
            {"name": "lo", "value": 0, "preemptible": True, "default": True},
            {"name": "hi", "value": 1, "preemptible": True},
        ],
        scheduling={"minRuntimeSeconds": 0},
    )
    ws = [
        workload(p, "lo", "r", gpus=4, duration=7200),
        workload(p, "hi", "r", gpus=4, duration=60, submit=1800, priority="hi"),
    ]
    s = summarize(Simulator(p, ws).run())
    assert s["preemptions"] == 1
    assert s["gpu_hours_lost_to_preemption"] == 2.0  # 4 GPUs for half an hour


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


def test_fragmentation_counts_free_gpus_no_waiting_pod_can_use() -> None:
    # Two 4-GPU nodes. A 3-GPU job runs on each for an hour; a 2-GPU job waits all that hour:
    # each node has 1 GPU free, less than the 2 the waiting pod needs, so 2 of 8 GPUs are
    # stranded while the 3-GPU jobs run, then the 2-GPU job runs on a free node and nothing
    # waits: 2 GPU × 3600 s over a 7200 s window of 8 GPUs = 12.5 %.
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 2, 4)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    ws = [
        workload(p, "a", "r", gpus=3, duration=3600),
        workload(p, "b", "r", gpus=3, duration=3600),
        workload(p, "c", "r", gpus=2, duration=3600, submit=1),
    ]
    result = Simulator(p, ws).run()
    s = summarize(result, window=(0, 7200))
    assert s["fragmentation"] == pytest.approx(2 * 3600 / (8 * 7200), abs=0.002)
    assert s["pools"]["h"]["fragmentation"] == s["fragmentation"]


def test_idle_capacity_with_nothing_waiting_is_not_fragmentation() -> None:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 2, 4)],
        queues=[queue("r", {"h100-full": {"nominal": 8}})],
    )
    s = summarize(Simulator(p, [workload(p, "a", "r", gpus=3, duration=3600)]).run())
    assert s["allocation"] == pytest.approx(3 / 8)
    assert s["fragmentation"] == 0.0


def _two_time_shared_jobs(util: float) -> dict[str, Any]:
    """Two jobs on 2 of the 8 replicas of one L40S for an hour."""
    p = policy(
        pools=[pool("d", "L40S", 1, 1, "time-slicing", replicas=8)],
        queues=[queue("q", {"l40s-shared": {"nominal": 8}})],
    )
    ws = [
        workload(p, "a", "q", shared=1, duration=3600),
        workload(p, "b", "q", shared=1, duration=3600),
    ]
    return summarize(Simulator(p, ws).run(), {"q/a": util, "q/b": util})


def _one_job_on_one_of_two_gpus(util: float) -> dict[str, Any]:
    p = policy(
        pools=[pool("h", "H100-SXM5-80GB", 1, 2)],
        queues=[queue("r", {"h100-full": {"nominal": 2}})],
    )
    return summarize(
        Simulator(p, [workload(p, "x", "r", gpus=1, duration=600)]).run(), {"r/x": util}
    )


def test_gpu_busy_reads_like_dcgm_utilisation() -> None:
    # two 60 % jobs time-share one GPU: the GPU is fully busy while both run (capped at 100 %)
    # though only 2 of its 8 replicas are allocated
    s = _two_time_shared_jobs(60.0)
    assert s["gpu_busy"] == 1.0
    assert s["allocation"] == pytest.approx(2 / 8)
    # one 40 % job on one of two whole GPUs
    assert _one_job_on_one_of_two_gpus(40.0)["gpu_busy"] == pytest.approx(0.2)


def test_gpu_busy_in_use_reads_over_the_gpus_pods_hold() -> None:
    # One 40 % job on one of two whole GPUs: busy 20 % of the pool, 40 % of what it uses.
    assert _one_job_on_one_of_two_gpus(40.0)["gpu_busy_in_use"] == pytest.approx(0.4)
    # Two 30 % jobs on 2 of 8 replicas of one GPU: the GPU is in use (whole) and 60 % busy,
    # however few of its replicas are allocated.
    assert _two_time_shared_jobs(30.0)["gpu_busy_in_use"] == pytest.approx(0.6)
    # A 3g.40gb at 70 % on an A100: in use its compute share (428 milli), busy 0.7 of that.
    p = policy(
        pools=[pool("m", "A100-80GB", 1, 1, "mig", mig={"layout": {"3g.40gb": 2}})],
        queues=[queue("q", {"a100-mig-3g.40gb": {"nominal": 2}})],
    )
    s = summarize(
        Simulator(p, [workload(p, "x", "q", mig="3g.40gb", duration=600)]).run(), {"q/x": 70.0}
    )
    assert s["gpu_busy"] == pytest.approx(0.7 * 0.428, abs=1e-4)
    assert s["gpu_busy_in_use"] == pytest.approx(0.7)
