"""The scheduler's metrics after a cycle, read back in Prometheus' text format: quota usage,
borrowing and lending per queue, pending work by reason stage, waits, first-try gang
admissions, evictions with the GPU time they cost, and slices per pool with fragmentation."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucarve.engine import run_cycle
from gpucarve.metrics import scheduler_metrics
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics
from tests.engine.builders import cycle, policy, pool, queue, snapshot, submit, workload

P = policy(
    pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
    queues=[
        queue("a", {"h100-full": {"nominal": 8}}, cohort="c"),
        queue("b", {"h100-full": {"nominal": 8}}, cohort="c"),
    ],
    cohorts=[{"name": "c"}],
    scheduling={"minRuntimeSeconds": 0},
)


def samples(m: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(m.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(m: SchedulerMetrics, name: str, **labels: str) -> float:
    return samples(m)[(name, tuple(sorted(labels.items())))]


def test_quota_usage_borrowing_and_lending_after_a_cycle() -> None:
    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "big", "a", gpus=8, pods=2)])
    result = run_cycle(s, 30)
    m.observe_cycle(s, result, 0.01)
    assert value(m, "gpucarve_admission_wait_seconds_count", queue="a") == 1
    assert value(m, "gpucarve_admission_wait_seconds_sum", queue="a") == 30
    assert value(m, "gpucarve_gang_admissions_total", queue="a", first_try="true") == 1
    _, s = cycle(s, 30)
    # b asks beyond its nominal quota: nothing to reclaim, it waits on quota
    s = submit(s, workload(P, "wide", "b", gpus=8, pods=2, submit=40))
    result = run_cycle(s, 50)
    m.observe_cycle(s, result, 0.01)
    assert value(m, "gpucarve_queue_usage_slices", queue="a", flavor="h100-full") == 16
    assert value(m, "gpucarve_queue_borrowed_slices", queue="a", flavor="h100-full") == 8
    assert value(m, "gpucarve_queue_lent_slices", queue="b", flavor="h100-full") == 8
    assert value(m, "gpucarve_queue_nominal_slices", queue="b", flavor="h100-full") == 8
    assert value(m, "gpucarve_pending_workloads", queue="b", reason="quota") == 1
    assert (
        value(m, "gpucarve_pool_slices", pool="train", flavor="h100-full", state="allocated") == 16
    )
    assert value(m, "gpucarve_pool_slices", pool="train", flavor="h100-full", state="free") == 0
    assert value(m, "gpucarve_cycle_duration_seconds_count") == 2


def test_evictions_count_with_the_gpu_time_they_cost() -> None:
    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "hold", "a", gpus=8, pods=2)])
    _, s = cycle(s, 0)
    s = submit(s, workload(P, "late", "b", gpus=4, pods=2, submit=10))
    first = run_cycle(s, 10)  # b's nominal is lent out: reclaim, at once (no minimum runtime)
    m.observe_cycle(s, first, 0.0)
    (ev,) = first.evictions
    assert value(m, "gpucarve_evictions_total", queue="a", cause="reclaim") == 1
    # 16 whole GPUs ran for 10 s
    assert value(m, "gpucarve_evicted_gpu_seconds_total", queue="a", cause="reclaim") == 160
    assert ev.workload == "a/hold"


def test_free_slices_no_waiting_shape_can_use_are_fragmented() -> None:
    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "small", "a", gpus=3, pods=1)])
    _, s = cycle(s, 0)  # 5 free on one node, 8 on the other
    s = submit(s, workload(P, "wide", "a", gpus=8, pods=2, submit=1))
    result = run_cycle(s, 1)
    m.observe_cycle(s, result, 0.0)
    # the 8-GPU pods cannot use the node with 5 free
    assert value(m, "gpucarve_pool_fragmented_slices", pool="train", flavor="h100-full") == 5


def test_pool_gauges_are_counted_when_read_from_the_last_cycle_once_per_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = []
    real = scheduler_metrics.pool_slices

    def counting(*args: Any) -> Any:
        counted.append(1)
        return real(*args)

    monkeypatch.setattr(scheduler_metrics, "pool_slices", counting)
    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "small", "a", gpus=3, pods=1)])
    for now in (0, 1):  # two cycles, nothing read: nothing counted
        result, s = cycle(s, now)
        m.observe_cycle(s, result, 0.0)
    assert counted == []
    s = submit(s, workload(P, "more", "a", gpus=5, pods=1, submit=2))
    result = run_cycle(s, 2)
    m.observe_cycle(s, result, 0.0)
    # read twice: the last cycle's figures (its admission counted in), counted once
    for _ in range(2):
        assert (
            value(m, "gpucarve_pool_slices", pool="train", flavor="h100-full", state="allocated")
            == 8
        )
    assert counted == [1]


def test_a_gang_admitted_after_waiting_is_no_first_try() -> None:
    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "hold", "a", gpus=8, pods=1)])
    _, s = cycle(s, 0)
    s = submit(s, workload(P, "pair", "a", gpus=8, pods=2, submit=1))
    waited = run_cycle(s, 1)
    m.observe_cycle(s, waited, 0.0)
    assert "a/pair" in {p.workload for p in waited.pending}
    from gpucarve.engine.apply import finish

    s = finish(s, "a/hold")
    admitted = run_cycle(s, 2)
    m.observe_cycle(s, admitted, 0.0)
    assert value(m, "gpucarve_gang_admissions_total", queue="a", first_try="false") == 1


def test_a_reserving_gang_and_its_expected_start_are_exported() -> None:
    import dataclasses

    taint = [{"key": "spare", "value": "x", "effect": "NoSchedule"}]
    p = policy(
        pools=[
            pool("train", "H100-SXM5-80GB", 1, 8),
            pool("spare", "H100-SXM5-80GB", 1, 8, taints=taint),
        ],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}),
            queue("b", {"h100-full": {"nominal": 8}}),
        ],
        scheduling={"minRuntimeSeconds": 0, "reserveAfterSeconds": 0},
    )
    running = dataclasses.replace(workload(p, "run", "b", gpus=4), runtime_limit_s=900)
    _, s = cycle(snapshot(p, [running]))
    s = submit(s, workload(p, "gang", "a", gpus=8, submit=10))
    m = SchedulerMetrics()
    result = run_cycle(s, 100)
    m.observe_cycle(s, result, 0.01)
    assert value(m, "gpucarve_reserving_workloads", queue="a") == 1
    assert value(m, "gpucarve_reserving_workloads", queue="b") == 0
    assert value(m, "gpucarve_reservation_start_seconds", queue="a") == 800


def test_idle_gpu_seconds_by_cause_count_each_cycles_shares_until_the_next() -> None:
    # b runs 4 of its 8 and asks 8 more: 12 H100s sit free while it waits on its nominal
    # quota, counted from the cycle that saw it until the next
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 2, 8)],
        queues=[
            queue("a", {"h100-full": {"nominal": 8}}),
            queue("b", {"h100-full": {"nominal": 8}}),
        ],
    )
    _, s = cycle(snapshot(p, [workload(p, "run", "b", gpus=4)]))
    s = submit(s, workload(p, "more", "b", gpus=8, submit=5))
    m = SchedulerMetrics()
    for now in (10, 40):
        m.observe_cycle(s, run_cycle(s, now), 0.01)
    got = value(m, "gpucarve_idle_gpu_seconds_total", pool="train", cause="nominal-quota")
    assert got == 12 * 30


def test_draining_gpus_and_unit_quotas_are_exported() -> None:
    from tests.engine.test_drain import _busy, _policy, _three_big

    p = _policy(drain=True)
    s = _three_big(p, _busy(p), 100)
    m = SchedulerMetrics()
    m.observe_cycle(s, run_cycle(s, 100), 0.01)
    assert value(m, "gpucarve_mig_draining_gpus", pool="inf") == 1
    # the team's quota is one GPU unit: reported in GPUs (3g.40gb + 1g.10gb = 0.625)
    assert value(m, "gpucarve_queue_nominal_slices", queue="team", flavor="a100") == 2
    assert value(m, "gpucarve_queue_usage_slices", queue="team", flavor="a100") == 0.625


def test_the_recent_borrowed_share_is_a_gauge_with_a_half_life_only() -> None:
    import dataclasses

    m = SchedulerMetrics()
    s = snapshot(P, [workload(P, "big", "a", gpus=8, pods=2)])
    result, s = cycle(s, 0)
    m.observe_cycle(s, result, 0.01)
    assert not [k for k in samples(m) if k[0] == "gpucarve_queue_recent_borrowed_share"]
    timed = dataclasses.replace(
        P, scheduling=dataclasses.replace(P.scheduling, usage_half_life_s=3600)
    )
    s = snapshot(timed, [workload(timed, "big", "a", gpus=8, pods=2)])
    _, s = cycle(s, 0)
    # a borrowed half the cohort for an hour, one half-life: a quarter
    s = submit(s, workload(timed, "more", "b", gpus=8, submit=3600))
    result = run_cycle(s, 3600)
    m.observe_cycle(s, result, 0.01)
    assert value(m, "gpucarve_queue_recent_borrowed_share", queue="a") == pytest.approx(0.25)
    assert value(m, "gpucarve_queue_recent_borrowed_share", queue="b") == 0


def test_a_cohort_tree_exports_what_each_cohort_holds_draws_and_borrows() -> None:
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 4, 8)],
        cohorts=[
            {"name": "company"},
            {
                "name": "ml",
                "parent": "company",
                "quota": {"h100-full": {"nominal": 0, "lendingLimit": 4}},
            },
        ],
        queues=[
            queue("r", {"h100-full": {"nominal": 16}}, cohort="ml"),
            queue("s", {"h100-full": {"nominal": 4}}, cohort="ml"),
            queue("b", {"h100-full": {"nominal": 12}}, cohort="company"),
        ],
        scheduling={"minRuntimeSeconds": 0},
    )
    m = SchedulerMetrics()
    # s runs 24, 20 past its own: ml holds 20 (r's 16 and s's 4) and lends company only 4 of
    # it, keeping 16 guaranteed; its members draw 24, 4 beyond what it holds, and company sees
    # ml's 8 past its guaranteed part
    s = snapshot(p, [workload(p, "wide", "s", gpus=8, pods=3)])
    _, s = cycle(s, 0)
    m.observe_cycle(s, run_cycle(s, 10), 0.01)
    got = {
        (name, labels): v
        for (name, labels), v in samples(m).items()
        if name.startswith("gpucarve_cohort_")
    }
    ml = (("cohort", "ml"), ("flavor", "h100-full"))
    top = (("cohort", "company"), ("flavor", "h100-full"))
    assert got[("gpucarve_cohort_holds_slices", ml)] == 20
    assert got[("gpucarve_cohort_usage_slices", ml)] == 24
    assert got[("gpucarve_cohort_borrowed_slices", ml)] == 4
    assert got[("gpucarve_cohort_holds_slices", top)] == 16  # b's 12 and what ml lends, 4
    assert got[("gpucarve_cohort_usage_slices", top)] == 8
    assert got[("gpucarve_cohort_borrowed_slices", top)] == 0
    flat = SchedulerMetrics()
    s = snapshot(P, [workload(P, "big", "a", gpus=8, pods=2)])
    flat.observe_cycle(s, run_cycle(s, 0), 0.01)
    assert not [k for k in samples(flat) if k[0].startswith("gpucarve_cohort_")]


def test_work_held_idle_is_a_gauge_by_queue_and_stage_and_idle_reclaims_count() -> None:
    import dataclasses

    rule = {"activityBelow": 5, "warnAfterSeconds": 60, "reclaimAfterSeconds": 120}
    quota = {"h100-full": {"nominal": 4, "borrowingLimit": 8}}
    p = policy(
        pools=[pool("train", "H100-SXM5-80GB", 1, 8)],
        queues=[queue("a", quota, cohort="c", idleness=rule), queue("b", quota, cohort="c")],
        cohorts=[{"name": "c"}],
        scheduling={"minRuntimeSeconds": 0},
    )
    ws = [workload(p, f"n{i}", "a", gpus=2, submit=i) for i in range(4)]
    _, s = cycle(snapshot(p, ws))
    m = SchedulerMetrics()
    idle = dataclasses.replace(s, idle_since={"a/n0": 0, "a/n3": 50})
    m.observe_cycle(idle, run_cycle(idle, 100), 0.01)
    assert value(m, "gpucarve_workloads_held_idle", queue="a", stage="warned") == 1  # n0
    assert value(m, "gpucarve_workloads_held_idle", queue="a", stage="reclaimable") == 0
    waiting = dataclasses.replace(
        submit(s, workload(p, "w", "b", gpus=4, submit=150)), idle_since={"a/n2": 0, "a/n3": 0}
    )
    result = run_cycle(waiting, 200)
    m.observe_cycle(waiting, result, 0.01)
    # a's borrowed part, idle: taken as idle before plain reclaim would take it
    assert {(e.workload, str(e.cause)) for e in result.evictions} == {
        ("a/n2", "idle"),
        ("a/n3", "idle"),
    }
    assert value(m, "gpucarve_evictions_total", queue="a", cause="idle") == 2
    assert value(m, "gpucarve_workloads_held_idle", queue="a", stage="reclaimable") == 0
