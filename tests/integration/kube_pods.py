"""Pods, pod groups and clean-up for the scheduler's integration tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpucarve.cli.main import app
from tests.integration.api import Api, wait_for

COSCHEDULING_CRD = Path(__file__).parent / "data" / "coscheduling-podgroups.yaml"

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(
    namespace: str,
    name: str,
    resource: str,
    count: int = 1,
    *,
    group: str | None = None,
    priority_class: str | None = None,
    scheduler: str = "gpucarve",
    cpu: str = "1",
) -> dict[str, Any]:
    labels = {"app": "t"}
    if group is not None:
        labels["scheduling.x-k8s.io/pod-group"] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "main",
                "image": "fake",
                "resources": {
                    "requests": {"cpu": cpu, resource: str(count)},
                    "limits": {resource: str(count)},
                },
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def create_pod(api: Api, manifest: dict[str, Any]) -> None:
    api.create(f"/api/v1/namespaces/{manifest['metadata']['namespace']}/pods", manifest)


def pod_group(
    api: Api,
    namespace: str,
    name: str,
    min_member: int,
    group: str = "gpucarve.io",
    **spec: Any,
) -> None:
    """A PodGroup of gpucarve (or, with `group="scheduling.x-k8s.io"`, of coscheduling)."""
    api.create(
        f"/apis/{group}/v1alpha1/namespaces/{namespace}/podgroups",
        {
            "apiVersion": f"{group}/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": min_member, **spec},
        },
    )


def pods_in(api: Api, namespace: str) -> dict[str, dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return {p["metadata"]["name"]: p for p in items}


def node_of(p: dict[str, Any]) -> str | None:
    return (p.get("spec") or {}).get("nodeName")


def condition(p: dict[str, Any], kind: str = "PodScheduled") -> dict[str, Any] | None:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def delete_all(api: Api, namespaces: list[str]) -> None:
    """Force-delete every pod (grace 0: gone at once, no kubelet to wait for)."""
    for ns in namespaces:
        for name in pods_in(api, ns):
            api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")


def install_coscheduling_crd(api: Api) -> None:
    """The coscheduling plugin's PodGroup CRD, established (served) before it returns."""
    crd = yaml.safe_load(COSCHEDULING_CRD.read_text())
    status, body = api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status in (201, 409), body

    def established() -> bool:
        got = api.get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        )
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        )

    wait_for(established, what="the coscheduling CRD established")


def planned(policy_file: Path, namespace: str, names: list[str], resource: str) -> dict[str, Any]:
    """Where `gpucarve plan` puts one-pod workloads asking one `resource` each, submitted in
    order: name -> the slices of its pod (to hold the scheduler's bindings against)."""
    workloads = policy_file.parent / "workloads.yaml"
    limits = {"requests": {"cpu": "1", resource: "1"}, "limits": {resource: "1"}}
    items = [
        {"name": n, "namespace": namespace, "submitTime": i,
         "podSets": [{"name": "set-0", "resources": limits}]}
        for i, n in enumerate(names)
    ]  # fmt: skip
    workloads.write_text(yaml.safe_dump({"workloads": items}))
    result = CliRunner().invoke(app, ["plan", str(policy_file), str(workloads), "--json"])
    assert result.exit_code == 0, result.output
    return {
        a["workload"].split("/")[1]: [s for p in a["pods"] for s in p["slices"]]
        for a in json.loads(result.output)["admissions"]
    }


def completing(
    api: Api, manifest: dict[str, Any], run_s: int, exact: bool = False
) -> dict[str, Any]:
    """`manifest` (a pod of `pod`) made a pod kwok completes `run_s` after it runs: kwok
    completes pods a Job owns, so a suspended Job of the same name is made its owner (no job
    controller adopts it: the reference is not a controller's). `exact`: the jitter annotation
    set to the delay as well (the stack's kwok adds no jitter of its own: `_kwok_stages`)."""
    meta = manifest["metadata"]
    job = api.create(
        f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs",
        {
            "metadata": {"name": meta["name"]},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "fake"}],
                    }
                },
            },
        },
    )
    annotations = {"pod-complete.stage.kwok.x-k8s.io/delay": f"{run_s}s"}
    if exact:
        annotations["pod-complete.stage.kwok.x-k8s.io/jitter-delay"] = f"{run_s}s"
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    meta["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
         "uid": job["metadata"]["uid"]}
    ]  # fmt: skip
    manifest["spec"]["restartPolicy"] = "Never"
    return manifest
