"""The webhook's decisions without a server: which pods are touched, the patch, the
problems (the scheduler's own), and the Queue checks a schema cannot make."""

from __future__ import annotations

import json
from typing import Any

from gpucarve.config.policy_build import load_policy
from gpucarve.kube.admission import mutate, pod_problems, queue_problems, wants_gpu
from tests.paths import BUILTIN

POLICY = load_policy(BUILTIN / "three-teams.yaml").policy


def _pod(ns: str, limits: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "generateName": "job-", **meta},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_only_gpu_pods_of_governed_namespaces_are_changed() -> None:
    assert not wants_gpu(_pod("research", {"cpu": "1"}))
    assert mutate(POLICY, _pod("research", {"cpu": "1"}), "gpucarve").patch == []
    assert mutate(POLICY, _pod("kube-system", {"nvidia.com/gpu": "1"}), "gpucarve").patch == []
    other = _pod("research", {"nvidia.com/gpu": "1"})
    other["spec"]["schedulerName"] = "volcano"
    assert all(op["path"] != "/spec/schedulerName" for op in mutate(POLICY, other, "g").patch)


def test_the_patch_sets_scheduler_queue_and_requests_and_lists_them() -> None:
    p = _pod("research", {"nvidia.com/gpu": "2"}, labels={"app": "x"})
    m = mutate(POLICY, p, "gpucarve")
    ops = {op["path"]: op["value"] for op in m.patch}
    assert ops["/spec/schedulerName"] == "gpucarve"
    assert ops["/metadata/labels/gpucarve.io~1queue"] == "research"
    assert ops["/spec/containers/0/resources/requests"] == {}
    assert ops["/spec/containers/0/resources/requests/nvidia.com~1gpu"] == "2"
    assert json.loads(ops["/metadata/annotations/gpucarve.io~1mutated"]) == m.changes
    assert "/metadata/labels" not in ops  # the pod has labels: only the key is added
    # a namespace in two queues gets no label (the pod must say which)
    assert len(m.changes) == 3


def test_problems_are_the_schedulers_and_none_for_good_pods() -> None:
    assert pod_problems(POLICY, _pod("research", {"nvidia.com/gpu": "8"})) == []
    bad = _pod("research", {"nvidia.com/gpu": "8"}, labels={"gpucarve.io/queue": "production"})
    (p,) = pod_problems(POLICY, bad)
    assert p.code == "queue-not-for-namespace"
    assert pod_problems(POLICY, _pod("elsewhere", {"nvidia.com/gpu": "8"})) == []


def test_queue_checks_beyond_the_schema() -> None:
    q = {"metadata": {"name": "research"},
         "spec": {"cohort": "nowhere", "quota": {"h100-full": {"nominal": 999},
                                                 "tpu-v5": {"nominal": 1}}}}  # fmt: skip
    codes = sorted(p.code for p in queue_problems(POLICY, q))
    assert codes == ["quota-exceeds-capacity", "unknown-cohort", "unknown-flavor"]
    ok = {"metadata": {"name": "research"},
          "spec": {"cohort": "company", "quota": {"h100-full": {"nominal": 16}}}}  # fmt: skip
    assert queue_problems(POLICY, ok) == []


def test_pod_group_queue_and_priority_are_the_namespaces() -> None:
    from gpucarve.kube.admission import pod_group_problems

    def group(ns: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": "g", "namespace": ns}, "spec": {"minMember": 2, **spec}}

    assert pod_group_problems(POLICY, group("research")) == []
    assert pod_group_problems(POLICY, group("elsewhere", queue="production")) == []
    (p,) = pod_group_problems(POLICY, group("research", queue="production"))
    assert p.code == "queue-not-for-namespace"
    (p,) = pod_group_problems(POLICY, group("research", priorityClassName="production-critical"))
    assert p.code == "priority-class-not-allowed"
