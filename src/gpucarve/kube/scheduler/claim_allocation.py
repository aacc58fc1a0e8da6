"""The allocation gpucarve writes for each claim of a pod it binds (`allocation_for`): the
devices taken in the order of the pod's claims and their requests."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gpucarve.core.vocabulary import DRA_GPU_DRIVER
from gpucarve.kube.view.nodes.devices import DraDevices, device_unit
from gpucarve.kube.view.pods.claims import claim_refs, claim_requests, followed


def allocation_for(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    node: str,
    slices: Sequence[str],
    dra: DraDevices,
) -> list[tuple[str, dict[str, Any]]]:
    """(claim, its status) for each claim of a pod bound to `slices` of `node` (slice ids,
    `node/gpu3`, `node/gpu3/3g.40gb@4`): their devices in the order of the pod's claims and
    their requests, the node as the allocation's node selector, and the pod as what the claim
    is reserved for. Raises ValueError when the claims and the slices do not add up (a claim
    gone or changed since the cycle)."""
    slots = dra.slots.get(node, {})
    left = [sid.split("/", 1)[1] for sid in slices]
    out: list[tuple[str, dict[str, Any]]] = []
    for ref in claim_refs(pod):
        claim = claims.get(ref.claim) if ref.claim else None
        if claim is None:
            raise ValueError(f"its ResourceClaim for {ref.entry!r} is gone")
        if followed(pod, claim):
            continue  # shared, allocated already: the writer adds the pod to reservedFor
        requests, refused = claim_requests(claim)
        if refused is not None:
            raise ValueError(refused)
        results = []
        for r in requests:
            results += _results(r, left, slots, node, str(claim["metadata"].get("uid", ref.claim)))
        status = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ]}
                    ]
                },
            },
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"],
                 "uid": pod["metadata"].get("uid")}
            ],
        }  # fmt: skip
        out.append((str(ref.claim), status))
    if left:
        raise ValueError(f"devices {left} of {node} are claimed by no request of the pod")
    return out


def _results(
    r: Mapping[str, Any],
    left: list[str],
    slots: Mapping[str, tuple[str, str]],
    node: str,
    claim_uid: str,
) -> list[dict[str, Any]]:
    """One request's results, taking its units off the front of `left`: a device per unit,
    or for a share of a GPU (consumable capacity) the GPU of its replicas, once, with the
    memory it consumes and a share id of its own."""
    out: list[dict[str, Any]] = []
    shared = r.get("capacity") or {}
    for _ in range(1 if shared else int(r["count"])):
        unit = device_unit(left[0]) if left else ""
        if unit not in slots:
            raise ValueError(f"no DRA device of {node} left for request {r['name']!r}")
        pool, device = slots[unit]
        result: dict[str, Any] = {
            "request": r["name"], "driver": DRA_GPU_DRIVER, "pool": pool, "device": device
        }  # fmt: skip
        if shared:
            # every replica the engine gave the pod is on this GPU: the share is one result
            while left and device_unit(left[0]) == unit:
                left.pop(0)
            result["consumedCapacity"] = {k: str(v) for k, v in sorted(shared.items())}
            # deterministic: the same claim, request and device give the same id
            result["shareID"] = str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{claim_uid}/{r['name']}/{device}")
            )
        else:
            left.pop(0)
        out.append(result)
    return out
