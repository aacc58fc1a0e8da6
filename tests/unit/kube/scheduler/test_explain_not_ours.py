"""`gpucarve explain` of a pod that is no workload of the scheduler says which reason holds,
with the fix where there is one (a GPU pod of a namespace no queue lists was told it had no
GPU request)."""

from __future__ import annotations

from typing import Any

from gpucarve.kube.scheduler.explain import not_ours
from tests.engine.builders import mixed_policy

POLICY = mixed_policy()
GOVERNED = sorted(POLICY.governed_namespaces())[0]


def _pod(ns: str, gpus: int = 1, scheduler: str = "gpucarve", phase: str = "Pending") -> Any:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"schedulerName": scheduler,
                 "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }  # fmt: skip


def test_a_gpu_pod_of_an_ungoverned_namespace_is_told_to_join_a_queue() -> None:
    said = not_ours(_pod("elsewhere"), POLICY, "gpucarve")
    assert "namespace elsewhere is in no queue of the policy" in said
    assert "fix: add elsewhere to a queue's namespaces" in said
    assert "no GPU" not in said


def test_each_other_reason_is_named() -> None:
    assert "asks for no GPU" in not_ours(_pod(GOVERNED, gpus=0), POLICY, "gpucarve")
    assert "has succeeded" in not_ours(_pod(GOVERNED, phase="Succeeded"), POLICY, "gpucarve")
    other = not_ours(_pod(GOVERNED, scheduler="default-scheduler"), POLICY, "gpucarve")
    assert "spec.schedulerName is not gpucarve" in other and "fix: set schedulerName" in other
    # a CPU pod of an ungoverned namespace gets no fix: nothing to do
    assert "fix" not in not_ours(_pod("elsewhere", gpus=0), POLICY, "gpucarve")
