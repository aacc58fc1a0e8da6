"""ResourceClaims, templates and pods as the DRA integration tests write and read them."""

from __future__ import annotations

from typing import Any

from tests.integration.api import Api

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
