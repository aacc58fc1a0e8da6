"""Pending pods become workloads: pod groups (gpucarve's and coscheduling's labels) as gangs,
Kueue's queue label honoured, resources summed over containers, times from the clock origin."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpucarve.config.policy_build import load_policy
from gpucarve.core.workload import GpuKind, TopologyMode
from gpucarve.kube.view.pods.pods import GroupSpec, pending_workloads, seconds_from
from tests.paths import BUILTIN

EXAMPLE = BUILTIN / "three-teams.yaml"
EPOCH = datetime(2026, 11, 29, tzinfo=UTC)


def pod(
    name: str,
    namespace: str,
    limits: dict[str, str],
    labels: dict[str, str] | None = None,
    created: str = "2026-11-29T00:01:00Z",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "creationTimestamp": created,
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": limits}}],
            **spec,
        },
    }


def test_a_pod_group_is_one_gang_with_its_min_member() -> None:
    policy = load_policy(EXAMPLE).policy
    pods = [
        pod(f"w-{i}", "research", {"nvidia.com/gpu": "8"},
            {"scheduling.x-k8s.io/pod-group": "pretrain"}, created=f"2026-11-29T00:0{i}:00Z",
            priorityClassName="training")
        for i in range(3)
    ]  # fmt: skip
    (group,) = pending_workloads(pods, policy, EPOCH, {("research", "pretrain"): GroupSpec(2)})
    w = group.workload
    assert w is not None, group.problems
    assert w.id == "research/pretrain" and w.queue == "research"
    assert w.submit_time == 0
    (ps,) = w.pod_sets
    assert (ps.count, ps.min_count, ps.gpu.kind, ps.gpu.count) == (3, 2, GpuKind.WHOLE, 8)
    assert group.pods == ("research/w-0", "research/w-1", "research/w-2")


def test_single_pods_queue_labels_and_summed_containers() -> None:
    policy = load_policy(EXAMPLE).policy
    nb = pod("nb", "notebooks", {"nvidia.com/gpu.shared": "1"},
             {"kueue.x-k8s.io/queue-name": "data-science"})  # fmt: skip
    nb["spec"]["containers"].append(
        {"name": "side", "resources": {"requests": {"cpu": "500m"}, "limits": {}}}
    )
    nb["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1500m"}
    srv = pod("srv", "serving", {"nvidia.com/mig-3g.40gb": "1"},
              nodeSelector={"gpucarve.io/pool": "production"})  # fmt: skip
    groups = pending_workloads([srv, nb], policy, EPOCH)
    assert [g.workload.id for g in groups if g.workload] == ["notebooks/nb", "serving/srv"]
    nbw, srvw = (g.workload for g in groups)
    assert nbw is not None and srvw is not None
    assert nbw.queue == "data-science" and nbw.submit_time == 60
    assert nbw.pod_sets[0].cpu_milli == 2000  # 1500m + 500m
    assert srvw.queue == "production"  # by namespace
    assert srvw.pod_sets[0].gpu.profile == "3g.40gb"


def test_bad_pods_come_back_with_problems_not_exceptions() -> None:
    policy = load_policy(EXAMPLE).policy
    bad = pod("x", "nowhere", {"nvidia.com/gpu": "1"})
    (group,) = pending_workloads([bad], policy, EPOCH)
    assert group.workload is None
    assert any(p.code == "no-queue" for p in group.problems)


def test_gpus_asked_for_by_init_containers_and_sidecars_are_counted() -> None:
    policy = load_policy(EXAMPLE).policy

    def init(name: str, gpus: str, sidecar: bool = False) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        if sidecar:
            c["restartPolicy"] = "Always"
        return c

    # a plain init container runs before the others: the pod holds the larger of the two
    hidden = pod("hidden", "research", {"nvidia.com/gpu": "1"}, initContainers=[init("i", "4")])
    # a sidecar keeps running beside the containers: it adds to them
    side = pod("side", "research", {"nvidia.com/gpu": "1"},
               initContainers=[init("s", "2", sidecar=True), init("i", "2")])  # fmt: skip
    only = pod("only", "research", {}, initContainers=[init("i", "2")])
    groups = {g.pods[0]: g for g in pending_workloads([hidden, side, only], policy, EPOCH)}
    counts = {}
    for name, g in groups.items():
        assert g.workload is not None, g.problems
        counts[name] = g.workload.pod_sets[0].gpu.count
    assert counts == {"research/hidden": 4, "research/side": 3, "research/only": 2}


def test_a_declared_runtime_comes_from_the_annotation_or_the_deadline() -> None:
    policy = load_policy(EXAMPLE).policy

    def timed(name: str, **extra: Any) -> dict[str, Any]:
        p = pod(name, "research", {"nvidia.com/gpu": "1"}, **extra.pop("spec", {}))
        p["metadata"]["annotations"] = extra
        return p

    pods = [
        timed("a", **{"gpucarve.io/expected-runtime": "2h"}),
        timed("b", **{"gpucarve.io/expected-runtime": "5400"}),
        timed("c", spec={"activeDeadlineSeconds": 600}),
        timed("d"),
        timed("e", **{"gpucarve.io/expected-runtime": "soon"}),
    ]
    got = {g.pods[0]: g for g in pending_workloads(pods, policy, EPOCH)}
    runtimes = {
        k: (g.workload.expected_runtime_s, g.workload.runtime_limit_s)
        for k, g in got.items()
        if g.workload
    }
    assert runtimes == {
        "research/a": (7200, None),  # claims
        "research/b": (5400, None),
        "research/c": (None, 600),  # a deadline the kubelet enforces
        "research/d": (None, None),
    }
    bad = got["research/e"]
    assert bad.workload is None and any(
        "expectedRuntimeSeconds" in ".".join(map(str, p.path)) for p in bad.problems
    ), bad.problems


def test_pods_of_a_workload_api_pod_group_are_one_gang_and_an_unknown_topology_is_named() -> None:
    policy = load_policy(EXAMPLE).policy
    pods = [
        pod(f"w-{i}", "research", {"nvidia.com/gpu": "8"}, priorityClassName="training",
            schedulingGroup={"podGroupName": "pretrain"})
        for i in range(3)
    ]  # fmt: skip
    (group,) = pending_workloads(pods, policy, EPOCH, {("research", "pretrain"): GroupSpec(3)})
    w = group.workload
    assert w is not None, group.problems
    assert w.id == "research/pretrain" and w.pod_sets[0].min_count == 3
    host = GroupSpec(3, topology_keys=("kubernetes.io/hostname",))
    (group,) = pending_workloads(pods, policy, EPOCH, {("research", "pretrain"): host})
    assert group.workload is not None and group.workload.topology is TopologyMode.NODE
    zone = GroupSpec(3, topology_keys=("topology.kubernetes.io/zone",))
    (group,) = pending_workloads(pods, policy, EPOCH, {("research", "pretrain"): zone})
    assert group.workload is None and group.pods == tuple(f"research/w-{i}" for i in range(3))
    (problem,) = group.problems
    assert problem.code == "unknown-topology-key"
    assert "topology.kubernetes.io/zone" in problem.message


def test_only_pods_a_controller_makes_again_are_restartable() -> None:
    policy = load_policy(EXAMPLE).policy

    def owned(name: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
        p = pod(name, "research", {"nvidia.com/gpu": "1"})
        p["metadata"]["ownerReferences"] = refs
        return p

    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u"}
    pods = [
        owned("by-controller", [{**rs, "controller": True}]),
        owned("referenced", [rs]),  # an owner that is not its controller makes nothing
        pod("bare", "research", {"nvidia.com/gpu": "1"}),
    ]
    got = {g.pods[0]: g.workload for g in pending_workloads(pods, policy, EPOCH)}
    assert {k: w.restartable for k, w in got.items() if w is not None} == {
        "research/by-controller": True,
        "research/referenced": False,
        "research/bare": False,
    }


def test_times_are_whole_seconds_rounded_down_from_the_origin() -> None:
    # An origin part-way through a second: a pod made in the second before it is at -1 and one
    # made in the second after it at 0 (truncating toward zero put both at 0, so a younger pod
    # could not be told from an older one).
    origin = datetime(2026, 11, 29, 0, 0, 10, 700000, tzinfo=UTC)
    assert seconds_from("2026-11-29T00:00:10Z", origin) == -1
    assert seconds_from("2026-11-29T00:00:11Z", origin) == 0
    assert seconds_from("2026-11-29T00:00:12Z", origin) == 1
    assert seconds_from("2026-11-29T00:00:08Z", origin) == -3
