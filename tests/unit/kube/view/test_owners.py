"""Gangs found from the labels and owners their controllers give the pods: each mapping of
kube/view/pods/owners.py, and the sizes read from Jobs."""

from __future__ import annotations

from typing import Any

import pytest

from gpucarve.kube.view.pods.group_spec import GroupSpec
from gpucarve.kube.view.pods.owner_kinds import group_of
from gpucarve.kube.view.pods.owners import gang_size, job_specs

JOB_OWNER = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u"}]


def _meta(labels: dict[str, str], annotations: dict[str, str] | None = None,
          owners: list[dict[str, str]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"name": "p", "namespace": "ns", "labels": labels,
            "annotations": annotations or {}, "ownerReferences": owners or []}  # fmt: skip


@pytest.mark.parametrize(
    ("meta", "group"),
    [
        (_meta({"gpucarve.io/pod-group": "g"}), ("g", None)),
        (_meta({"scheduling.x-k8s.io/pod-group": "g", "ray.io/cluster": "r"}), ("g", None)),
        (
            _meta(
                {
                    "leaderworkerset.sigs.k8s.io/name": "llm",
                    "leaderworkerset.sigs.k8s.io/group-index": "2",
                },
                {"leaderworkerset.sigs.k8s.io/size": "4"},
            ),
            ("lws-llm-2", 4),
        ),
        (
            _meta(
                {"jobset.sigs.k8s.io/jobset-name": "js", "batch.kubernetes.io/job-name": "js-w-0"},
                owners=JOB_OWNER,
            ),
            ("jobset-js", None),
        ),
        (_meta({"training.kubeflow.org/job-name": "bert"}), ("bert", None)),
        (_meta({"ray.io/cluster": "rc"}), ("raycluster-rc", None)),
        (_meta({"batch.kubernetes.io/job-name": "train"}, owners=JOB_OWNER), ("job-train", None)),
        (_meta({"job-name": "train"}, owners=JOB_OWNER), ("job-train", None)),
        # a job-name label without the Job owning the pod is no Job's pod
        (_meta({"batch.kubernetes.io/job-name": "train"}), None),
        (_meta({"app": "web"}), None),
        (_meta({"ray.io/cluster": "rc"}, {"gpucarve.io/gang": "false"}), None),
    ],
)
def test_group_of(meta: dict[str, Any], group: tuple[str, int | None] | None) -> None:
    assert group_of(meta) == group


def _job(name: str, parallelism: int | None, completions: int | None,
         jobset: str | None = None, gang: str | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"template": {"metadata": {"annotations": {}}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if gang is not None:
        spec["template"]["metadata"]["annotations"]["gpucarve.io/gang"] = gang
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset} if jobset else {}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec}


def test_a_job_is_a_gang_when_all_its_parallel_pods_must_complete() -> None:
    assert gang_size(_job("a", 4, 4)) == 4
    assert gang_size(_job("a", 4, None)) is None  # a work queue
    assert gang_size(_job("a", 4, 8)) is None  # pods one after another
    assert gang_size(_job("a", None, 1)) is None and gang_size(_job("a", 1, 1)) is None
    assert gang_size(_job("a", 4, 4, gang="false")) is None


def test_job_and_jobset_gang_sizes() -> None:
    jobs = [
        _job("solo", 4, 4),
        _job("queue", 4, None),
        _job("js-driver-0", 1, 1, jobset="js"),
        _job("js-workers-0", 3, 3, jobset="js"),
        _job("bad-driver-0", 1, 1, jobset="bad"),
        _job("bad-pool-0", 5, None, jobset="bad"),  # independent pods: no gang size
    ]
    assert job_specs(jobs) == {("ns", "job-solo"): GroupSpec(4), ("ns", "jobset-js"): GroupSpec(4)}


def test_a_jobset_waits_for_the_jobs_it_says_it_has() -> None:
    workers = _job("js-workers-0", 3, 3, jobset="js")
    workers["metadata"]["labels"]["jobset.sigs.k8s.io/global-replicas"] = "3"
    # two Jobs to come: one pod each at least, so the three workers wait
    assert job_specs([workers]) == {("ns", "jobset-js"): GroupSpec(5)}
    second = _job("js-workers-1", 3, 3, jobset="js")
    driver = _job("js-driver-0", 1, 1, jobset="js")
    assert job_specs([workers, second, driver]) == {("ns", "jobset-js"): GroupSpec(7)}


def test_a_jobs_own_deadline_bounds_its_gangs_runtime() -> None:
    from datetime import UTC, datetime

    from gpucarve.config.policy_build import load_policy
    from gpucarve.kube.view.pods.pods import pending_workloads
    from tests.paths import BUILTIN

    solo = _job("solo", 2, 2)
    solo["spec"]["activeDeadlineSeconds"] = 600
    js = [_job("js-a-0", 2, 2, jobset="js"), _job("js-b-0", 2, 2, jobset="js")]
    js[0]["spec"]["activeDeadlineSeconds"] = 900
    js[1]["spec"]["activeDeadlineSeconds"] = 300
    specs = job_specs([solo, *js])
    assert specs[("ns", "job-solo")] == GroupSpec(2, deadline_s=600)
    assert specs[("ns", "jobset-js")].deadline_s == 300  # the least of its Jobs'
    # the gang's pods carry no deadline of their own: the Job's bounds the workload
    policy = load_policy(BUILTIN / "three-teams.yaml").policy
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "solo", "uid": "u",
              "controller": True}]  # fmt: skip
    pods = [
        {"metadata": {"name": f"solo-{i}", "namespace": "research", "ownerReferences": owner,
                      "labels": {"batch.kubernetes.io/job-name": "solo"},
                      "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        for i in range(2)
    ]  # fmt: skip
    epoch = datetime(2026, 1, 1, tzinfo=UTC)
    specs = {("research", "job-solo"): GroupSpec(2, deadline_s=600)}
    (group,) = pending_workloads(pods, policy, epoch, specs)
    assert group.workload is not None and group.workload.runtime_limit_s == 600
    # a pod's own shorter deadline still wins
    pods[0]["spec"]["activeDeadlineSeconds"] = 120
    pods[1]["spec"]["activeDeadlineSeconds"] = 120
    (group,) = pending_workloads(pods, policy, epoch, specs)
    assert group.workload is not None and group.workload.runtime_limit_s == 120
