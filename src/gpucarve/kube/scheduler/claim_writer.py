"""Allocating a bound pod's ResourceClaims, as kube-scheduler's DRA plugin does, before the
binding: the claim gets kube-controller-manager's delete-protection finalizer (so that once no
pod is reserved for it any more, the claim controller deallocates it and lets it go), then its
status: the devices gpucarve chose (`claim_allocation.allocation_for`), the node, and the
pod it is reserved for. The kubelet starts a pod with claims only once they are allocated and
reserved for it.

A claim already allocated as asked and reserved for the pod is left alone (a retried binding).
One allocated otherwise but reserved for no running pod (a binding that failed after its
claims were written) is deallocated first; the view held its devices meanwhile, so nothing
was promised twice. One reserved for another pod is never rewritten: a pod that shares it
(the view placed it on the claim's node, asking for no device of it) is added to its
`reservedFor`, as kube-scheduler does, by a patch that applies only to the claim as the cache
showed it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from gpucarve.kube.api.client import ApiError, Client
from gpucarve.kube.api.informer import Informer
from gpucarve.kube.scheduler.claim_allocation import allocation_for
from gpucarve.kube.view.nodes.devices import DraDevices
from gpucarve.kube.view.pods.assigned import Assigned
from gpucarve.kube.view.pods.claims import DELETE_PROTECTION, claim_refs, followed

RESOURCE = "/apis/resource.k8s.io/v1"


def _path(claim: str) -> str:
    ns, _, name = claim.partition("/")
    return f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}"


class ClaimWriter:
    def __init__(
        self, client: Client, claims: Informer | None, dra: Callable[[], DraDevices]
    ) -> None:
        self.client = client
        self.claims = claims
        self.dra = dra

    def write(self, pod: Mapping[str, Any], a: Assigned) -> None:
        """Allocate the pod's claims to the devices of `a` (nothing for a pod without
        claims). Raises ApiError when the API server refuses."""
        if self.claims is None or not claim_refs(pod):
            return
        cached = {
            ref.claim: obj
            for ref in claim_refs(pod)
            if ref.claim and (obj := self.claims.get(ref.claim)) is not None
        }
        try:
            wanted = allocation_for(pod, cached, a.node, a.slices, self.dra())
        except ValueError as err:
            raise ApiError("PATCH", "resourceclaims", 409, str(err)) from None
        for claim, status in wanted:
            self._write_one(claim, cached[claim], status)
        for claim, obj in cached.items():
            if followed(pod, obj):
                self._join(claim, obj, pod)

    def _join(self, claim: str, current: Mapping[str, Any], pod: Mapping[str, Any]) -> None:
        """Reserve a shared, allocated claim for one more pod (a test of the version the
        cache showed: a claim changed meanwhile fails the binding, retried next cycle)."""
        meta = pod["metadata"]
        reserved = (current.get("status") or {}).get("reservedFor") or []
        if any(r.get("name") == meta["name"] for r in reserved):
            return  # a retried binding: reserved for it already
        entry = {"resource": "pods", "name": meta["name"], "uid": meta.get("uid")}
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": current["metadata"].get("resourceVersion")},
            {"op": "add", "path": "/status/reservedFor/-", "value": entry},
        ]  # fmt: skip
        self.client.call("PATCH", f"{_path(claim)}/status", patch, "application/json-patch+json")

    def _write_one(self, claim: str, current: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        have = current.get("status") or {}
        if (
            have.get("allocation") == status["allocation"]
            and have.get("reservedFor") == status["reservedFor"]
        ):
            return
        others = [r.get("name") for r in have.get("reservedFor") or []]
        if others and others != [r["name"] for r in status["reservedFor"]]:
            # in use by another pod: never take its devices from under it
            raise ApiError(
                "PATCH", _path(claim), 409, f"ResourceClaim {claim} is in use by {others}"
            )
        path = _path(claim)
        if have.get("allocation") is not None:
            self.client.call(
                "PATCH",
                f"{path}/status",
                {"status": {"allocation": None, "reservedFor": None}},
                "application/merge-patch+json",
            )
        if DELETE_PROTECTION not in (current["metadata"].get("finalizers") or []):
            self.client.call(
                "PATCH",
                path,
                {"metadata": {"finalizers": [DELETE_PROTECTION]}},
                "application/strategic-merge-patch+json",
            )
        self.client.call(
            "PATCH", f"{path}/status", {"status": dict(status)}, "application/merge-patch+json"
        )

    def release(self, pod: Mapping[str, Any]) -> None:
        """After a failed binding, take back what was written for the pod (best effort: the
        view holds an allocated claim's devices until the claim controller or the next
        binding clears it). Only a claim the cache shows reserved for this pod alone, or not
        yet written, is touched."""
        if self.claims is None:
            return
        name = pod["metadata"]["name"]
        for ref in claim_refs(pod):
            obj = self.claims.get(ref.claim) if ref.claim else None
            if obj is None:
                continue
            reserved = (obj.get("status") or {}).get("reservedFor") or []
            if reserved and [r.get("name") for r in reserved] != [name]:
                # shared: only this pod's place in it goes (once the cache shows it there)
                left = [r for r in reserved if r.get("name") != name]
                if len(left) < len(reserved):
                    with contextlib.suppress(ApiError):
                        self.client.call(
                            "PATCH", f"{_path(str(ref.claim))}/status",
                            {"status": {"reservedFor": left}}, "application/merge-patch+json",
                        )  # fmt: skip
                continue
            with contextlib.suppress(ApiError):
                self.client.call(
                    "PATCH",
                    f"{_path(str(ref.claim))}/status",
                    {"status": {"allocation": None, "reservedFor": None}},
                    "application/merge-patch+json",
                )
