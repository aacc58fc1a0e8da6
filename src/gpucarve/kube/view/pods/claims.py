"""What pods' ResourceClaims ask (`attach_claims`): a pending pod's claims (named, or made from
its template by kube-controller-manager and named in the pod's status) become a typed value,
`PodClaims`, that `pods.pending_workloads` makes the pod set's `deviceClaims` of; a pod whose
claim does not exist yet waits for it, and what gpucarve cannot serve (a claim another pod
holds, `allocationMode: All`, a choice of `firstAvailable` alternatives) is refused with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucarve.core.vocabulary import HOSTNAME_LABEL

# The claim controller of kube-controller-manager deallocates a claim with this finalizer once
# no pod is reserved for it, and then removes it (as it does for kube-scheduler's claims).
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True)
class PodClaims:
    """What a pending pod's ResourceClaims ask: their device requests (the pod set's
    `deviceClaims`), their resourceVersions (a change of a claim is a change of the pod for
    the workload cache), and the node its devices are on when a claim it shares is allocated
    there already (the pod must run there)."""

    requests: tuple[Mapping[str, Any], ...] = ()
    versions: tuple[str, ...] = ()
    node: str | None = None


@dataclass(frozen=True)
class ClaimRef:
    entry: str  # the pod's name for it (spec.resourceClaims[].name)
    claim: str | None  # namespace/name of the ResourceClaim, None while it does not exist
    template: str | None


def claim_refs(pod: Mapping[str, Any]) -> list[ClaimRef]:
    """The pod's claims, in its order: named ones, and those made from a template (named in
    the pod's status once kube-controller-manager made them)."""
    ns = pod["metadata"]["namespace"]
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for e in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = e.get("resourceClaimName") or made.get(e.get("name"))
        out.append(
            ClaimRef(str(e.get("name")), f"{ns}/{name}" if name else None,
                     e.get("resourceClaimTemplateName"))
        )  # fmt: skip
    return out


def object_key(obj: Mapping[str, Any]) -> str:
    """namespace/name of a namespaced object (a pod, a claim)."""
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def claim_requests(claim: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The claim's device requests as `deviceClaims` entries, or why gpucarve cannot serve
    them."""
    out: list[dict[str, Any]] = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exact = r.get("exactly")
        if exact is None:
            return [], (
                f"request {r.get('name')!r} offers firstAvailable alternatives, which gpucarve "
                "does not choose among yet; ask with `exactly`"
            )
        if exact.get("allocationMode", "ExactCount") != "ExactCount":
            return [], (
                f"request {r.get('name')!r} asks for all matching devices "
                "(allocationMode: All); ask for a count"
            )
        selectors = [
            str((s.get("cel") or {}).get("expression", "")) for s in exact.get("selectors") or []
        ]
        out.append(
            {
                "name": str(r.get("name")),
                "deviceClassName": str(exact.get("deviceClassName", "")),
                "count": int(exact.get("count", 1)),
                "selectors": selectors,
                "capacity": dict((exact.get("capacity") or {}).get("requests") or {}),
            }
        )
    return out, None


def followed(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """Whether the pod shares a claim that is allocated and reserved for another pod: it then
    uses the devices already allocated (on their node) and asks for none."""
    status = claim.get("status") or {}
    name = pod["metadata"]["name"]
    others = [r for r in status.get("reservedFor") or [] if r.get("name") != name]
    return bool(status.get("allocation")) and bool(others)


def claim_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim's devices are on, from its allocation's node selector
    (`metadata.name In [node]`, as gpucarve and kube-scheduler write it)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            values = f.get("values") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def _pinned_away(pod: Mapping[str, Any], nodes: set[str]) -> str | None:
    """Why a pod sharing allocated claims cannot run on their node (None: it can)."""
    if len(nodes) > 1:
        return f"dra/claim-shared: the claims it shares are on different nodes ({sorted(nodes)})"
    own = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    if own is not None and own not in nodes:
        return (
            f"dra/claim-shared: its nodeSelector asks for node {own}, the claim it shares is "
            f"allocated on {next(iter(nodes))}; remove the node selector, or claim devices of "
            "its own"
        )
    return None


def _unservable(
    pod: Mapping[str, Any], ref: ClaimRef, claim: Mapping[str, Any] | None
) -> str | None:
    """Why the pod cannot be placed as this claim of it stands (None: it can)."""
    if claim is None:
        made = f", made from template {ref.template!r}" if ref.template else ""
        return (
            f"dra/claim-missing: waiting for its ResourceClaim {ref.claim or ''} (claim "
            f"{ref.entry!r}{made}; kube-controller-manager's resourceclaim controller makes "
            "claims from templates)"
        )
    if followed(pod, claim) and claim_node(claim) is None:
        return (
            f"dra/claim-shared: ResourceClaim {ref.claim} is allocated with no single node in "
            "its node selector; gpucarve places a pod sharing a claim on the claim's node"
        )
    refused = claim_requests(claim)[1]
    if refused is not None:
        return f"dra/claim-unsupported: ResourceClaim {ref.claim}: {refused}"
    return None


def attach_claims(
    pods: Sequence[Mapping[str, Any]], claims: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, PodClaims], dict[str, str]]:
    """Per pending pod with claims that can be placed as they stand (namespace/name), what
    they ask; per pod that cannot, why."""
    asked: dict[str, PodClaims] = {}
    waiting: dict[str, str] = {}
    taken: dict[str, str] = {}  # claim -> the first pending pod that names it
    for pod in pods:
        refs = claim_refs(pod)
        if not refs:
            continue
        key = object_key(pod)
        entries: list[dict[str, Any]] = []
        versions: list[str] = []
        nodes: set[str] = set()
        why = None
        for ref in refs:
            claim = claims.get(ref.claim) if ref.claim else None
            why = _unservable(pod, ref, claim)
            if why is not None or claim is None:
                break
            versions.append(str(claim["metadata"].get("resourceVersion", "")))
            if followed(pod, claim):
                nodes.add(str(claim_node(claim)))  # its devices are allocated already
                continue
            first = taken.setdefault(str(ref.claim), key)
            if first != key:
                # two waiting pods naming one claim not allocated yet: the first is placed and
                # allocates it, then the second follows it to its node
                why = (
                    f"dra/claim-shared: ResourceClaim {ref.claim} is named by pod {first} too, "
                    "placed first; this pod then runs where its devices are"
                )
                break
            entries += claim_requests(claim)[0]
        if why is None and nodes:
            why = _pinned_away(pod, nodes)
        if why is not None:
            waiting[key] = why
            continue
        asked[key] = PodClaims(tuple(entries), tuple(versions), nodes.pop() if nodes else None)
    return asked, waiting
