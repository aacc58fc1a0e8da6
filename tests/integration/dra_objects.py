"""ResourceClaims, templates and pods as the DRA integration tests write and read them, and
the cluster they run on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpucarve.devcluster.stack import ADMIN_USER, LocalStack, find_binaries
from gpucarve.kube.scheduler.loop import Scheduler
from tests.integration.api import Api
from tests.integration.stack_setup import populate, scheduling

RESOURCE = "/apis/resource.k8s.io/v1"
NS = "research"


def claim_spec(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """A ResourceClaim's spec from a workload file's `deviceClaims`."""
    out = []
    for r in requests:
        exactly: dict[str, Any] = {
            "deviceClassName": r["deviceClassName"],
            "count": r.get("count", 1),
            "selectors": [{"cel": {"expression": s}} for s in r.get("selectors", [])],
        }
        if r.get("capacity"):
            exactly["capacity"] = {"requests": r["capacity"]}
        out.append({"name": r.get("name", "gpu"), "exactly": exactly})
    return {"devices": {"requests": out}}


def pod(name: str, *, template: str | None = None, claim: str | None = None,
         gpus: int = 0, group: str | None = None, ns: str = NS) -> dict[str, Any]:  # fmt: skip
    """A pod that claims its GPUs through a template (a claim of its own per pod) or a named
    claim, or asks the device plugin for `gpus`."""
    container: dict[str, Any] = {"name": "main", "image": "fake"}
    spec: dict[str, Any] = {"schedulerName": "gpucarve", "containers": [container]}
    if template or claim:
        ref = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
        spec["resourceClaims"] = [{"name": "gpus", **ref}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    labels = {"gpucarve.io/pod-group": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }


def claims(api: Api, ns: str = NS) -> dict[str, dict[str, Any]]:
    items = api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]
    return {c["metadata"]["name"]: c for c in items}


def claim_of(api: Api, pod_name: str, ns: str = NS) -> dict[str, Any] | None:
    for c in claims(api, ns).values():
        reserved = (c.get("status") or {}).get("reservedFor") or []
        if [r["name"] for r in reserved] == [pod_name]:
            return c
    return None


def devices(claim: dict[str, Any]) -> list[tuple[str, str]]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return sorted((r["pool"], r["device"]) for r in results)


@contextmanager
def dra_cluster(
    workdir: Path, policy_file: Path, namespaces: list[str]
) -> Iterator[tuple[Api, Scheduler]]:
    """The stack as shipped (its webhook, the ResourceClaim controller) with the policy's nodes,
    queues, DeviceClasses and the ResourceSlices its DRA pools' driver would publish, and a
    gpucarve scheduler by the policy running while the block runs (the API, the scheduler)."""
    with LocalStack(find_binaries(), workdir / "stack", policy_file) as stack:
        api = Api(stack.server, stack.tokens[ADMIN_USER])
        populate(stack, api, policy_file, namespaces)
        with scheduling(stack, policy_file) as sched:
            yield api, sched
