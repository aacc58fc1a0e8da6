"""The shadow's book of what it would have started: the first cycle it would have, the slices
waiting that it would run, the slice-seconds they wait, and how much sooner it would have
started a workload once the real scheduler does."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from gpucarve.config.policy_build import load_policy
from gpucarve.engine.decisions import Admission, CycleResult
from gpucarve.kube.scheduler.reactions import Decided, Parts
from gpucarve.kube.scheduler.shadow import ReadOnlyClient, WouldStart, _kind
from gpucarve.metrics.scheduler_metrics import SchedulerMetrics
from tests.paths import BUILTIN

T0 = 1_796_000_000


def _parts(now: int, metrics: SchedulerMetrics) -> Any:
    policy = load_policy(BUILTIN / "three-teams.yaml").policy
    return SimpleNamespace(
        clock=lambda: datetime.fromtimestamp(now, UTC), metrics=metrics, policy=policy
    )


def _decided(admitted: list[str], running: list[str]) -> Any:
    admissions = tuple(Admission(w, "research", (), (("h100-full", 8),)) for w in admitted)
    snapshot = SimpleNamespace(
        running=[SimpleNamespace(workload=SimpleNamespace(id=w)) for w in running]
    )
    return SimpleNamespace(result=CycleResult(0, admissions), snapshot=snapshot)


def _value(m: SchedulerMetrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_what_the_shadow_would_have_started_is_kept_and_measured() -> None:
    m, would = SchedulerMetrics(), WouldStart()
    would.react(cast(Parts, _parts(T0, m)), cast(Decided, _decided(["research/a"], [])))
    assert would.of("research/a") == T0
    assert _value(m, "gpucarve_shadow_ahead_slices", queue="research") == 8
    assert _value(m, "gpucarve_shadow_ahead_slices", queue="production") == 0
    # still waiting 30 s later, and admitted again: the first decision stands
    would.react(cast(Parts, _parts(T0 + 30, m)), cast(Decided, _decided(["research/a"], [])))
    assert would.of("research/a") == T0
    assert _value(m, "gpucarve_shadow_ahead_slice_seconds_total", queue="research") == 240
    # the real scheduler starts it 45 s after the shadow would have
    would.react(cast(Parts, _parts(T0 + 45, m)), cast(Decided, _decided([], ["research/a"])))
    assert _value(m, "gpucarve_shadow_start_lead_seconds_count", queue="research") == 1
    assert _value(m, "gpucarve_shadow_start_lead_seconds_sum", queue="research") == 45
    assert _value(m, "gpucarve_shadow_ahead_slices", queue="research") == 0


def test_the_read_only_client_never_sends_a_write_and_counts_each() -> None:
    # a server nobody listens on: a write that were sent would fail
    client = ReadOnlyClient("https://127.0.0.1:9", None, {})  # type: ignore[arg-type]
    assert client.call("POST", "/api/v1/namespaces/a/pods/p/binding", {}) is None
    assert client.call("PATCH", "/api/v1/nodes/n1", {}) is None
    client.call("POST", "/api/v1/namespaces/a/events", {})
    client.call("POST", "/api/v1/namespaces/b/events", {})
    assert client.withheld == {"POST pods/binding": 1, "PATCH nodes": 1, "POST events": 2}


def test_kinds_are_named_with_their_subresource() -> None:
    assert _kind("/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c/status") == (
        "resourceclaims/status"
    )
    assert _kind("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases") == "leases"


def test_the_running_difference_is_summed_per_queue_for_the_dashboard() -> None:
    m, would = SchedulerMetrics(), WouldStart()
    would.react(cast(Parts, _parts(T0, m)), cast(Decided, _decided(["research/a"], [])))
    would.react(cast(Parts, _parts(T0 + 30, m)), cast(Decided, _decided(["research/a"], [])))
    summary = would.summary()
    assert summary["queues"] == [{"queue": "research", "aheadSlices": 8,
                                  "waitedSliceHours": round(240 / 3600, 3), "startedLater": 0,
                                  "meanLeadSeconds": None, "maxLeadSeconds": None}]  # fmt: skip
    would.react(cast(Parts, _parts(T0 + 45, m)), cast(Decided, _decided([], ["research/a"])))
    (row,) = would.summary()["queues"]
    assert (row["aheadSlices"], row["startedLater"], row["meanLeadSeconds"]) == (0, 1, 45.0)
    assert row["waitedSliceHours"] == round(360 / 3600, 3)  # 8 slices for 45 s
