"""Workloads as users submit them, on a real API server with kube-controller-manager's Job,
Deployment and ReplicaSet controllers making the pods: an indexed Job and a set of
JobSet-labelled Jobs are gangs without a PodGroup, bound all or nothing; a Deployment's
replicas are each their own workload; pods labelled as a LeaderWorkerSet's group form one gang
of its size. (The JobSet and LeaderWorkerSet controllers are not run: their objects are written
here with the labels they set, which is all the mapping reads; see kube/view/pods/owners.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration.api import Api, wait_for
from tests.integration.invariants import bound_at_once
from tests.integration.kube_pods import (
    GPU_TOLERATION,
    condition,
    create_pod,
    node_of,
    pod,
    pods_in,
)
from tests.integration.stack_setup import example_policy, populate, scheduling

pytestmark = pytest.mark.integration
NAMESPACES = ["research", "data-science"]
JOBSET = "jobset.sigs.k8s.io/jobset-name"


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, policy_file: Path
) -> Iterator[tuple[LocalStack, Api]]:
    workdir = tmp_path_factory.mktemp("jobs")
    with LocalStack(find_binaries(), workdir, policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, NAMESPACES)
        yield stack, api


@pytest.fixture
def scheduler(cluster: tuple[LocalStack, Api], policy_file: Path) -> Iterator[Scheduler]:
    stack, api = cluster
    with scheduling(stack, policy_file) as sched:
        yield sched
    for ns in NAMESPACES:
        api.call("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs?propagationPolicy=Background")
        api.call("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments")
        for name in pods_in(api, ns):
            api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
    wait_for(lambda: not any(pods_in(api, ns) for ns in NAMESPACES), what="pods deleted")


def job(name: str, pods: int, gpus: int, labels: dict[str, str] | None = None,
        indexed: bool = False) -> dict[str, Any]:  # fmt: skip
    """A Job of `pods` parallel pods that must all complete, as a user writes one."""
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "template": {
            "metadata": {"labels": dict(labels or {})},
            "spec": {
                "schedulerName": "gpucarve",
                "restartPolicy": "Never",
                "tolerations": [GPU_TOLERATION],
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def _of_job(api: Api, ns: str, prefix: str) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in pods_in(api, ns).items() if n.startswith(prefix)}


def test_an_indexed_job_binds_all_or_nothing(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    create_pod(api, pod("data-science", "holder", "nvidia.com/gpu", 6))
    wait_for(lambda: node_of(pods_in(api, "data-science")["holder"]), what="holder bound")
    api.create("/apis/batch/v1/namespaces/research/jobs", job("train", 4, 8, indexed=True))

    def all_wait() -> dict[str, str] | None:
        pods = _of_job(api, "research", "train-")
        conds = {n: condition(p) for n, p in pods.items()}
        # (while its pods are being created the Job waits for the rest: that reason first)
        if len(pods) == 4 and all(
            c and c["status"] == "False" and c["message"].startswith("quota/")
            for c in conds.values()
        ):
            return {n: c["message"] for n, c in conds.items() if c}
        return None

    reasons = wait_for(all_wait, what="the Job's four pods to wait together")
    (reason,) = set(reasons.values())  # one workload, one reason: for all 32 GPUs at once
    assert reason.startswith("quota/") and "needs 32 more" in reason, reason
    assert not any(node_of(p) for p in _of_job(api, "research", "train-").values())
    seen: list[tuple[float, int]] = []

    def bound() -> bool:
        pods = _of_job(api, "research", "train-")
        seen.append((time.monotonic(), sum(1 for p in pods.values() if node_of(p))))
        return seen[-1][1] == 4

    api.call("DELETE", "/api/v1/namespaces/data-science/pods/holder?gracePeriodSeconds=0")
    wait_for(bound, what="the whole Job bound")
    assert (why := bound_at_once(seen, 4)) is None, f"the Job: {why}"
    indexes = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        for p in _of_job(api, "research", "train-").values()
    }
    assert indexes == {"0", "1", "2", "3"}


def test_jobset_labelled_jobs_are_one_gang(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    # as the JobSet controller labels its Jobs and their pods (it has two Jobs)
    labels = {JOBSET: "llm", "jobset.sigs.k8s.io/global-replicas": "2"}
    api.create("/apis/batch/v1/namespaces/research/jobs", job("llm-workers-0", 3, 4, labels))

    def workers_wait() -> str | None:
        pods = _of_job(api, "research", "llm-workers-0-")
        conds = [condition(p) for p in pods.values()]
        if len(pods) == 3 and all(c and c["status"] == "False" for c in conds):
            return str(conds[0]["message"]) if conds[0] else None
        return None

    message = wait_for(workers_wait, what="the workers to wait for their driver")
    assert message == (
        "gang/min-member: pod group research/jobset-llm has 3 of its 4 pods (minMember); "
        "waiting for the rest"
    )
    api.create("/apis/batch/v1/namespaces/research/jobs", job("llm-driver-0", 1, 4, labels))

    def all_bound() -> bool:
        pods = _of_job(api, "research", "llm-")
        return len(pods) == 4 and all(node_of(p) for p in pods.values())

    wait_for(all_bound, what="driver and workers bound")


def test_a_deployments_pods_are_each_their_own_workload(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster
    # room for two 8-GPU replicas of data-science's quota (6 + 10 borrowed): the third waits
    template = job("x", 1, 8)["spec"]["template"]
    template["metadata"]["labels"] = {"app": "serve"}
    template["spec"]["restartPolicy"] = "Always"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "serve"}},
                 "template": template},
    }  # fmt: skip
    api.create("/apis/apps/v1/namespaces/data-science/deployments", deployment)

    def two_bound_one_waits() -> bool:
        pods = _of_job(api, "data-science", "serve-")
        bound = [p for p in pods.values() if node_of(p)]
        waiting = [p for p in pods.values() if (c := condition(p)) and c["status"] == "False"]
        return len(bound) == 2 and len(waiting) == 1

    wait_for(two_bound_one_waits, what="two replicas bound, the third waiting on its own")


def test_leaderworkerset_labelled_pods_are_one_gang_of_its_size(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    _, api = cluster

    def member(i: int) -> dict[str, Any]:
        p = pod("research", f"lws-0-{i}", "nvidia.com/gpu", 4)
        lws = "leaderworkerset.sigs.k8s.io"
        p["metadata"]["labels"].update({f"{lws}/name": "llm", f"{lws}/group-index": "0"})
        p["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "3"}
        return p

    for i in range(2):
        create_pod(api, member(i))

    def says_short() -> str | None:
        c = condition(pods_in(api, "research").get("lws-0-0") or {})
        return c["message"] if c and c["status"] == "False" else None

    message = wait_for(says_short, what="the group's reason")
    assert "pod group research/lws-llm-0 has 2 of its 3 pods" in message
    create_pod(api, member(2))
    wait_for(
        lambda: (
            all(node_of(p) for p in _of_job(api, "research", "lws-0-").values())
            and len(_of_job(api, "research", "lws-0-")) == 3
        ),
        what="the leader and its workers bound together",
    )


def _upstream_group(api: Api, name: str, spec: dict[str, Any]) -> None:
    """A PodGroup of Kubernetes' own Workload API (scheduling.k8s.io/v1beta1), as a workload
    controller writes one from its Workload's template."""
    api.create(
        "/apis/scheduling.k8s.io/v1beta1/namespaces/research/podgroups",
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
         "metadata": {"name": name, "namespace": "research"}, "spec": spec},
    )  # fmt: skip


def _in_group(name: str, group: str) -> dict[str, Any]:
    p = pod("research", name, "nvidia.com/gpu", 4)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def test_a_workload_api_pod_group_is_one_gang_of_its_min_count(
    cluster: tuple[LocalStack, Api], scheduler: Scheduler
) -> None:
    """Pods that name a PodGroup of the Workload API in spec.schedulingGroup start together
    once its gang policy's minCount is there; a topology key the policy does not know keeps
    the gang waiting with that key named."""
    _, api = cluster
    assert "Workload API PodGroup" in scheduler.served, "the test stack serves the beta API"
    _upstream_group(api, "train", {"schedulingPolicy": {"gang": {"minCount": 3}},
                                   "schedulingConstraints": {"topology": [
                                       {"key": "gpucarve.io/rack"}]}})  # fmt: skip
    for i in range(2):
        create_pod(api, _in_group(f"train-{i}", "train"))

    def reason(name: str) -> str | None:
        c = condition(pods_in(api, "research").get(name) or {})
        return c["message"] if c and c["status"] == "False" else None

    message = wait_for(lambda: reason("train-0"), what="the group's reason")
    assert "pod group research/train has 2 of its 3 pods" in message, message

    def scheduled(status: str) -> dict[str, Any] | None:
        obj = api.get("/apis/scheduling.k8s.io/v1beta1/namespaces/research/podgroups/train")
        conds = (obj.get("status") or {}).get("conditions") or []
        found = [c for c in conds if c["type"] == "PodGroupInitiallyScheduled"]
        return found[0] if found and found[0]["status"] == status else None

    # the PodGroup says why, in the condition kube-scheduler keeps there
    cond = wait_for(lambda: scheduled("False"), what="the PodGroup's condition")
    assert cond["reason"] == "Unschedulable" and "2 of its 3 pods" in cond["message"], cond
    create_pod(api, _in_group("train-2", "train"))
    wait_for(
        lambda: all(node_of(pods_in(api, "research").get(f"train-{i}") or {}) for i in range(3)),
        what="the gang of three bound together",
    )
    pods = pods_in(api, "research")
    racks = {
        api.get(f"/api/v1/nodes/{node_of(pods[f'train-{i}'])}")["metadata"]["labels"][
            "gpucarve.io/rack"
        ]
        for i in range(3)
    }
    assert len(racks) == 1, racks  # the PodGroup's topology key: one rack
    assert (
        wait_for(lambda: scheduled("True"), what="the PodGroup scheduled")["reason"] == "Scheduled"
    )
    _upstream_group(api, "zoned", {"schedulingPolicy": {"gang": {"minCount": 1}},
                                   "schedulingConstraints": {"topology": [
                                       {"key": "topology.kubernetes.io/zone"}]}})  # fmt: skip
    create_pod(api, _in_group("zoned-0", "zoned"))
    message = wait_for(lambda: reason("zoned-0"), what="the zoned gang's reason")
    assert "topology.kubernetes.io/zone" in message, message
